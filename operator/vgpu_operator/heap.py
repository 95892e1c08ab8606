"""Freed memory given back to the system: glibc's `malloc_trim`.

glibc keeps what a process frees for its next allocations. Once a large block allocated with
mmap is freed (a configuration pass's pickled snapshot of thousands of Nodes, a page of a
listing), its dynamic mmap threshold rises to that block's size, up to 32 MiB on 64-bit, and the
trim threshold to twice that (mallopt(3), M_MMAP_THRESHOLD and M_TRIM_THRESHOLD): the next such
blocks come from the heap, and a heap shrinks only from its top, past that threshold. Megabytes
the process no longer holds then stay resident. `malloc_trim(0)` hands every whole free page of
every arena back (malloc_trim(3); since glibc 2.8 not only the top of the heap).

`give_back()` is called where a process has just dropped a large transient: the controller after
a configuration pass and after a full node pass, the rules worker after each snapshot. With a C
library that has no `malloc_trim` (musl, macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

_trim: Callable[[int], int] | None = None
_loaded = False


def _malloc_trim() -> Callable[[int], int] | None:
    global _trim, _loaded
    if not _loaded:
        _loaded = True
        try:
            libc = ctypes.CDLL(None)  # the process and the C library it runs on
            trim = libc.malloc_trim
        except (OSError, AttributeError):
            return None
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
        _trim = trim
    return _trim


def give_back() -> bool:
    """Hand the free pages of the C heap back to the system; False where the C library cannot
    (or had nothing to give)."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False

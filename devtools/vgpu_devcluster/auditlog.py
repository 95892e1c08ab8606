"""Reading the apiserver's audit log while it grows: whole lines only.

The apiserver writes one event as one line in one write(2) (k8s.io/apiserver@v0.35.4:
plugin/pkg/audit/log/backend.go `logEvent`), but a reader can still see part of it: the kernel
copies a write into the page cache a page at a time, and the filesystem's `write_end` moves
the file's size after each page (torvalds/linux@v6.1:mm/filemap.c `generic_perform_write`).
An event longer than a page, as a RequestResponse event often is, can be seen half written,
both at the end of a read and in the size `stat` gives. Measured here: an offset taken from the
size began in the middle of a line, and the next read of the log failed to parse it.
"""

from __future__ import annotations

import os
from pathlib import Path

_CHUNK = 1 << 16


def whole_lines(path: Path, offset: int = 0) -> tuple[list[bytes], int]:
    """The complete lines after byte `offset` (which should be a line's start, as `line_end`
    gives), and the offset after the last of them: a line being written is read next time."""
    if not path.exists():
        return [], offset
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    whole = data.rfind(b"\n") + 1
    return [line for line in data[:whole].splitlines() if line.strip()], offset + whole


def line_end(path: Path) -> int:
    """The offset just after the log's last complete line (0 when it has none): where the next
    event to be written will start."""
    if not path.exists():
        return 0
    with path.open("rb") as f:
        end = f.seek(0, os.SEEK_END)
        while end > 0:
            start = max(0, end - _CHUNK)
            f.seek(start)
            newline = f.read(end - start).rfind(b"\n")
            if newline >= 0:
                return start + newline + 1
            end = start
    return 0

"""vgpu_operator/heap.py: freed C-heap pages go back to the system (glibc's malloc_trim(3))."""

from __future__ import annotations

import platform

import pytest

from vgpu_operator import heap


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_small_blocks_are_given_back() -> None:
    # 100 MiB of small blocks, every 50th kept: the heap cannot shrink from its top, so
    # without a trim the freed pages stay resident.
    blocks = [bytes(1000) for _ in range(100_000)]
    kept = blocks[::50]
    del blocks
    before = _rss_mib()
    assert heap.give_back() is True
    assert before - _rss_mib() > 40, "most of the 100 MiB freed should have left the process"
    assert len(kept) == 2000

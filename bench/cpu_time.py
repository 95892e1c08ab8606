"""CPU time from /proc: of a process, of its process tree (the operator and its rules worker), of
the whole machine; and the waits on them before a clock starts (the operator idle, the machine
quiet)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

from benchkit import Progress, log, process_tree

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of `process_tree(pid)`: the operator and its rules worker."""
    total = 0.0
    for p in process_tree(pid):
        with contextlib.suppress(OSError):
            total += cpu_seconds(p)
    return total


def machine_cpu_seconds() -> float:
    """CPU time every process on the machine spent so far (/proc/stat, all but idle/iowait)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(v) for i, v in enumerate(fields[:8]) if i not in (3, 4))
    return busy / CLK_TCK


async def idle(pid: int, progress: Progress, busy: float = 0.05, quiet: int = 2) -> None:
    """Until the process and its children use under `busy` of a core for `quiet` seconds in
    a row (the caller's phase bounds the wait)."""
    calm, last = 0, tree_cpu_seconds(pid)
    while calm < quiet:
        await asyncio.sleep(1)
        now = tree_cpu_seconds(pid)
        calm = calm + 1 if now - last < busy else 0
        progress(f"the operator to go idle (it used {now - last:.2f} CPU s in the last second)")
        last = now


async def quiet_machine(
    n: int, busy: float = 0.5, quiet: int = 3, limit: float | None = None
) -> None:
    """Until the whole machine uses under `busy` of a core for `quiet` seconds in a row, at
    most `limit` seconds (None: `quiet_deadline(n)`; then the run starts anyway, and says so):
    creating and deleting N nodes leaves the controller manager, etcd and kwok busy for a
    while, and a run started meanwhile measures their backlog, not the writer (at 5,000 nodes
    the second run's pool took three times as long to create as the first's)."""
    deadline = quiet_deadline(n) if limit is None else limit
    began, calm, last = time.monotonic(), 0, machine_cpu_seconds()
    while calm < quiet:
        await asyncio.sleep(1)
        now = machine_cpu_seconds()
        used, last = now - last, now
        calm = calm + 1 if used < busy else 0
        if time.monotonic() - began > deadline:
            log(f"the machine is not quiet after {deadline:.0f}s ({used:.2f} CPU s/s): starting")
            return
    log(f"machine quiet after {time.monotonic() - began:.1f}s")


def quiet_deadline(n: int) -> float:
    return 60 + n * 0.03

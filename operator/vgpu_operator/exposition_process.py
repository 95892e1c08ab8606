"""The process's own metrics, as prometheus_client's default collectors export them (same names,
types, HELP and labels: prometheus_client 0.26, process_collector.py, gc_collector.py and
platform_collector.py), computed at each scrape from /proc and the interpreter; for
`exposition.REGISTRY`. `process_resident_memory_bytes` is what a fleet's memory is sized by."""

from __future__ import annotations

import gc
import os
import resource
import sys
from collections.abc import Iterator
from pathlib import Path

from vgpu_operator.exposition import Family, Registry

PAGE_SIZE = resource.getpagesize()
TICKS = os.sysconf("SC_CLK_TCK")


def install(registry: Registry, proc: Path = Path("/proc")) -> None:
    """Register the process, garbage collector and platform families on `registry`."""
    boot = _boot_time(proc)
    info = _python_info()

    def collect() -> Iterator[Family]:
        if boot is not None:
            yield from _process(proc / "self", boot)
        yield from _gc()
        yield info

    registry.collector(collect)


def _boot_time(proc: Path) -> float | None:
    try:
        for line in (proc / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        return None  # no /proc: no process families, as prometheus_client
    return None


def _process(pid: Path, boot: float) -> Iterator[Family]:
    try:
        parts = (pid / "stat").read_bytes().split(b")")[-1].split()
    except OSError:
        return
    yield _one("process_virtual_memory_bytes", "Virtual memory size in bytes.", float(parts[20]))
    yield _one(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        float(parts[21]) * PAGE_SIZE,
    )
    yield _one(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        float(parts[19]) / TICKS + boot,
    )
    cpu = (float(parts[11]) + float(parts[12])) / TICKS
    yield _one(
        "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.",
        cpu,
        "counter",
    )
    try:
        open_fds = len(os.listdir(pid / "fd"))
        max_fds = next(
            float(line.split()[3])
            for line in (pid / "limits").read_text().splitlines()
            if line.startswith("Max open file")
        )
    except (OSError, StopIteration, IndexError, ValueError):
        return
    yield _one("process_open_fds", "Number of open file descriptors.", open_fds)
    yield _one("process_max_fds", "Maximum number of open file descriptors.", max_fds)


def _gc() -> Iterator[Family]:
    stats = gc.get_stats()
    for key, name, help in (
        ("collected", "python_gc_objects_collected_total", "Objects collected during gc"),
        (
            "uncollectable",
            "python_gc_objects_uncollectable_total",
            "Uncollectable objects found during GC",
        ),
        (
            "collections",
            "python_gc_collections_total",
            "Number of times this generation was collected",
        ),
    ):
        samples = [(name, {"generation": str(g)}, float(s[key])) for g, s in enumerate(stats)]
        yield Family(name, help, "counter", samples)


def _python_info() -> Family:
    """prometheus_client reads these from `platform` (python_version_tuple and
    python_implementation); sys has the same values without importing it."""
    v = sys.version_info
    version = f"{v.major}.{v.minor}.{v.micro}"
    if v.releaselevel != "final":
        version += f"{v.releaselevel[0] if v.releaselevel != 'candidate' else 'rc'}{v.serial}"
    names = {"cpython": "CPython", "pypy": "PyPy", "ironpython": "IronPython", "jython": "Jython"}
    labels = {
        "implementation": names.get(sys.implementation.name, sys.implementation.name),
        "major": str(v.major),
        "minor": str(v.minor),
        "patchlevel": str(v.micro),
        "version": version,
    }
    return Family(
        "python_info", "Python platform information", "gauge", [("python_info", labels, 1.0)]
    )


def _one(name: str, help: str, value: float, type: str = "gauge") -> Family:
    return Family(name, help, type, [(name, {}, float(value))])

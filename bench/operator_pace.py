"""What the operator's passes took over a timed window of bench/rollout.py: how many reconcile
passes it made and their mean wall time (its own `vgpu_operator_reconcile_duration_seconds`,
read from its metrics port), and how long its main thread (the event loop) ran and how long it
was runnable but waiting for a core (`/proc/PID/schedstat`: on two cores the fake nvidia-smi
keeps busy, most of a pass's wall time was that wait at 1,000 nodes, 2026-11-26).

    before = await pace(session, port, pid)
    ...  # the run
    log((await pace(session, port, pid) - before).text())
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from vgpu_operator.controller.metrics import RECONCILE_SECONDS

HISTOGRAM = next(iter(RECONCILE_SECONDS.describe())).name  # the operator's own name, not a copy


@dataclass(frozen=True)
class Pace:
    passes: float  # reconcile passes
    pass_seconds: float  # their wall time, summed
    ran: float  # seconds the main thread was on a CPU
    waited: float  # seconds it was runnable, waiting for one

    def __sub__(self, other: Pace) -> Pace:
        return Pace(
            self.passes - other.passes,
            self.pass_seconds - other.pass_seconds,
            self.ran - other.ran,
            self.waited - other.waited,
        )

    def text(self) -> str:
        mean = self.pass_seconds / self.passes if self.passes else 0.0
        return (
            f"{self.passes:.0f} reconcile passes, {mean:.2f} s each on average; its event loop "
            f"ran {self.ran:.1f} s and waited {self.waited:.1f} s for a core"
        )


def histogram(text: str, name: str = HISTOGRAM) -> tuple[float, float]:
    """(count, sum) of a Prometheus histogram in the text exposition format."""
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for sample in family.samples
    }
    return values.get(f"{name}_count", 0.0), values.get(f"{name}_sum", 0.0)


def schedstat(pid: int) -> tuple[float, float]:
    """(on a CPU, waiting on a run queue), seconds, of the process's main thread: the first two
    fields of /proc/PID/schedstat, in nanoseconds (the kernel's Documentation/scheduler/
    sched-stats.rst)."""
    ran, waited, *_ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(ran) / 1e9, int(waited) / 1e9


async def pace(session: aiohttp.ClientSession, port: int, pid: int) -> Pace:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        resp.raise_for_status()
        count, total = histogram(await resp.text())
    ran, waited = schedstat(pid)
    return Pace(count, total, ran, waited)

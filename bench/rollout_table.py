"""The table bench/rollout.py prints: per transition, the operator's row, the floor's and their
ratio.

A Markdown table. Columns: the run's total seconds and nodes per minute; each node's transition
(median/p90 s) and its phases (Draining: cordon to the pod gone and the next step written;
Pausing: the plugin's placement off to the release; Applying: the release to the agent's report
and the resume; Verifying: to the uncordon; `-`: the transition has no such phase); the pod's
termination (eviction seen to pod deleted) and the agent's apply (release to its report), both
waits the writer does not control; the writer's own share (the node's transition less those two
waits), median/p90 s and its percentage of all nodes' transition time; the writes per node (node
PATCHes, evictions, Events); CPU seconds over the run of the writer (the operator process with
its rules worker; the floor's is the benchmark's own process, not shown), the apiserver, the
agents (`-`: in the benchmark's process), their fake nvidia-smi calls, and the whole machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rollout_watch import STEPS, RunStats, Spread


@dataclass(frozen=True)
class Side:
    name: str  # operator | floor
    stats: RunStats
    writes: float  # per node
    cpu: dict[str, float | None]  # writer, apiserver, agents, fake, machine


COLUMNS = [
    ("transition", "---"),
    ("side", "---"),
    ("total s", "---:"),
    ("nodes/min", "---:"),
    ("node s", "---:"),
    *((f"{p} s", "---:") for p in STEPS),
    ("pod s", "---:"),
    ("agent s", "---:"),
    ("own s", "---:"),
    ("own %", "---:"),
    ("writes/node", "---:"),
    ("CPU s: writer", "---:"),
    ("apiserver", "---:"),
    ("agents", "---:"),
    ("fake nvidia-smi", "---:"),
    ("machine", "---:"),
]


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _cpu(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _spread(steps: dict[str, Spread], phase: str) -> str:
    return steps[phase].text() if phase in steps else "-"


def row(key: str, side: Side) -> list[str]:
    s, c = side.stats, side.cpu
    failed = f" ({s.failed} failed)" if s.failed else ""
    return [
        key,
        side.name + failed,
        f"{s.seconds:.1f}",
        f"{s.per_minute:.1f}",
        s.node_total.text(),
        *(_spread(s.steps, p) for p in STEPS),
        s.pod_wait.text(),
        s.agent.text(),
        s.own.text(),
        f"{100 * s.own_share:.1f}",
        f"{side.writes:.1f}",
        *(_cpu(c.get(k)) for k in ("writer", "apiserver", "agents", "fake", "machine")),
    ]


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "-"


def ratio_row(key: str, op: Side, floor: Side) -> list[str]:
    """Operator over floor: the run's total time, the median node's, the median own share."""
    a, b = op.stats, floor.stats
    cells = [""] * len(COLUMNS)
    cells[:4] = [key, "operator/floor", _ratio(a.seconds, b.seconds), ""]
    cells[4] = _ratio(a.node_total.median, b.node_total.median)
    cells[[name for name, _ in COLUMNS].index("own s")] = _ratio(a.own.median, b.own.median)
    return cells


def _header() -> list[str]:
    return [_line([name for name, _ in COLUMNS]), _line([align for _, align in COLUMNS])]


def side_table(key: str, side: Side) -> str:
    """One side's row under the header: the operator's, logged before its floor runs."""
    return "\n".join([*_header(), _line(row(key, side))])


def table(results: Sequence[tuple[Any, Side, Side]]) -> str:
    """A Markdown table of `results` ((transition, operator side, floor side) each), then each
    transition's title."""
    lines = _header()
    for t, op, floor in results:
        lines += [_line(row(t.key, op)), _line(row(t.key, floor))]
        lines.append(_line(ratio_row(t.key, op, floor)))
    lines.append("")
    lines += [f"{t.key}: {t.title}" for t, _, _ in results]
    return "\n".join(lines)

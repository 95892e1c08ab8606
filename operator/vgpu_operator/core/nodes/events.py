"""Events, few and useful: ONE per policy per reconcile that changed something, summarising it
("3 nodes configured, 1 node released, 0 conflicts"), and node events only when a node's mode
changes or something fails on it. Thousands of Events for one edit would flood the apiserver.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Literal

from vgpu_operator import contract
from vgpu_operator.core.nodes.planner import NodePlan


@dataclass(frozen=True)
class EventSpec:
    """An Event to post: the object it is about, its type, reason and message."""

    kind: Literal["VGPUNodePolicy", "Node"]
    name: str
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class Summary:
    configured: int = 0
    updated: int = 0
    released: int = 0
    conflicts: int = 0
    blocked: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.configured or self.updated or self.released)

    def text(self) -> str:
        def n(count: int, word: str) -> str:
            return f"{count} node {word}" if count == 1 else f"{count} nodes {word}"

        conflicts = f"{self.conflicts} conflict" + ("" if self.conflicts == 1 else "s")
        return ", ".join(
            [
                n(self.configured, "configured"),
                n(self.updated, "updated"),
                n(self.released, "released"),
                conflicts,
                n(self.blocked, "blocked"),
            ]
        )


def summarize(policy: str, plans: Iterable[NodePlan]) -> Summary:
    """What one reconcile did to the nodes of `policy` (joined, changed, left, stuck)."""
    configured = updated = released = conflicts = blocked = 0
    for plan in plans:
        if policy in plan.conflict:
            conflicts += 1
        elif plan.new_owner == policy:
            if plan.action == "configure":
                configured += 1
            elif plan.action == "update":
                updated += 1
            elif plan.action == "blocked":
                blocked += 1
        elif plan.old_owner == policy and plan.patch is not None:
            released += 1
    return Summary(configured, updated, released, conflicts, blocked)


def policy_event(policy: str, plans: Iterable[NodePlan]) -> EventSpec | None:
    """The one Event on the policy for this reconcile, or None when no node changed."""
    summary = summarize(policy, plans)
    if not summary.changed:
        return None
    warn = summary.conflicts or summary.blocked
    return EventSpec(
        kind=contract.POLICY_KIND,
        name=policy,
        type="Warning" if warn else "Normal",
        reason="NodesReconciled",
        message=summary.text(),
    )


# At most this many node Events per reconcile: one edit over a 5,000-node pool must not post
# 5,000 Events. The policy's summary Event says how many were left out.
MAX_NODE_EVENTS = 20


def node_events(
    plans: Iterable[NodePlan],
    already_reported: Collection[tuple[str, str]] = (),
    limit: int = MAX_NODE_EVENTS,
) -> tuple[list[EventSpec], int]:
    """Node Events: a mode change that is being written, or a problem not reported before.

    `already_reported` holds (node, reason) pairs known from earlier reconciles (for example
    the policy status' problem list), so a standing problem is reported once, not every time.
    A node's plan given twice (written, and with a problem that stays: a held layout,
    `core.nodes.planner`) gets each Event once. Returns the Events, Warnings first, cut at
    `limit`, and how many were left out.
    """
    events: list[EventSpec] = []
    for plan in sorted(plans, key=lambda p: p.node):
        if plan.mode_changed:
            old = plan.old_mode or "none"
            new = plan.new_mode or "none"
            by = (
                f"policy {plan.new_owner}" if plan.new_owner else f"leaving policy {plan.old_owner}"
            )
            events.append(
                EventSpec("Node", plan.node, "Normal", "ModeChanged", f"mode {old} -> {new} ({by})")
            )
        for problem in (*plan.problems, *plan.notices):
            if (plan.node, problem.reason) in already_reported:
                continue
            events.append(
                EventSpec("Node", plan.node, "Warning", problem.reason, problem.describe())
            )
    events = list(dict.fromkeys(events))  # each once, in order (EventSpec is frozen)
    events.sort(key=lambda e: e.type != "Warning")  # stable: Warnings first, then by node
    return events[:limit], max(0, len(events) - limit)

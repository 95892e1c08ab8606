"""How consistency findings reach people: the `ConfigConsistent` condition of each policy, one
Warning Event per finding (not one per pass), and counts for the `vgpu_operator_findings` metric.

A finding that names Nodes concerns the policies owning them; one that names no Node (a
ConfigMap, the scheduler, a DaemonSet) concerns every policy. Notes (`info`) never make a policy
inconsistent.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from vgpu_operator.models.findings import Finding, ObjectRef

CONDITION = "ConfigConsistent"
MAX_LISTED = 5
MAX_MESSAGE = 1000

ConditionValue = tuple[str, str, str]  # (status, reason, message)


def concerns(finding: Finding, policy_nodes: Collection[str]) -> bool:
    nodes = [o.name for o in finding.objects if o.kind == "Node"]
    return not nodes or any(n in policy_nodes for n in nodes)


def _objects(f: Finding) -> str:
    return ", ".join(str(o) for o in f.objects[:3]) + (" ..." if len(f.objects) > 3 else "")


def config_condition(
    findings: Sequence[Finding] | None,
    policy_nodes: Collection[str],
    *,
    mode: str = "enforce",
) -> ConditionValue:
    """The `ConfigConsistent` condition for a policy owning `policy_nodes`; `findings` None:
    not checked yet (or the check failed)."""
    if findings is None:
        return ("Unknown", "NotChecked", "the Volcano/HAMi configuration has not been checked yet")
    mine = [f for f in findings if f.severity != "info" and concerns(f, policy_nodes)]
    if not mine:
        return ("True", "Consistent", "the Volcano/HAMi configuration agrees with itself")
    counts = Counter(f.severity for f in mine)
    fixable = sum(1 for f in mine if f.fixable_by_operator)
    head = ", ".join(f"{n} {sev}(s)" for sev, n in sorted(counts.items()))
    rules = sorted({f.id for f in mine})
    listed = "; ".join(f"{f.id}: {_objects(f)}" for f in mine[:MAX_LISTED])
    more = f" and {len(mine) - MAX_LISTED} more" if len(mine) > MAX_LISTED else ""
    fix = (
        f"{fixable} fixable by the operator"
        + (" (report mode: not applied)" if mode == "report" else "")
        + "; run `vgpu-operator doctor` for the fixes"
    )
    message = f"{head} in {', '.join(rules)}: {listed}{more}. {fix}"
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    reason = "Inconsistent" if counts.get("error") else "Warnings"
    return ("False", reason, message)


def finding_key(f: Finding) -> str:
    """Identity of a finding across passes: its rule, objects and message (messages carry no
    times that change from pass to pass)."""
    text = "|".join([f.id, *(str(o) for o in f.objects), f.message])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class FindingEvent:
    """A Warning Event to post on `target` for one finding."""

    key: str
    target: ObjectRef
    reason: str
    message: str


# A queued event: its FindingEvent first, then what the shell keeps to send it.
_Queued = TypeVar("_Queued", bound=tuple[FindingEvent, Any])


def _reason(rule_id: str) -> str:
    return "Config" + "".join(part.capitalize() for part in rule_id.split("-"))


def finding_events(
    findings: Iterable[Finding], posted: Collection[str]
) -> tuple[list[FindingEvent], set[str]]:
    """Events for findings not posted before (each on every object it names); returns (events,
    keys of all current findings). Keys of findings that went away drop out, so a problem that
    comes back is reported again. How fast they are sent is the shell's (`still_found`)."""
    events: list[FindingEvent] = []
    current: set[str] = set()
    for f in findings:
        if f.severity == "info":
            continue
        key = finding_key(f)
        current.add(key)
        if key in posted:
            continue
        message = f"{f.message} Fix: {f.fix}"
        for obj in f.objects:
            events.append(FindingEvent(key, obj, _reason(f.id), message))
    return events, current


def still_found(queued: Iterable[_Queued], current: Collection[str]) -> list[_Queued]:
    """The queued events (each a FindingEvent first, in a tuple) whose finding a newer pass
    still found: a problem fixed before its Event was sent is not reported."""
    return [q for q in queued if q[0].key in current]


def finding_counts(findings: Iterable[Finding]) -> dict[tuple[str, str], int]:
    """(rule, severity) -> number of findings."""
    return dict(Counter((f.id, f.severity) for f in findings))

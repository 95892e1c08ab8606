"""`mode: observe`, the pure part: what `enforce` would write, restart or reconfigure, said per
object in words a person checks against the cluster.

In `observe` mode the operator reads everything and writes nothing but its own policies' status
and Events. The node plans are the reconciler's own (`core.nodes.planner.plan_cluster`, as if every
change were released at once); the Volcano/HAMi side is `core.plan.plan` run on the
configuration pass's snapshot as `enforce` would see it. `controller.observe` posts one Event per
object and change, logs it, and puts the summary in each policy's `Observed` condition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vgpu_operator.core.nodes.facts import NodeFacts, taint_key
from vgpu_operator.core.nodes.planner import ClusterPlan
from vgpu_operator.core.plan import Plan

CONDITION = "Observed"
MAX_LISTED = 5
MAX_MESSAGE = 1024

ConditionValue = tuple[str, str, str]  # status, reason, message


@dataclass(frozen=True, order=True)
class WouldDo:
    """One object `enforce` would change: `verb` is write | restart | blocked."""

    kind: str
    namespace: str
    name: str
    verb: str
    what: str
    policy: str | None = None  # the node's policy (None: cluster-wide)
    # When a deferred write or restart falls due. Not part of what is compared: in observe mode
    # the writes before it never happen, so every pass plans it anew from its own `now`, and the
    # same restart would otherwise read as a new one pass after pass.
    due: datetime | None = field(default=None, compare=False)

    @property
    def reason(self) -> str:
        return {"write": "WouldWrite", "restart": "WouldRestart"}.get(self.verb, "WouldBlock")

    @property
    def message(self) -> str:
        """`what`, with the due time of what waits."""
        return self.what if self.due is None else f"{self.what} (due {self.due:%Y-%m-%dT%H:%M:%SZ})"

    def line(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}: {self.what}"


def _changes(kind: str, wanted: Mapping[str, Any], current: Mapping[str, str]) -> list[str]:
    out = []
    for key, value in sorted(wanted.items()):
        if value is None:
            out.append(f"-{kind} {key}")
        elif key in current:
            out.append(f"~{kind} {key}={value}" if kind == "label" else f"~{kind} {key}")
        else:
            out.append(f"+{kind} {key}={value}" if kind == "label" else f"+{kind} {key}")
    return out


def describe_patch(facts: NodeFacts | None, patch: Mapping[str, Any]) -> str:
    """A node PATCH in words: `+label k=v`, `-label k`, `~annotation k`, `+taint k=v:E`,
    `-taint k:E`, `cordon`/`uncordon`."""
    meta = patch.get("metadata") or {}
    labels = facts.labels if facts is not None else {}
    annotations = facts.annotations if facts is not None else {}
    parts = _changes("label", meta.get("labels") or {}, labels)
    parts += _changes("annotation", meta.get("annotations") or {}, annotations)
    spec = patch.get("spec") or {}
    if "taints" in spec:
        before = {taint_key(t): t for t in (facts.taints if facts is not None else ())}
        after = {taint_key(t): t for t in spec.get("taints") or []}
        for key in sorted(after.keys() - before.keys()):
            value = after[key].get("value")
            parts.append(f"+taint {key[0]}{'=' + value if value else ''}:{key[1]}")
        for key in sorted(before.keys() - after.keys()):
            parts.append(f"-taint {key[0]}:{key[1]}")
        for key in sorted(before.keys() & after.keys()):
            if before[key].get("value") != after[key].get("value"):
                parts.append(f"~taint {key[0]}={after[key].get('value') or ''}:{key[1]}")
    if "unschedulable" in spec:
        parts.append("cordon" if spec["unschedulable"] else "uncordon")
    return ", ".join(parts) or "no change"


def node_would_do(cluster: ClusterPlan, nodes: Mapping[str, NodeFacts]) -> list[WouldDo]:
    """Per node: the PATCH enforce would send, or why it would refuse to write the node."""
    out: list[WouldDo] = []
    for name, plan in sorted(cluster.plans.items()):
        policy = plan.new_owner or plan.old_owner
        if plan.patch is not None:
            what = f"{plan.action}: {describe_patch(nodes.get(name), plan.patch)}"
            out.append(WouldDo("Node", "", name, "write", what, policy))
        elif plan.action == "blocked" and plan.problems:
            reasons = "; ".join(p.message for p in plan.problems)
            out.append(WouldDo("Node", "", name, "blocked", f"not written: {reasons}", policy))
    return out


def configuration_would_do(plan: Plan) -> list[WouldDo]:
    """The Volcano/HAMi side of a plan computed as enforce: its write plan's ConfigMap writes
    (only those whose content differs), DaemonSet patches and restarts, each with when it falls
    due if it waits."""
    out: list[WouldDo] = []
    for cm in plan.configmaps:
        verb = "create" if cm.create else "rewrite"
        entries = f" (node entries: {', '.join(cm.entries)})" if cm.entries else ""
        lines = sum(
            1
            for line in cm.diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        )
        what = f"{verb}, {lines} changed lines{entries}"
        out.append(WouldDo("ConfigMap", cm.namespace, cm.name, "write", what))
    for w in plan.workloads:
        what = f"patch ({'; '.join(w.what)}), which restarts its pods"
        out.append(WouldDo(w.kind, w.namespace, w.name, "write", what, due=w.due))
    for r in plan.restarts:
        if r.action.node is not None:  # one plugin pod: said on its Node
            what = f"restart its device plugin pod {r.name}: {r.reason}"
            out.append(WouldDo("Node", "", r.action.node, "restart", what, due=r.due))
            continue
        what = f"restart: {r.reason}"
        out.append(WouldDo(r.kind, r.namespace, r.name, "restart", what, due=r.due))
    return out


def observed_condition(
    policy: str, nodes: Sequence[WouldDo], configuration: Sequence[WouldDo] | None
) -> ConditionValue:
    """The `Observed` condition of a policy: True when enforce would change nothing (its nodes
    and the Volcano/HAMi objects), False listing what it would change."""
    mine = [w for w in nodes if w.policy == policy]
    changes = [*mine, *(configuration or ())]
    pending = "" if configuration is not None else " (the Volcano/HAMi objects not read yet)"
    if not changes:
        return ("True", "NothingToChange", f"observe mode: enforce would change nothing{pending}")
    writes = sum(1 for w in mine if w.verb == "write")
    blocked = sum(1 for w in mine if w.verb == "blocked")
    cfg = [w for w in changes if w.kind != "Node"]
    restarts = sum(1 for w in cfg if w.verb == "restart")
    head = (
        f"observe mode: enforce would write {writes} node(s) ({blocked} refused), "
        f"{len(cfg) - restarts} Volcano/HAMi object(s) and restart {restarts}{pending}"
    )
    listed = "; ".join(w.line() for w in changes[:MAX_LISTED])
    more = (
        f"; and {len(changes) - MAX_LISTED} more (Events on each object)"
        if len(changes) > MAX_LISTED
        else ""
    )
    message = f"{head}: {listed}{more}"
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    reason = "WouldRestart" if restarts else "WouldChange"
    return ("False", reason, message)


def disruptive(items: Iterable[WouldDo]) -> list[WouldDo]:
    """What of it a person switching to enforce must look at first: restarts, refusals, and node
    writes touching taints or cordoning."""
    return [
        w
        for w in items
        if w.verb in ("restart", "blocked")
        or (w.kind == "Node" and ("taint" in w.what or "cordon" in w.what))
        or w.kind in ("DaemonSet", "Deployment")
    ]

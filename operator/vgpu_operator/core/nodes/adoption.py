"""Arriving on a hand-configured cluster, and leaving it, without disturbing it.

Arriving (`spec.adoptExisting`): a label or taint a node already carries with exactly the value a
policy wants is never a collision and costs no write (`core.nodes.planner` writes only differences).
By default it stays the user's: it is not put in the ownership record `vgpu.volcano.sh/owned`, so
the operator never removes it when the node leaves the pool. With `adoptExisting: true` it is
recorded as the operator's (`core.nodes.planner.Desired.adopt`), and removed like any label the
operator set.

Leaving (`spec.onDelete`, default from the operator config's `onDelete`; recorded on each node in
`vgpu.volcano.sh/owned` as `onDelete` when it is `Retain` or set explicitly, so a policy that
vanishes without the operator's finalizer pass still decides): `Delete` releases the
policy's nodes (the operator removes what its record says it set, and parks a MIG node in
whole-GPU mode); `Retain` leaves every label, taint, MIG layout and released configuration in
place and only stops managing the node: one PATCH drops the ownership record, the desired
configuration and the `vgpu.volcano.sh/policy` label, and marks the node
`vgpu.volcano.sh/retained=<policy>`. From then on a node of no policy carrying that mark is left
alone (no cleanup, no parking), until a policy selects it again: it is then configured like any
node, its labels and taints now the user's (adopted when equal, a collision when not).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Literal

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import NodeFacts, taint_value
from vgpu_operator.core.nodes.validate import ParsedPolicy

OnDelete = Literal["Delete", "Retain"]

__all__ = [
    "OnDelete",
    "adopted",
    "left_retained",
    "on_delete",
    "recorded_on_delete",
    "retain_patch",
    "retains",
    "with_on_delete_default",
]


def on_delete(parsed: ParsedPolicy | None, default: OnDelete = "Delete") -> OnDelete:
    """The policy's `spec.onDelete`, else `default` (the operator config's)."""
    if parsed is None or parsed.policy is None or parsed.policy.spec.on_delete is None:
        return default
    return parsed.policy.spec.on_delete


def with_on_delete_default(
    policies: Iterable[ParsedPolicy], default: OnDelete
) -> list[ParsedPolicy]:
    """The policies, each with `spec.onDelete` set: its own, else `default`. The reconciler
    plans with these, so `core.nodes.planner` needs no operator config."""
    out: list[ParsedPolicy] = []
    for p in policies:
        if p.policy is None or p.policy.spec.on_delete is not None or default == "Delete":
            out.append(p)
            continue
        spec = p.policy.spec.model_copy(update={"on_delete": default})
        out.append(replace(p, policy=p.policy.model_copy(update={"spec": spec})))
    return out


def retains(
    old_owner: str | None, policies: Mapping[str, ParsedPolicy], facts: NodeFacts | None = None
) -> bool:
    """The node's policy is being deleted and says `onDelete: Retain`; or it is gone (its
    finalizer was removed by hand before the operator's pass: `helm uninstall --no-hooks`, a
    stuck deletion) and the node's own record says `Retain` (`Owned.on_delete`, written with
    the policy's choice when the node was configured). A policy that still exists decides; a
    record that says nothing releases the node (`Delete`, the default)."""
    if old_owner is None:
        return False
    parsed = policies.get(old_owner)
    if parsed is not None:
        return parsed.deleting and on_delete(parsed) == "Retain"
    return facts is not None and recorded_on_delete(facts) == "Retain"


def recorded_on_delete(facts: NodeFacts) -> OnDelete | None:
    """The `onDelete` the node's ownership record carries (None: it says nothing)."""
    return facts.owned.on_delete


def left_retained(facts: NodeFacts) -> bool:
    """A node a `Retain` deletion left as it was: no policy's, and not to be cleaned."""
    return facts.policy_label is None and contract.ANN_RETAINED in facts.annotations


def retain_patch(facts: NodeFacts) -> dict[str, Any] | None:
    """The PATCH that stops managing a node and leaves everything else in place: the ownership
    record, the desired configuration, the rollout state and the policy label go; the user's and
    the policy's labels and taints, the mode and device-plugin labels (the HAMi plugin's
    DaemonSet selects on the latter) and the released configuration (what the agent keeps
    applied and the node-config entry is rendered from) stay."""
    policy = facts.policy_label
    if policy is None:
        return None
    annotations: dict[str, str | None] = {contract.ANN_RETAINED: policy}
    for key in (contract.ANN_OWNED, contract.ANN_TARGET, contract.ANN_ROLLOUT):
        if key in facts.annotations:
            annotations[key] = None
    return {
        "metadata": {
            "resourceVersion": facts.resource_version,
            "labels": {contract.LABEL_POLICY: None},
            "annotations": dict(sorted(annotations.items())),
        }
    }


def adopted(
    facts: NodeFacts, labels: Mapping[str, str], taints: Iterable[tuple[str, str, str]]
) -> list[str]:
    """What of a policy's labels and taints (key, value, effect) the node already carries with
    the same value and the operator did not record: adopted without a write (for reports)."""
    out = [
        f"label {k}={v}"
        for k, v in sorted(labels.items())
        if facts.labels.get(k) == v and k not in facts.owned.labels
    ]
    current = facts.taint_map()
    recorded = {(t.key, t.effect) for t in facts.owned.taints}
    for key, value, effect in taints:
        have = current.get((key, effect))
        if have is not None and taint_value(have) == value and (key, effect) not in recorded:
            out.append(f"taint {key}={value}:{effect}")
    return out

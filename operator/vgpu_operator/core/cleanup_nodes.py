"""What `vgpu-operator cleanup` does to each node, as the policies' `onDelete` and the node's
running work allow. Pure: no I/O.

- A node of a policy whose `onDelete` is `Retain` (its own, else the operator config's `onDelete`)
  is left as it is and only stops being managed, as the controller does when such a policy is
  deleted (`core.nodes.adoption.retain_patch`): the ownership record, the desired configuration and
  the policy label go, `vgpu.volcano.sh/retained=<policy>` marks it; its labels, taints, MIG
  layout, released configuration and HAMi's placement label stay. A transition under way is
  undone first (the GPU Operator's operands it paused put back, its cordon lifted), since
  nothing will finish it.
- A node a `Retain` deletion already left (`vgpu.volcano.sh/retained`, no policy label) is not
  touched.
- Any other node is stripped of what the operator set (`core.cleanup.node_cleanup`), unless GPU
  pods still run on it: taking HAMi's placement, the taint and the node-config entry from under
  them offers their GPUs again as whole GPUs (or turns MIG off under them), so such a node is
  skipped and named, unless `force`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.cleanup import Change, cleanup_rollout, node_cleanup, node_words
from vgpu_operator.core.nodes import adoption
from vgpu_operator.core.nodes.facts import NodeFacts, node_facts
from vgpu_operator.core.nodes.validate import ParsedPolicy, parse_policy
from vgpu_operator.core.rollout.arrive import restored_operands

MAX_NAMED_PODS = 5

__all__ = ["NodeOutcome", "node_outcome", "retained_policies", "retaining_node"]


def retained_policies(
    policies: Sequence[Mapping[str, Any]], default: adoption.OnDelete
) -> frozenset[str]:
    """The policies (raw objects) whose `onDelete` is `Retain`, their own or `default`."""
    parsed: list[ParsedPolicy] = [parse_policy(p) for p in policies]
    return frozenset(p.name for p in parsed if adoption.on_delete(p, default) == "Retain")


def retaining_node(
    raw: Mapping[str, Any],
    retained: Collection[str],
    known: Collection[str],
    default: adoption.OnDelete,
) -> bool:
    """Whether the node is left as it is: a `Retain` deletion left it already, or its policy
    (one of `known`) is in `retained`; a policy that no longer exists says nothing, so the
    operator config's `default` decides."""
    facts = node_facts(raw)
    if adoption.left_retained(facts):
        return True
    policy = facts.policy_label
    if policy is None:
        return False
    return policy in retained if policy in known else default == "Retain"


@dataclass(frozen=True)
class NodeOutcome:
    """The change for one node and, when it was skipped, why (the exit code says so)."""

    change: Change
    skipped: str | None = None


def _retain(raw: Mapping[str, Any]) -> Change:
    facts = node_facts(raw)
    name = facts.name
    if adoption.left_retained(facts):
        why = facts.annotations.get(contract.ANN_RETAINED, "")
        return Change(
            "Node",
            name,
            None,
            None,
            left=(f"everything: policy {why} was deleted with onDelete: Retain",),
        )
    body = adoption.retain_patch(facts) or {"metadata": {"resourceVersion": facts.resource_version}}
    metadata = body["metadata"]
    labels: dict[str, str | None] = dict(metadata.get("labels") or {})
    left: list[str] = []
    record = cleanup_rollout(facts, left)
    if record is not None:
        labels.update(restored_operands(record, facts))
        if record.cordoned and facts.unschedulable:
            body["spec"] = {"unschedulable": None}
    if labels:
        metadata["labels"] = dict(sorted(labels.items()))
    annotations = metadata.get("annotations") or {}
    did = node_words(facts, labels, annotations, body.get("spec"))
    did.append(f"marked {contract.ANN_RETAINED}={facts.policy_label}: no longer managed")
    left.append(
        f"its labels, taints, MIG layout and released configuration (policy "
        f"{facts.policy_label} says onDelete: Retain)"
    )
    return Change("Node", name, None, body, tuple(did), tuple(left))


def node_outcome(
    raw: Mapping[str, Any],
    *,
    retain: bool,
    gpu_pods: Sequence[str] = (),
    force: bool = False,
) -> NodeOutcome:
    """What cleanup does to one node: `retain` (`retaining_node`), or strip it, unless the GPU
    pods (namespace/name) running on it forbid that and `force` is not set."""
    if retain:
        return NodeOutcome(_retain(raw))
    change = node_cleanup(raw)
    if change.patch is None or not gpu_pods or force:
        return NodeOutcome(change)
    facts = node_facts(raw)
    names = ", ".join(gpu_pods[:MAX_NAMED_PODS])
    more = f" and {len(gpu_pods) - MAX_NAMED_PODS} more" if len(gpu_pods) > MAX_NAMED_PODS else ""
    cordon = "; cordoned by the operator's transition" if _cordoned_by_us(facts) else ""
    why = (
        f"everything: {len(gpu_pods)} GPU pod(s) run on it ({names}{more}){cordon}; removing "
        "the operator's placement, taints and configuration under them would offer their GPUs "
        "to other pods (or turn MIG off under them). Drain them (kubectl drain), then run "
        "cleanup again, or run it with --force"
    )
    return NodeOutcome(Change("Node", facts.name, None, None, (), (why,)), skipped=why)


def _cordoned_by_us(facts: NodeFacts) -> bool:
    left: list[str] = []
    record = cleanup_rollout(facts, left)
    return record is not None and record.cordoned and bool(facts.unschedulable)

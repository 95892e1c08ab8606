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
  left configured and named (with its pods and what to do), unless `force`; a deleted policy
  such a node still carries keeps its finalizer (`finalizers_kept`), so that a later run can
  still move the node out through the policy's rollout. The cleanup never evicts a pod itself:
  only the running controller does, through the gate, and only when the policies say so
  (`--evict-gpu-pods`); without it the wait for the controller ends once every node left runs
  GPU pods (`only_gpu_pod_nodes_left`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.cleanup import Change, cleanup_rollout, node_cleanup, node_words
from vgpu_operator.core.nodes import adoption
from vgpu_operator.core.nodes.facts import NodeFacts, node_facts
from vgpu_operator.core.nodes.validate import ParsedPolicy, parse_policy
from vgpu_operator.core.rollout.arrive import restored_operands

MAX_NAMED_PODS = 5

__all__ = [
    "NodeOutcome",
    "finalizers_kept",
    "node_outcome",
    "only_gpu_pod_nodes_left",
    "retained_policies",
    "retaining_node",
]


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
    (one of `known`) is in `retained`; for a policy that no longer exists the node's own record
    decides (`onDelete` in `vgpu.volcano.sh/owned`, as the controller does), and when it says
    nothing, the operator config's `default`."""
    facts = node_facts(raw)
    if adoption.left_retained(facts):
        return True
    policy = facts.policy_label
    if policy is None:
        return False
    if policy in known:
        return policy in retained
    return (adoption.recorded_on_delete(facts) or default) == "Retain"


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
        "to other pods (or turn MIG off under them), and cleanup evicts no GPU pod unless told. "
        "Drain them (kubectl drain) and run cleanup again, or run it with --evict-gpu-pods "
        "(helm: cleanup.evictGpuPods=true) while the controller runs, to drain them through the "
        "policy's rollout, or with --force to strip it under them"
    )
    return NodeOutcome(Change("Node", facts.name, None, None, (), (why,)), skipped=why)


def _cordoned_by_us(facts: NodeFacts) -> bool:
    left: list[str] = []
    record = cleanup_rollout(facts, left)
    return record is not None and record.cordoned and bool(facts.unschedulable)


def _leave_policy(facts: NodeFacts) -> str | None:
    """The policy a transition on the node is charged to (a leave after its release)."""
    left: list[str] = []
    record = cleanup_rollout(facts, left)
    return record.policy if record is not None else None


def only_gpu_pod_nodes_left(
    nodes: Iterable[Mapping[str, Any]], policies: Collection[str], busy: Collection[str]
) -> bool:
    """Every node still held for one of `policies` (its label, or a transition charged to it)
    runs GPU pods (`busy`): what a deletion that evicts nothing keeps, and nothing else."""
    for raw in nodes:
        facts = node_facts(raw)
        held = facts.policy_label in policies or _leave_policy(facts) in policies
        if held and facts.name not in busy:
            return False
    return True


def finalizers_kept(
    nodes: Iterable[Mapping[str, Any]],
    policies: Iterable[Mapping[str, Any]],
    skipped: Collection[str],
) -> dict[str, list[str]]:
    """{deleted policy: its skipped nodes}: the policies whose finalizer stays, because a node
    left configured (GPU pods run there) still carries them."""
    deleting = {
        str(meta.get("name", ""))
        for p in policies
        if (meta := p.get("metadata") or {}).get("deletionTimestamp")
    }
    out: dict[str, list[str]] = {}
    for raw in nodes:
        facts = node_facts(raw)
        policy = facts.policy_label
        if facts.name in skipped and policy in deleting:
            out.setdefault(str(policy), []).append(facts.name)
    return {name: sorted(found) for name, found in out.items()}

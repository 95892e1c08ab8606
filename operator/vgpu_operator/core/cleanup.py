"""What `vgpu-operator cleanup` removes from a cluster the operator leaves: pure, no I/O.

- Nodes: everything the ownership record `vgpu.volcano.sh/owned` says the operator set, removed
  by the same planner that releases a node leaving its pool (`core.nodes.planner.diff` with no
  policy): labels and taints still carrying the recorded value, a user's earlier value of a
  replaced label put back, a user's label or taint never touched, nothing under `kubernetes.io/`
  removed. Then what a node in no pool still keeps while the operator runs, because nobody would
  read it after an uninstall: the released configuration, the agent's state label and inventory,
  the rollout record, and what a transition under way did (`vgpu.volcano.sh/rollout`): the
  GPU Operator's operand switches it paused are put back, a node it cordoned is uncordoned. A
  record that does not parse is left with the labels and taints it names; only the node
  contract's own keys go. Entries of a record the operator may not own
  (`core.nodes.facts.disowned_entries`: Kubernetes' own keys, ...) are left on the node and named.
- HAMi's plugin DaemonSets: the placement patch `core.volcano.placement.plan_placement` adds is
  reverted as the DaemonSet's own record says (`vgpu.volcano.sh/placement`, written in the same
  PATCH): the nodeSelector entry `vgpu.volcano.sh/device-plugin` and each toleration the
  operator added for the policies' taints, nothing a person set (a DaemonSet that tolerated a
  taint before was never given a second toleration for it, and keeps its own).
- Policies: the finalizer `vgpu.volcano.sh/finalizer` is released (other finalizers stay).

Every change is a merge PATCH carrying the resourceVersion it was computed from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import NodeFacts, node_facts, taint_key
from vgpu_operator.core.nodes.patch import Desired, diff
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.core.rollout.arrive import restored_operands
from vgpu_operator.core.volcano.placement import BLOCKING, SelectorKey, toleration_for
from vgpu_operator.models.placement import PlacementRecord, toleration_key
from vgpu_operator.models.policy import Taint
from vgpu_operator.models.rollout import NodeRollout

# The node contract's own keys: written only by the controller and the agent.
CONTRACT_LABELS = (
    contract.LABEL_POLICY,
    contract.LABEL_MODE,
    contract.LABEL_DEVICE_PLUGIN,
    contract.LABEL_STATE,
)
CONTRACT_ANNOTATIONS = (
    contract.ANN_OWNED,
    contract.ANN_TARGET,
    contract.ANN_CONFIG,
    contract.ANN_INVENTORY,
    contract.ANN_ROLLOUT,
    contract.ANN_RETAINED,
)


@dataclass(frozen=True)
class Change:
    """One object's PATCH and what it does, in words."""

    kind: str  # Node | DaemonSet | VGPUNodePolicy
    name: str
    namespace: str | None
    patch: dict[str, Any] | None  # None: nothing to change
    did: tuple[str, ...] = ()
    left: tuple[str, ...] = ()  # what stays, and why

    @property
    def ref(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind.lower()} {where}{self.name}"


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


# --- nodes ------------------------------------------------------------------------------------


def node_cleanup(raw: Mapping[str, Any]) -> Change:
    """The PATCH that leaves a Node with nothing of the operator's (None: it has nothing)."""
    facts = node_facts(raw)
    left: list[str] = []
    if contract.ANN_OWNED in facts.errors:
        body: dict[str, Any] = {"metadata": {"resourceVersion": facts.resource_version}}
        left.append(
            f"annotation {contract.ANN_OWNED} and the labels and taints it names: it "
            f"{facts.errors[contract.ANN_OWNED]}, so none of it is trusted; review them and "
            f"remove them by hand (kubectl annotate node {facts.name} {contract.ANN_OWNED}-)"
        )
        owned_keys: tuple[str, ...] = tuple(
            k for k in CONTRACT_ANNOTATIONS if k != contract.ANN_OWNED
        )
    else:
        body = diff(facts, Desired()) or {"metadata": {"resourceVersion": facts.resource_version}}
        owned_keys = CONTRACT_ANNOTATIONS
    metadata = body["metadata"]
    labels: dict[str, str | None] = dict(metadata.get("labels") or {})
    annotations: dict[str, str | None] = dict(metadata.get("annotations") or {})
    for key in CONTRACT_LABELS:
        if key in facts.labels:
            labels[key] = None
    rollout = cleanup_rollout(facts, left)
    if rollout is not None:
        labels.update(restored_operands(rollout, facts))
        if rollout.cordoned and facts.unschedulable:
            body.setdefault("spec", {})["unschedulable"] = None
    for key in owned_keys:
        if key in facts.annotations:
            annotations[key] = None
    labels = {k: v for k, v in labels.items() if v is not None or k in facts.labels}
    annotations = {k: v for k, v in annotations.items() if v is not None or k in facts.annotations}
    if labels:
        metadata["labels"] = dict(sorted(labels.items()))
    else:
        metadata.pop("labels", None)
    if annotations:
        metadata["annotations"] = dict(sorted(annotations.items()))
    else:
        metadata.pop("annotations", None)
    if facts.config is not None and facts.config.gpu_mig is not None:
        left.append(
            "the GPUs' MIG mode and instances as the agent left them (the agent is gone with "
            "the operator); turn MIG off by hand where needed: nvidia-smi -mig 0"
        )
    left += _changed_by_others(facts)
    left += [
        f"{entry} (listed in {contract.ANN_OWNED}, but never the operator's to remove)"
        for entry in facts.disowned
    ]
    did = node_words(facts, labels, annotations, body.get("spec"))
    patch = body if (labels or annotations or "spec" in body) else None
    return Change("Node", facts.name, None, patch, tuple(did), tuple(left))


def cleanup_rollout(facts: NodeFacts, left: list[str]) -> NodeRollout | None:
    try:
        return NodeRollout.from_annotation(facts.annotations.get(contract.ANN_ROLLOUT))
    except ValueError as exc:  # pydantic's ValidationError is one
        left.append(
            f"what a transition may have done (annotation {contract.ANN_ROLLOUT} does not parse: "
            f"{str(exc).splitlines()[0]}): check the node's cordon and its nvidia.com/gpu.deploy.* "
            "labels"
        )
        return None


def _changed_by_others(facts: NodeFacts) -> list[str]:
    """Recorded labels and taints someone changed since: theirs from then on, left."""
    out = [
        f"label {key}={facts.labels[key]} (the operator set {value}; changed since, so the user's)"
        for key, value in sorted(facts.owned.labels.items())
        if key in facts.labels and facts.labels[key] != value
    ]
    current = facts.taint_map()
    for taint in facts.owned.taints:
        now = current.get((taint.key, taint.effect))
        if now is not None and str(now.get("value") or "") != taint.value:
            out.append(f"taint {_taint_text(now)} (changed since the operator set it)")
    return out


def node_words(
    facts: NodeFacts,
    labels: Mapping[str, str | None],
    annotations: Mapping[str, str | None],
    spec: Mapping[str, Any] | None,
) -> list[str]:
    did = []
    for key, value in labels.items():
        if value is None:
            did.append(f"removed label {key}={facts.labels.get(key, '')}")
        else:
            did.append(f"restored label {key}={value} (its value before the operator)")
    if spec is not None and "taints" in spec:
        kept = {taint_key(t): t for t in spec.get("taints") or []}
        did += [f"removed taint {_taint_text(t)}" for t in facts.taints if taint_key(t) not in kept]
        now = facts.taint_map()
        did += [
            f"restored taint {_taint_text(t)} (its value before the operator)"
            for key, t in kept.items()
            if key in now and (now[key].get("value") or "") != (t.get("value") or "")
        ]
    if spec is not None and "unschedulable" in spec:
        did.append("uncordoned (a transition of the operator had cordoned it)")
    did += [f"removed annotation {key}" for key, value in annotations.items() if value is None]
    return did


# --- plugin DaemonSets ------------------------------------------------------------------------


def operator_taints(
    nodes: Iterable[Mapping[str, Any]], policies: Iterable[Mapping[str, Any]]
) -> list[Taint]:
    """The blocking taints the operator sets: from every node's trusted ownership record and
    every readable policy (a node that left or was deleted still had its policy's taints)."""
    found: dict[tuple[str, str, str], Taint] = {}
    for raw in nodes:
        facts = node_facts(raw)
        if contract.ANN_OWNED not in facts.errors:
            found.update(((t.key, t.effect, t.value), t) for t in facts.owned.taints)
    for raw in policies:
        parsed = parse_policy(raw)
        if parsed.policy is not None:
            taints = parsed.policy.spec.effective_taints()
            found.update(((t.key, t.effect, t.value), t) for t in taints)
    return [t for _, t in sorted(found.items()) if t.effect in BLOCKING]


def placement_revert(daemonset: Mapping[str, Any], taints: Iterable[Taint] = ()) -> Change:
    """The strategic merge PATCH that takes the operator's placement off a plugin DaemonSet:
    exactly what its record (`vgpu.volcano.sh/placement`, `models.placement`) says the operator
    set: each recorded nodeSelector entry still carrying the recorded value, one toleration per
    recorded one, and the record itself (the tolerations list has no merge key in the Pod API, so
    the PATCH carries the whole remaining list). A person's nodeSelector keys and tolerations
    stay. Without a readable record nothing is taken off: a `vgpu.volcano.sh/device-plugin`
    nodeSelector or a toleration of the operator's `taints` is then named as left."""
    meta = _metadata(daemonset)
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    pod = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    selector = pod.get("nodeSelector") or {}
    tolerations = [dict(t) for t in pod.get("tolerations") or [] if isinstance(t, Mapping)]
    raw = (meta.get("annotations") or {}).get(contract.ANN_PLACEMENT)
    left: list[str] = []
    try:
        record = PlacementRecord.from_annotation(raw)
    except ValueError as exc:  # pydantic's ValidationError is one
        record = None
        left.append(
            f"annotation {contract.ANN_PLACEMENT} ({str(exc).splitlines()[0]}): what the "
            "operator's placement set cannot be told from what a person set; review the "
            "nodeSelector and tolerations and remove the operator's by hand"
        )
    spec: dict[str, Any] = {}
    did: list[str] = []
    kept = list(tolerations)
    for key, value in sorted((record.node_selector if record else {}).items()):
        if selector.get(key) == value:
            spec.setdefault("nodeSelector", {})[key] = None
            did.append(f"removed nodeSelector {key}={value}")
        elif key in selector:
            left.append(f"nodeSelector {key}={selector[key]} (changed since the operator set it)")
    for recorded in record.tolerations if record else []:
        at = next(
            (i for i, t in enumerate(kept) if toleration_key(t) == toleration_key(recorded)), None
        )
        if at is not None:
            did.append(f"removed toleration {_taint_text(kept.pop(at))}")
    if len(kept) != len(tolerations):
        spec["tolerations"] = kept
    if raw is None:
        ours = {toleration_key(toleration_for(t)) for t in taints}
        if SelectorKey in selector:
            left.append(f"nodeSelector {SelectorKey}={selector[SelectorKey]} ({_UNRECORDED})")
        left += [
            f"toleration {_taint_text(t)} ({_UNRECORDED})"
            for t in tolerations
            if toleration_key(t) in ours
        ]
    if raw is None or record is None:
        return Change("DaemonSet", name, namespace, None, tuple(did), tuple(left))
    patch: dict[str, Any] = {
        "metadata": {
            "resourceVersion": str(meta.get("resourceVersion") or ""),
            "annotations": {contract.ANN_PLACEMENT: None},
        }
    }
    if spec:
        patch["spec"] = {"template": {"spec": spec}}
    did.append(f"removed annotation {contract.ANN_PLACEMENT}")
    return Change("DaemonSet", name, namespace, patch, tuple(did), tuple(left))


_UNRECORDED = (
    f"no {contract.ANN_PLACEMENT} record says the operator set it, so it is a person's: remove "
    "it by hand if it is not"
)


# --- policies ---------------------------------------------------------------------------------


def finalizer_release(policy: Mapping[str, Any]) -> Change:
    """The merge PATCH that takes the operator's finalizer off a policy (a deletion then
    completes without the operator)."""
    meta = _metadata(policy)
    finalizers = [str(f) for f in meta.get("finalizers") or []]
    name = str(meta.get("name", ""))
    if contract.FINALIZER not in finalizers:
        return Change(contract.POLICY_KIND, name, None, None)
    rest = [f for f in finalizers if f != contract.FINALIZER]
    patch = {
        "metadata": {
            "resourceVersion": str(meta.get("resourceVersion") or ""),
            "finalizers": rest or None,
        }
    }
    return Change(
        contract.POLICY_KIND, name, None, patch, (f"released finalizer {contract.FINALIZER}",)
    )

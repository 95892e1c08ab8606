"""What `plan` shows of each node it would write: the action, the owners and modes before and
after, the PATCH, how disruptive the change is (as the rollout classifies it, with the GPU pods
running there) and what the rollout's step does to the node in this pass. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.mergepatch import apply_merge_patch
from vgpu_operator.core.nodes.planner import NodePlan
from vgpu_operator.core.nodes.step import NodeStep
from vgpu_operator.core.rollout.arrival import arrival_kind
from vgpu_operator.core.rollout.arrive import ChangeKind, NodeView
from vgpu_operator.core.rollout.decide import GpuPod
from vgpu_operator.core.rollout.gpu_pods import gpu_pod_of, holds_gpu, snapshot_gpu_resources
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, meta, name_of, pod_done
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.volcano import registration

__all__ = ["NodeChange", "node_change", "rollout_pods"]


@dataclass(frozen=True)
class NodeChange:
    """One node the operator would write (or could not)."""

    node: str
    action: str  # core.nodes.planner's: configure, update, release, blocked, conflict, held
    old_owner: str | None
    new_owner: str | None
    old_mode: str | None
    new_mode: str | None
    patch: Mapping[str, Any] | None = None
    change: str = "none"  # core.rollout.arrival.arrival_kind: trivial, restart, disruptive
    disruptive: str | None = None  # why the change is disruptive (None: it is not)
    gpu_pods: tuple[str, ...] = ()  # namespace/name of the GPU pods running there
    step: str | None = None  # what the rollout does to the node in this pass
    problems: tuple[str, ...] = ()

    @property
    def enters(self) -> bool:
        return self.new_owner is not None and self.new_owner != self.old_owner

    @property
    def leaves(self) -> bool:
        return self.old_owner is not None and self.new_owner != self.old_owner


def _gpu_pods(s: ClusterSnapshot, node: str) -> tuple[str, ...]:
    resources = snapshot_gpu_resources(s)
    return tuple(
        sorted(
            f"{meta(p).get('namespace')}/{name_of(p)}"
            for p in s.pods_on(node)
            if not pod_done(p) and holds_gpu(p, resources, s.claims)
        )
    )


def rollout_pods(s: ClusterSnapshot) -> dict[str, tuple[GpuPod, ...]]:
    """Each node's GPU pods as the controller hands them to the rollout (the pod index's)."""
    resources = snapshot_gpu_resources(s)
    out: dict[str, tuple[GpuPod, ...]] = {}
    for n in s.nodes:
        name = name_of(n)
        on = [p for p in s.pods_on(name) if not pod_done(p) and holds_gpu(p, resources, s.claims)]
        out[name] = tuple(g for g in map(gpu_pod_of, on) if g is not None)
    return out


def _kind(
    raw: Mapping[str, Any], wanted: NodeConfig | None, pods: tuple[GpuPod, ...]
) -> ChangeKind:
    """How the node changes to `wanted`, exactly as the rollout classifies it
    (`core.rollout.arrival.arrival_kind`: a first configuration over GPU consumers included),
    from the same pods and registration `core.plan` hands the rollout."""
    view = NodeView(facts=node_facts(raw), owner=None, pods=pods, registration=registration(raw))
    return arrival_kind(wanted, view)


def _disruption(
    current: NodeConfig | None, wanted: NodeConfig | None, kind: ChangeKind
) -> str | None:
    """Why the change is disruptive (None: it is not)."""
    if kind != "disruptive" or wanted is None:
        return None
    if current is None:
        return f"first configuration ({wanted.mode}) over running GPU pods may change the GPUs"
    if current.mode != wanted.mode:
        return f"mode {current.mode} -> {wanted.mode}"
    return "MIG layout changes"


def _step_text(step: NodeStep | None) -> str | None:
    if step is None:
        return None
    r = step.rollout
    if r is None and step.config is None:
        return "held: waits for room in the rollout budget"
    parts = [f"{r.kind} change, phase {r.phase}"] if r is not None else []
    if step.unschedulable is True:
        parts.append("cordon")
    if step.evict:
        parts.append("evict " + ", ".join(step.evict))
    if step.plugin_paused:
        parts.append("device plugin paused")
    if step.config is not None:
        parts.append(f"release {step.config.mode}")
    return "; ".join(parts) or None


def node_change(
    plan: NodePlan,
    raw: Mapping[str, Any],
    s: ClusterSnapshot,
    pods: tuple[GpuPod, ...],
    step: NodeStep | None,
    leaving: str | None = None,
) -> NodeChange:
    """What `plan` shows of one node's plan (`raw`: the node as read; `pods`: its GPU pods as the
    rollout sees them; `step`: the rollout's step for it in this pass). `leaving`: the pool the
    node leaves under the rollout (`core.rollout.leave`): it keeps what its pool gave it until
    the step releases it, and this pass writes only the step."""
    now = node_facts(raw).config
    if leaving is not None:
        return NodeChange(
            node=plan.node,
            action=plan.action,
            old_owner=plan.old_owner,
            new_owner=None,
            old_mode=plan.old_mode,
            new_mode=None,
            patch=plan.patch,
            change="disruptive",
            disruptive=f"leaves the pool of policy {leaving} under running GPU pods (paced)",
            gpu_pods=_gpu_pods(s, plan.node),
            step=_step_text(step),
        )
    wanted = now
    if plan.patch is not None:
        after = node_facts(apply_merge_patch(raw, plan.patch))
        wanted = after.target if after.target is not None else after.config
    elif step is not None:
        wanted = node_facts(raw).target
    kind = _kind(raw, wanted, pods) if wanted is not None else "trivial"
    disruptive = _disruption(now, wanted, kind)
    return NodeChange(
        node=plan.node,
        action=plan.action,
        old_owner=plan.old_owner,
        new_owner=plan.new_owner,
        old_mode=plan.old_mode,
        new_mode=plan.new_mode,
        patch=plan.patch,
        change=kind,
        disruptive=disruptive,
        gpu_pods=_gpu_pods(s, plan.node) if disruptive else (),
        step=_step_text(step),
        problems=tuple(p.describe() for p in plan.problems),
    )

"""`vgpu-operator plan`, the pure part: what the operator would do to a cluster now, or after a
policy is applied, without doing it.

From one snapshot (what `doctor` reads) and the policies, it runs the operator's own decisions in
order, each on the state the previous one leaves:
1. the rollout (`core.rollout.decide.decide_cluster`, from each node's GPU pods and the plugin's
   registration, as the controller hands them): which changes are disruptive (a mode or MIG
   layout change, `core.rollout.arrival.arrival_kind`), which nodes it takes now (cordon, drain)
   and which wait for room in the budget, and so the order (`maxUnavailable` at a time);
2. the nodes: `core.nodes.planner.plan_cluster` with the rollout's steps (selection, ownership, the
   one PATCH per node, what is held back); the GPU pods running on each disruptive node;
3. the Volcano/HAMi writes on the cluster once every node is released (each PATCH replayed,
   `core.nodes.mergepatch`): the write plan enforce would send in that pass
   (`core.volcano.writes.plan_writes`): the ConfigMaps (with unified diffs), the DaemonSet
   patches and the restarts, each with its body and, for what waits, when it falls due;
4. the findings of every rule on that state (`core.rules.run_rules`) against those of now: what
   would appear and what would go.
Writes are computed as in `enforce` mode; in `report` mode the operator writes only the nodes,
and the plan says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from vgpu_operator.core.nodes.dra_pools import refuse_unservable_dra
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.mergepatch import apply_merge_patch
from vgpu_operator.core.nodes.planner import NodePlan, plan_cluster
from vgpu_operator.core.nodes.policy_keys import refuse_unlisted
from vgpu_operator.core.nodes.step import NodeStep
from vgpu_operator.core.nodes.validate import ParsedPolicy
from vgpu_operator.core.rollout.arrival import arrival_kind
from vgpu_operator.core.rollout.arrive import ChangeKind, NodeView
from vgpu_operator.core.rollout.decide import GpuPod, PolicyRollout, RolloutPlan, decide_cluster
from vgpu_operator.core.rollout.gpu_pods import gpu_pod_of, holds_gpu, snapshot_gpu_resources
from vgpu_operator.core.rollout.leave import plan_with_leaves
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.rules.base import Finding
from vgpu_operator.core.volcano.plugin_refusal import refuse_ignored, snapshot_plugin_values
from vgpu_operator.core.volcano.restarts import RestartSettings
from vgpu_operator.core.volcano.snapshot import (
    ClusterSnapshot,
    meta,
    name_of,
    pod_done,
)
from vgpu_operator.core.volcano.writes import (
    ConfigMapWrite,
    Restart,
    WorkloadPatch,
    WritePlan,
    installed,
    plan_writes,
)
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy import VGPUNodePolicySpec
from vgpu_operator.models.volcano import registration

Obj = dict[str, Any]


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


@dataclass(frozen=True)
class RolloutWave:
    """Nodes of one pool the rollout takes together (at most `maxUnavailable`): the first wave
    is in transition now (`now`), the others wait for room in the budget, in this order."""

    policy: str
    nodes: tuple[str, ...]
    now: bool = False
    halted: str | None = None  # the rollout takes no node: why


@dataclass(frozen=True)
class Plan:
    nodes: tuple[NodeChange, ...] = ()
    rollout: tuple[RolloutWave, ...] = ()
    configmaps: tuple[ConfigMapWrite, ...] = ()
    workloads: tuple[WorkloadPatch, ...] = ()
    restarts: tuple[Restart, ...] = ()
    appearing: tuple[Finding, ...] = ()
    resolved: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    # the cluster once every node is released, right after the writes, before restarts and the
    # agents act (what the ConfigMaps and findings were computed on)
    after: ClusterSnapshot | None = None

    @property
    def changes(self) -> bool:
        """Whether the operator would write anything (the exit code of `plan`)."""
        return bool(
            any(n.patch is not None for n in self.nodes)
            or self.configmaps
            or self.workloads
            or self.restarts
        )


# --- 1. nodes --------------------------------------------------------------------------------


def _gpu_pods(s: ClusterSnapshot, node: str) -> tuple[str, ...]:
    resources = snapshot_gpu_resources(s)
    return tuple(
        sorted(
            f"{meta(p).get('namespace')}/{name_of(p)}"
            for p in s.pods_on(node)
            if not pod_done(p) and holds_gpu(p, resources, s.claims)
        )
    )


def _rollout_pods(s: ClusterSnapshot) -> dict[str, tuple[GpuPod, ...]]:
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
    from the same pods and registration `_decide` hands it."""
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


def _node_change(
    plan: NodePlan,
    raw: Mapping[str, Any],
    s: ClusterSnapshot,
    pods: tuple[GpuPod, ...],
    step: NodeStep | None,
    leaving: str | None = None,
) -> NodeChange:
    """`leaving`: the pool the node leaves under the rollout (`core.rollout.leave`): it keeps
    what its pool gave it until the step releases it, and this pass writes only the step."""
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


def _waves(summary: PolicyRollout) -> list[RolloutWave]:
    """The rollout's order for one pool: the nodes in transition now, then the waiting ones,
    budget by budget (in the order the rollout takes them)."""
    if summary.halted:
        failed = ", ".join(node for node, _, _ in summary.failed)
        why = f"failed node(s) {failed}: no new node until the spec changes"
        return [RolloutWave(summary.policy, summary.waiting, halted=why)]
    out = [RolloutWave(summary.policy, summary.in_transition, now=True)]
    step = max(1, summary.budget)
    waiting = list(summary.waiting)
    out += [
        RolloutWave(summary.policy, tuple(waiting[i : i + step]))
        for i in range(0, len(waiting), step)
    ]
    return [w for w in out if w.nodes]


def _rollout(decision: RolloutPlan) -> tuple[RolloutWave, ...]:
    return tuple(w for _, summary in sorted(decision.policies.items()) for w in _waves(summary))


def _decide(
    s: ClusterSnapshot,
    facts: list[Any],
    policies: Iterable[ParsedPolicy],
    now: datetime,
    pods: Mapping[str, tuple[GpuPod, ...]],
) -> RolloutPlan:
    """The rollout's decision from what the controller would hand it: each node's GPU pods and
    the plugin's registration."""
    registrations = {name_of(n): text for n in s.nodes if (text := registration(n))}
    return decide_cluster(facts, policies, now, pods=pods, registrations=registrations)


# --- the plan --------------------------------------------------------------------------------


def _key(f: Finding) -> tuple[str, str, str]:
    return (f.id, f.severity, f.message)


def plan(
    s: ClusterSnapshot,
    policies: Iterable[ParsedPolicy],
    now: datetime,
    *,
    settle_seconds: float = 5.0,
    ledger: Mapping[str, datetime] | None = None,
) -> Plan:
    """What the operator would do to the cluster `s` in its next pass with `policies` (every
    policy it would see: the live ones, with a proposed one added or put in place of its live
    version). The GPU pods and restart inputs are read off `s` as the controller reads them
    (`core.rollout.gpu_pods.gpu_pod_of`, `core.volcano.restarts.restart_inputs`). The
    Volcano/HAMi writes are enforce's own write plan (`core.volcano.writes.plan_writes`) for
    that pass, given the restarts so far (`ledger`; none for a process that made none)."""
    checked = refuse_ignored(policies, snapshot_plugin_values(s))
    listed = refuse_unlisted(checked, s.config.policy_keys)
    parsed = {p.name: p for p in refuse_unservable_dra(listed, s.config.dra)}
    notes: list[str] = []
    for p in parsed.values():
        if not p.usable and not p.deleting:
            problems = "; ".join(f"{x.field}: {x.message}" for x in p.problems)
            notes.append(f"policy {p.name} is invalid (its nodes are held): {problems}")
        elif p.refused:
            refused = "; ".join(x.describe() for x in p.refused)
            notes.append(f"policy {p.name}: the change is refused (its nodes are held): {refused}")
    facts = [node_facts(n) for n in s.nodes]
    pods = _rollout_pods(s)
    decision = _decide(s, facts, parsed.values(), now, pods)
    cluster = plan_with_leaves(
        facts,
        parsed.values(),
        require_gpu_evidence=s.config.require_gpu_evidence,
        steps=decision.steps,
        held=decision.held,
    )
    raw = {name_of(n): n for n in s.nodes}
    changes = [
        _node_change(
            plan,
            raw[name],
            s,
            pods.get(name, ()),
            decision.steps.get(name),
            decision.held.get(name),
        )
        for name, plan in sorted(cluster.plans.items())
        if plan.patch is not None
        or plan.action in ("blocked", "conflict")
        or name in decision.steps
    ]
    rollout = _rollout(decision)
    # What follows is rendered from every node released (as the rollout leaves them): a
    # disruptive change reaches the ConfigMaps once its node is drained, not in this pass.
    final = cluster
    if decision.steps:
        final = plan_cluster(
            facts, parsed.values(), require_gpu_evidence=s.config.require_gpu_evidence
        )
        notes.append(
            "the rollout paces "
            + ", ".join(sorted(decision.steps))
            + ": the ConfigMap diffs, patches, restarts and findings shown are those once "
            "every node is released"
        )
    after = replace(
        s,
        nodes=[
            apply_merge_patch(n, final.plans[name_of(n)].patch)
            if final.plans[name_of(n)].patch is not None
            else n
            for n in s.nodes
        ],
    )
    writes = WritePlan(after=after)
    if not installed(after):
        notes.append("neither Volcano nor HAMi's plugin is installed: no ConfigMap is rendered")
    elif s.config.mode == "enforce":
        settings = RestartSettings.from_config(s.config, settle_seconds)
        writes = plan_writes(after, now, ledger, settings)
        notes += writes.notes
        after = writes.after or after
    else:
        notes.append("mode: report: the operator writes only the nodes; doctor names the rest")
    before_findings = {_key(f): f for f in run_rules(s).findings}
    after_findings = {_key(f): f for f in run_rules(after).findings}
    return Plan(
        nodes=tuple(changes),
        rollout=rollout,
        configmaps=writes.configmaps,
        workloads=writes.workloads,
        restarts=writes.restarts,
        appearing=tuple(f for k, f in after_findings.items() if k not in before_findings),
        resolved=tuple(f for k, f in before_findings.items() if k not in after_findings),
        notes=tuple(notes),
        after=after,
    )


def _same_spec(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a.get("spec") == b.get("spec"):
        return True
    try:
        left = VGPUNodePolicySpec.model_validate(a.get("spec") or {})
        right = VGPUNodePolicySpec.model_validate(b.get("spec") or {})
    except ValidationError:
        return False  # one of them is refused: not the stored spec
    return left == right


def proposed(live: Mapping[str, Mapping[str, Any]], doc: Mapping[str, Any]) -> dict[str, Any]:
    """A policy document as the apiserver would store it over the live one of its name: the
    generation goes up by one when the spec differs, and is 1 for a new policy. Specs are
    compared as the models read them, defaults filled in (the CRD's defaults are generated from
    the same models): a file that leaves out what the apiserver defaulted is the same spec."""
    name = str((doc.get("metadata") or {}).get("name", ""))
    out = dict(doc)
    m = dict(out.get("metadata") or {})
    current = live.get(name)
    if current is None:
        m["generation"] = 1
    else:
        generation = int((current.get("metadata") or {}).get("generation") or 1)
        m["generation"] = generation if _same_spec(current, doc) else generation + 1
    m.pop("deletionTimestamp", None)
    out["metadata"] = m
    return out


__all__ = [
    "ConfigMapWrite",
    "NodeChange",
    "Plan",
    "Restart",
    "RolloutWave",
    "WorkloadPatch",
    "plan",
    "proposed",
]

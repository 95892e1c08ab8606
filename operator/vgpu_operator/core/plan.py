"""`vgpu-operator plan`, the pure part: what the operator would do to a cluster now, or after a
policy is applied, without doing it.

From one snapshot (what `doctor` reads) and the policies, it runs the operator's own decisions in
order, each on the state the previous one leaves:
0. which policies are held (`core.refusals.refuse_policies`, the controller's own);
1. the rollout (`core.rollout.decide.decide_cluster`, from each node's GPU pods and the plugin's
   registration, as the controller hands them): which changes are disruptive (a mode or MIG
   layout change, `core.rollout.arrival.arrival_kind`), which nodes it takes now (cordon, drain)
   and which wait for room in the budget, and so the order (`maxUnavailable` at a time);
2. the nodes: `core.nodes.planner.plan_cluster` with the rollout's steps and the nodes another MIG
   owner reaches (`core.volcano.dra_kubelet_plugin.layout_owners`) (selection, ownership, the
   one PATCH per node, what is held back); what it shows of each (`core.node_changes`);
3. the Volcano/HAMi writes on the cluster once every node is released (each PATCH replayed,
   `core.nodes.mergepatch`): the write plan enforce would send in that pass
   (`core.volcano.writes.plan_writes`): the ConfigMaps (with unified diffs), the DaemonSet
   patches and the restarts, each with its body and, for what waits, when it falls due;
4. the findings of every rule on that state (`core.rules.run_rules`) against those of now: what
   would appear and what would go;
5. what a `volcano.sh/vgpu-memory` request of N then means in MiB, always
   (`core.volcano.memory_unit`).
Writes are computed as in `enforce` mode; in `report` mode the operator writes only the nodes,
and the plan says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from vgpu_operator.core.node_changes import NodeChange, node_change, rollout_pods
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.gpu_owners import OtherOwner
from vgpu_operator.core.nodes.mergepatch import apply_merge_patch
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.validate import ParsedPolicy
from vgpu_operator.core.refusals import refusal_scheduler, refuse_policies
from vgpu_operator.core.rollout.decide import GpuPod, PolicyRollout, RolloutPlan, decide_cluster
from vgpu_operator.core.rollout.leave import plan_with_leaves
from vgpu_operator.core.volcano.dra_kubelet_plugin import layout_owners
from vgpu_operator.core.volcano.memory_unit import plugin_memory_unit
from vgpu_operator.core.volcano.plugin_refusal import snapshot_plugin_values
from vgpu_operator.core.volcano.restarts import RestartSettings
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, name_of
from vgpu_operator.core.volcano.writes import (
    ConfigMapWrite,
    Restart,
    WorkloadPatch,
    WritePlan,
    installed,
    plan_writes,
)
from vgpu_operator.models.findings import Finding
from vgpu_operator.models.policy import VGPUNodePolicySpec
from vgpu_operator.models.volcano import registration


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
    owners: Mapping[str, OtherOwner],
) -> RolloutPlan:
    """The rollout's decision from what the controller would hand it: each node's GPU pods,
    the plugin's registration and the other MIG owners by node."""
    registrations = {name_of(n): text for n in s.nodes if (text := registration(n))}
    return decide_cluster(
        facts, policies, now, pods=pods, registrations=registrations, owners=owners
    )


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
    facts = [node_facts(n) for n in s.nodes]
    as_planned = refuse_policies(  # as the controller refuses them
        policies,
        s.config,
        snapshot_plugin_values(s),
        nodes=facts,
        scheduler=refusal_scheduler(s),
    )
    parsed = {p.name: p for p in as_planned}
    notes: list[str] = []
    for p in parsed.values():
        if not p.usable and not p.deleting:
            problems = "; ".join(f"{x.field}: {x.message}" for x in p.problems)
            notes.append(f"policy {p.name} is invalid (its nodes are held): {problems}")
        elif p.refused:
            refused = "; ".join(x.describe() for x in p.refused)
            notes.append(f"policy {p.name}: the change is refused (its nodes are held): {refused}")
    pods = rollout_pods(s)
    owners = layout_owners(s.daemonsets, s.nodes, s.pods)  # no static layout released there
    decision = _decide(s, facts, parsed.values(), now, pods, owners)
    cluster = plan_with_leaves(
        facts,
        parsed.values(),
        require_gpu_evidence=s.config.require_gpu_evidence,
        steps=decision.steps,
        held=decision.held,
        owners=owners,
    )
    raw = {name_of(n): n for n in s.nodes}
    changes = [
        node_change(
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
        or plan.problems
        or name in decision.steps
    ]
    rollout = _rollout(decision)
    # What follows is rendered from every node released (as the rollout leaves them): a
    # disruptive change reaches the ConfigMaps once its node is drained, not in this pass.
    final = cluster
    if decision.steps:
        final = plan_cluster(
            facts,
            parsed.values(),
            require_gpu_evidence=s.config.require_gpu_evidence,
            owners=owners,
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
    # the unit of every pod's vgpu-memory request once the writes are made, said always
    notes.append(plugin_memory_unit(after).line(after.config.resource_names.memory))
    # Imported here: the controller imports this module for observe mode, and in enforce mode
    # it never plans, so its process does not hold every rule (they run in its rules worker).
    from vgpu_operator.core.rules import run_rules

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

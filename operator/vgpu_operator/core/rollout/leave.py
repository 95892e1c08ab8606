"""A node leaving every pool, as safe as one arriving (`core.rollout.decide` paces it). Pure.

A node leaves every pool when no policy selects it any more: its policy is deleted with
`onDelete: Delete`, its labels no longer match, or it is labelled `vgpu.volcano.sh/exclude=true`.
The node planner's release of such a node (`core.nodes.planner`) takes off the operator's labels and
taints and `vgpu.volcano.sh/device-plugin` (HAMi's plugin pod leaves the node), puts back a GPU
Operator switch it replaced (NVIDIA's plugin returns and offers whole GPUs), lets the
configuration pass drop its node-config entry, and parks a MIG node at `{mode: whole-gpu}` (the
node agent turns MIG off). Under running GPU pods that pulls the ground away: their vGPU shares
are offered again as whole GPUs, their MIG instances destroyed. So:

- a node that runs no GPU pods (the pod index), or whose released mode is `whole-gpu` (leaving
  changes nothing its pods use: NVIDIA's plugin served it and still does), leaves at once:
  nothing runs that could be disrupted, and a pool of idle nodes should not wait budget after
  budget to be given back;
- a node with GPU pods leaves as a disruptive transition of the policy it leaves, under that
  policy's `spec.rollout` (its `maxUnavailable`, counting the pool's own transitions too; its
  drain mode and timeouts; `onFailure`): Draining (cordoned, its GPU pods evicted or waited for)
  -> Pausing (the plugin's placement label off, the GPU Operator's operands
  `paused-for-mig-change`; until the plugin pod has left) -> Applying (the release: the planner
  takes off what the operator set; a MIG node's agent turns MIG off and reports `success`) ->
  done (the operands resumed, uncordoned only if the operator cordoned it). Until the release
  the node keeps everything its pool gave it (`held_plan`: only the step's own writes), so its
  pods run on as before while they drain;
- a node that starts leaving in the middle of another transition turns it into a leave, keeping
  what that one cordoned and paused, so the end undoes it;
- a node selected again before it has left ends its leave (uncordoned if the operator cordoned
  it, resumed) and is configured like any node;
- a failed leave stays failed (the node cordoned per `onFailure`, its policy's finalizer held)
  until the policy's spec changes, also while the policy is being deleted, as any transition;
- a deletion that evicts nothing (`vgpu.volcano.sh/evict-gpu-pods: "false"`, set by
  `vgpu-operator cleanup` unless `--evict-gpu-pods`) keeps a node that runs GPU pods as its pool
  left it (a leave not released yet is withdrawn: uncordoned, resumed); it leaves at once when
  they have ended.

A policy that is suspended or invalid holds its nodes (the planner does), and a policy already
gone cannot pace anything (the operator's finalizer keeps a deleted policy until its nodes have
left; only removing that finalizer by hand gets here): a node whose ownership record says
`onDelete: Retain` is left as it is (`core.nodes.adoption.retains`: nothing stripped, MIG not
turned off, a transition under way undone), any other is released at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.nodes import adoption
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.gpu_owners import OtherOwner
from vgpu_operator.core.nodes.patch import parked_config
from vgpu_operator.core.nodes.planner import ClusterPlan, NodePlan, plan_cluster
from vgpu_operator.core.nodes.selection import Assignment
from vgpu_operator.core.nodes.step import NodeEvent, NodeStep
from vgpu_operator.core.nodes.validate import ParsedPolicy
from vgpu_operator.core.rollout.arrive import (
    GpuPod,
    NodeContext,
    drain_step,
    fail_step,
    hardware_applied,
    plugin_pause_pending,
    restored_operands,
    stay_step,
    step_timeout,
)
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy import VGPUNodePolicy
from vgpu_operator.models.rollout import NodeRollout

__all__ = [
    "advance_leave",
    "held_plan",
    "keeps_gpu_pods",
    "leavable_policies",
    "leaving_nodes",
    "needs_pacing",
    "plan_with_leaves",
    "start_leave",
    "withdraw_leave",
]

# The released modes whose GPU pods depend on what the operator set: HAMi's vGPU shares (its
# plugin, the node-config entry, the taint keeping other pods off), MIG (instances), Ascend vNPU,
# DRA (the driver's kubelet plugin the operator places there prepares and unprepares the claims
# of the node's pods: a node leaves DRA only once no pod holding a claim remains on it; a claim
# whose last pod is gone is deallocated by kube-controller-manager, `syncClaim` in
# kubernetes/kubernetes@v1.35.4:pkg/controller/resourceclaim/controller.go).
PACED_MODES = frozenset({"hami-core", "mig", "ascend-vnpu", "dra"})


def leavable_policies(policies: Iterable[ParsedPolicy]) -> dict[str, VGPUNodePolicy]:
    """The policies that pace the nodes leaving them: usable and not suspended (the planner
    holds a suspended or invalid policy's nodes), being deleted or not, except a deletion with
    `onDelete: Retain` (its nodes are left as they are, `core.nodes.adoption`)."""
    out: dict[str, VGPUNodePolicy] = {}
    for p in policies:
        if not p.usable or p.policy is None or p.suspended:
            continue
        if p.deleting and adoption.on_delete(p) == "Retain":
            continue
        out[p.name] = p.policy
    return out


def leaving_nodes(
    nodes: Iterable[NodeFacts],
    assignments: Mapping[str, Assignment],
    leavable: Mapping[str, VGPUNodePolicy],
) -> dict[str, str]:
    """Node -> the policy it leaves: it carries that policy's label, no policy owns it now, and
    the planner would release it (not a conflict that keeps it, not a record it cannot read)."""
    out: dict[str, str] = {}
    for facts in nodes:
        policy = facts.policy_label
        assignment = assignments.get(facts.name)
        if policy is None or policy not in leavable or assignment is None:
            continue
        if assignment.owner is not None or contract.ANN_OWNED in facts.errors:
            continue
        if assignment.conflicted and not leavable[policy].deleting:
            continue  # a conflict keeps the node as it is (`core.nodes.planner.plan_node`)
        out[facts.name] = policy
    return out


def keeps_gpu_pods(policy: VGPUNodePolicy | None) -> bool:
    """The policy's deletion evicts no GPU pod (`vgpu.volcano.sh/evict-gpu-pods: "false"`):
    its nodes that run GPU pods keep their configuration until the pods end."""
    return policy is not None and policy.deleting and not policy.evict_gpu_pods


def withdraw_leave(ctx: NodeContext, r: NodeRollout) -> NodeStep:
    """A leave not released yet, under a deletion that evicts nothing: ended (uncordoned if the
    operator cordoned it, its operands resumed), the node keeps its configuration."""
    return _done(
        ctx,
        r,
        f"leaving policy {r.policy} withdrawn: GPU pods run here and the deletion evicts none "
        f"({contract.ANN_EVICT_GPU_PODS}: false); the node keeps its configuration until they end",
    )


def needs_pacing(facts: NodeFacts, pods: tuple[GpuPod, ...]) -> bool:
    """Whether leaving disrupts running work: GPU pods run on a node whose released mode is one
    the operator's configuration serves."""
    config = facts.config
    return bool(pods) and config is not None and config.mode in PACED_MODES


def start_leave(ctx: NodeContext, policy: str, prior: NodeRollout | None = None) -> NodeStep:
    """A node starts leaving `policy` (taken into its budget, or already in transition under
    `prior`, whose cordon and pauses are kept so that the end undoes them)."""
    facts, spec, now = ctx.facts, ctx.spec, ctx.now
    parked = parked_config(facts.config)
    base = NodeRollout(
        policy=policy,
        generation=ctx.generation,
        target=parked.to_annotation() if parked is not None else "",
        kind="leave",
        phase="Draining",
        started=now,
        since=now,
        cordoned=prior.cordoned if prior is not None else False,
        plugin_paused=prior.plugin_paused if prior is not None else False,
        paused=dict(prior.paused) if prior is not None else {},
        agent=parked is not None and contract.ANN_INVENTORY in facts.annotations,
    )
    what = f"leaving the pool of policy {policy}"
    if spec.drain.enabled:
        r = base.model_copy(update={"cordoned": base.cordoned or not facts.unschedulable})
        return NodeStep(
            node=facts.name,
            rollout=r,
            unschedulable=True,
            plugin_paused=r.plugin_paused,
            event=NodeEvent(
                "Normal",
                "TransitionStarted",
                f"{what}: cordoned, draining {len(ctx.view.pods)} GPU pod(s)",
            ),
        )
    r = base.model_copy(update={"phase": "Applying", "released": True})
    return NodeStep(
        node=facts.name,
        rollout=r,
        plugin_paused=True,
        event=NodeEvent("Normal", "TransitionStarted", f"{what}: released (drain disabled)"),
    )


def _done(ctx: NodeContext, r: NodeRollout, why: str) -> NodeStep:
    return NodeStep(
        node=ctx.facts.name,
        unschedulable=False if r.cordoned else None,
        labels=restored_operands(r, ctx.facts),
        event=NodeEvent("Normal", "TransitionComplete", why),
    )


def advance_leave(ctx: NodeContext, r: NodeRollout) -> NodeStep:
    """The next step of a node leaving the policy `r.policy`."""
    facts, view, now, spec = ctx.facts, ctx.view, ctx.now, ctx.spec
    if view.owner is not None:
        return _done(ctx, r, f"selected again (policy {view.owner}): its leave is withdrawn")
    if r.failed:
        if ctx.generation and r.generation != ctx.generation:
            again = start_leave(ctx, r.policy, prior=r)  # a new spec: try again
            assert again.rollout is not None
            kept = again.rollout.model_copy(update={"released": r.released})
            return replace(again, rollout=kept)
        return stay_step(ctx, r)
    if now >= r.started + timedelta(seconds=spec.progress_deadline_seconds):
        return fail_step(
            ctx,
            r,
            "ProgressDeadlineExceeded",
            f"leaving the pool did not finish within progressDeadlineSeconds "
            f"({spec.progress_deadline_seconds}s; it stood in {r.phase})",
        )
    timed_out = now >= r.since + timedelta(seconds=step_timeout(r, spec))
    if r.phase == "Draining" and r.released:
        return _enter_applying(ctx, r)  # a failed leave retried after its release
    if r.phase == "Draining":
        step = drain_step(ctx, r, timed_out)
        nxt = step.rollout
        if nxt is None or nxt.phase != "Pausing":
            return step
        merged = nxt.model_copy(
            update={
                "paused": {**r.paused, **nxt.paused},
                "plugin_paused": r.plugin_paused or nxt.plugin_paused,
            }
        )
        return replace(step, rollout=merged, plugin_paused=merged.plugin_paused)
    if r.phase == "Pausing":
        return plugin_pause_pending(ctx, r, timed_out) or _enter_applying(ctx, r)
    # Applying: released; a MIG node's agent turns MIG off
    target = NodeConfig.from_annotation(r.target) if r.target else None
    if not r.agent or target is None:
        return _done(ctx, r, f"left the pool of policy {r.policy}")
    state = facts.agent_state
    if state in ("failed", "blocked"):
        return fail_step(
            ctx,
            r,
            f"Agent{state.capitalize()}",
            f"the node agent reports {state} turning MIG off after leaving the pool (its Events "
            "on the node say why)",
        )
    if state == "success" and hardware_applied(facts, target):
        return _done(ctx, r, f"left the pool of policy {r.policy}; MIG turned off")
    if timed_out:
        return fail_step(
            ctx,
            r,
            "ApplyTimeout",
            f"the node agent did not report success turning MIG off within stepTimeoutSeconds "
            f"({spec.step_timeout_seconds}s; state {state or 'none'})",
        )
    return stay_step(ctx, r)


def _enter_applying(ctx: NodeContext, r: NodeRollout) -> NodeStep:
    nxt = r.model_copy(
        update={"phase": "Applying", "since": ctx.now, "released": True, "plugin_paused": True}
    )
    return NodeStep(
        node=ctx.facts.name,
        rollout=nxt,
        plugin_paused=True,
        event=NodeEvent(
            "Normal",
            "ConfigurationReleased",
            f"left the pool of policy {r.policy}: the operator's labels and taints removed",
        ),
    )


# --- the node planner, for nodes that have not left yet ---------------------------------------


def held_plan(facts: NodeFacts, step: NodeStep, policy: str, base: NodePlan) -> NodePlan:
    """The plan of a leaving node before its release: it keeps everything of its pool; only the
    step's writes (its record, the cordon, the plugin's placement label, the GPU Operator's
    switches) go out, in one merge PATCH with the resourceVersion."""
    labels: dict[str, str | None] = {}
    annotations: dict[str, str | None] = {}
    if not step.keep_rollout:
        record = step.rollout.to_annotation() if step.rollout is not None else None
        current = facts.annotations.get(contract.ANN_ROLLOUT)
        if current != record:
            annotations[contract.ANN_ROLLOUT] = record
    config = facts.config
    plugin = None if step.plugin_paused or config is None else config.device_plugin
    current = facts.labels.get(contract.LABEL_DEVICE_PLUGIN)
    if current != plugin and not step.keep_rollout:  # (an unreadable record: nothing guessed)
        labels[contract.LABEL_DEVICE_PLUGIN] = plugin
    for key, value in step.labels.items():
        if facts.labels.get(key) != value:
            labels[key] = value
    metadata: dict[str, Any] = {"resourceVersion": facts.resource_version}
    if labels:
        metadata["labels"] = dict(sorted(labels.items()))
    if annotations:
        metadata["annotations"] = annotations
    body: dict[str, Any] = {"metadata": metadata}
    if step.unschedulable is not None and step.unschedulable != facts.unschedulable:
        body["spec"] = {"unschedulable": step.unschedulable}
    patch = body if (labels or annotations or "spec" in body) else None
    return replace(
        base,
        action="update" if patch is not None else "none",
        patch=patch,
        new_owner=policy,
        new_mode=facts.mode_label,
        in_sync=False,
        step=step,
    )


def plan_with_leaves(
    nodes: Iterable[NodeFacts],
    policies: Iterable[ParsedPolicy],
    *,
    require_gpu_evidence: bool = True,
    steps: Mapping[str, NodeStep] | None = None,
    held: Mapping[str, str] | None = None,
    owners: Mapping[str, OtherOwner] | None = None,
) -> ClusterPlan:
    """`plan_cluster`, with the leaving nodes in `held` (node -> the policy it leaves) kept as
    they are but for their rollout step until the step releases them (`held_plan`), and a node
    a `Retain` deletion leaves in the middle of a transition given that transition's end
    (`_undone`). `owners`: the other MIG owners by node (`core.nodes.planner.plan_node`)."""
    facts, parsed = list(nodes), list(policies)
    planned = plan_cluster(
        facts, parsed, require_gpu_evidence=require_gpu_evidence, steps=steps, owners=owners
    )
    if steps is None:
        return planned
    by_name = {p.name: p for p in parsed}
    plans = dict(planned.plans)
    for f in facts:
        policy, step, plan = (held or {}).get(f.name), steps.get(f.name), plans.get(f.name)
        if plan is None or plan.action != "release":
            continue  # the planner keeps it anyway (held, blocked, a conflict) or it has left
        if policy is not None and step is not None:
            plans[f.name] = held_plan(f, step, policy, plan)
        elif plan.patch is not None and adoption.retains(f.policy_label, by_name, f):
            plans[f.name] = replace(plan, patch=_undone(plan.patch, f))
    return replace(planned, plans=plans)


def _undone(patch: Mapping[str, Any], facts: NodeFacts) -> dict[str, Any]:
    """A `Retain` deletion's PATCH (`core.nodes.adoption.retain_patch`, which drops the rollout
    record) with the end of the transition that record described: the cordon the operator set
    lifted, the GPU Operator's operands and the plugin it paused resumed. Left out, the node
    would stay cordoned with nothing left to say why."""
    try:
        record = NodeRollout.from_annotation(facts.annotations.get(contract.ANN_ROLLOUT))
    except ValueError:  # pydantic's ValidationError is one: a person decides (status says so)
        return dict(patch)
    if record is None:
        return dict(patch)
    body = {**patch, "metadata": dict(patch["metadata"])}
    labels = dict(body["metadata"].get("labels") or {})
    for key, value in restored_operands(record, facts).items():
        labels.setdefault(key, value)
    plugin = facts.config.device_plugin if facts.config is not None else None
    if (
        record.plugin_paused
        and plugin is not None
        and contract.LABEL_DEVICE_PLUGIN not in facts.labels
    ):
        labels.setdefault(contract.LABEL_DEVICE_PLUGIN, plugin)  # the released config's plugin
    if labels:
        body["metadata"]["labels"] = dict(sorted(labels.items()))
    if record.cordoned and facts.unschedulable:
        body["spec"] = {**(body.get("spec") or {}), "unschedulable": False}
    return body

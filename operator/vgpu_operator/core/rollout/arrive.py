"""One node's transition, step by step (`core.rollout.decide` decides which nodes move). Pure.

Each function takes the node's context and its `vgpu.volcano.sh/rollout` record and returns the
step to write now (`core.nodes.step.NodeStep`): the record of the next phase together with what
that phase does (cordon, pause, release, resume, uncordon), so the one node PATCH carries both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

from pydantic import ValidationError

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.step import OPERAND_LABELS, PAUSED_VALUE, NodeEvent, NodeStep
from vgpu_operator.core.rollout.plugin import (
    PluginReading,
    entry_rendered,
    plugin_left,
    resume_at,
)
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_rollout import RolloutSpec
from vgpu_operator.models.rollout import Kind, NodeRollout, Phase
from vgpu_operator.models.volcano import PayloadError, parse_register

ChangeKind = Literal["none", "trivial", "restart", "disruptive"]
MAX_NAMED_PODS = 5


@dataclass(frozen=True)
class GpuPod:
    """A pod on the node that holds GPU resources (the pod index's)."""

    key: str  # namespace/name
    terminating: bool = False
    empty_dir: bool = False


@dataclass(frozen=True)
class NodeView:
    """What the rollout reads of one node. `owner`: the policy selection gives it (None: in no
    pool). `registration`: its `volcano.sh/node-vgpu-register`. `plugin`: what the
    configuration reconciler last read of its device plugin pod and node-config entry (None: no
    configuration reconciler runs; nothing is waited for)."""

    facts: NodeFacts
    owner: str | None
    pods: tuple[GpuPod, ...] = ()
    registration: str | None = None
    plugin: PluginReading | None = None


def change_kind(target: NodeConfig | None, config: NodeConfig | None) -> ChangeKind:
    """How a node changes from its released `config` to `target`."""
    if target is None or config is None:
        return "trivial"  # leaving every pool, or the first configuration: nothing runs yet
    if target.to_annotation() == config.to_annotation():
        return "none"
    if target.mode != config.mode or not target.same_hardware_as(config):
        return "disruptive"
    plugin = (target.hami_core, target.ascend_vnpu, target.device_plugin)
    if plugin != (config.hami_core, config.ascend_vnpu, config.device_plugin):
        return "restart"
    return "trivial"


@dataclass
class NodeContext:
    view: NodeView
    spec: RolloutSpec
    target: NodeConfig | None
    target_text: str | None
    kind: ChangeKind
    generation: int
    now: datetime
    refusals: Mapping[str, str] = field(default_factory=dict)

    @property
    def facts(self) -> NodeFacts:
        return self.view.facts


def step_timeout(r: NodeRollout, spec: RolloutSpec) -> int:
    return spec.drain.timeout_seconds if r.phase == "Draining" else spec.step_timeout_seconds


def due_at(r: NodeRollout, spec: RolloutSpec) -> datetime:
    step = r.since + timedelta(seconds=step_timeout(r, spec))
    deadline = r.started + timedelta(seconds=spec.progress_deadline_seconds)
    return min(step, deadline)


def restored_operands(r: NodeRollout, facts: NodeFacts) -> dict[str, str]:
    """The operand switches back to what they were (only those still paused by us)."""
    return {k: v for k, v in r.paused.items() if facts.labels.get(k) == PAUSED_VALUE}


def _finish(ctx: NodeContext, r: NodeRollout, why: str) -> NodeStep:
    """The transition ends: everything resumed, uncordoned if the operator cordoned it, the
    annotation gone; a node that needs no change any more gets the current target."""
    config = ctx.target if ctx.kind == "trivial" and ctx.target is not None else None
    return NodeStep(
        node=ctx.facts.name,
        config=config,
        unschedulable=False if r.cordoned else None,
        labels=restored_operands(r, ctx.facts),
        event=NodeEvent("Normal", "TransitionComplete", why),
    )


def fail_step(ctx: NodeContext, r: NodeRollout, reason: str, message: str) -> NodeStep:
    uncordon = ctx.spec.on_failure == "Uncordon" and r.cordoned
    failed = r.model_copy(
        update={
            "phase": "Failed",
            "since": ctx.now,
            "reason": reason,
            "message": message,
            "plugin_paused": False,
            "paused": {},
            "cordoned": r.cordoned and not uncordon,
        }
    )
    kept = "uncordoned" if uncordon else ("kept cordoned" if r.cordoned else "not cordoned")
    return NodeStep(
        node=ctx.facts.name,
        rollout=failed,
        unschedulable=False if uncordon else None,
        labels=restored_operands(r, ctx.facts),
        event=NodeEvent(
            "Warning",
            reason,
            f"{message}; onFailure {ctx.spec.on_failure}: {kept}, GPU clients resumed; the "
            f"policy {r.policy} takes no new nodes until its spec changes",
        ),
    )


def stay_step(ctx: NodeContext, r: NodeRollout, evict: tuple[str, ...] = ()) -> NodeStep:
    return NodeStep(node=ctx.facts.name, rollout=r, plugin_paused=r.plugin_paused, evict=evict)


def _enter(ctx: NodeContext, r: NodeRollout, phase: Phase, **update: object) -> NodeStep:
    nxt = r.model_copy(update={"phase": phase, "since": ctx.now, **update})
    config = NodeConfig.from_annotation(nxt.target) if nxt.released and not r.released else None
    event = None
    if phase == "Applying":
        event = NodeEvent("Normal", "ConfigurationReleased", f"released {_describe(config)}")
    return NodeStep(
        node=ctx.facts.name,
        rollout=nxt,
        config=config,
        plugin_paused=nxt.plugin_paused,
        labels={k: PAUSED_VALUE for k in nxt.paused if k not in r.paused},
        event=event,
    )


def _describe(config: NodeConfig | None) -> str:
    if config is None:
        return "the configuration"
    if config.mode == "mig" and config.mig is not None:
        return f"mode mig ({config.mig.partitioning})"
    return f"mode {config.mode}"


def start(ctx: NodeContext) -> NodeStep:
    """A node taken into the budget now."""
    facts, spec, now = ctx.facts, ctx.spec, ctx.now
    assert ctx.target_text is not None and ctx.kind in ("restart", "disruptive")
    kind: Kind = "disruptive" if ctx.kind == "disruptive" else "restart"
    base = NodeRollout(
        policy=ctx.view.owner or "",
        generation=ctx.generation,
        target=ctx.target_text,
        kind=kind,
        phase="Draining",
        started=now,
        since=now,
        agent=kind == "disruptive" and contract.ANN_INVENTORY in facts.annotations,
        registered=bool(ctx.view.registration),
    )
    message = f"{kind} change to {_describe(ctx.target)} started"
    if kind == "disruptive" and spec.drain.enabled:
        r = base.model_copy(update={"cordoned": not facts.unschedulable})
        pods = len(ctx.view.pods)
        return NodeStep(
            node=facts.name,
            rollout=r,
            unschedulable=True,
            event=NodeEvent(
                "Normal", "TransitionStarted", f"{message}: cordoned, draining {pods} GPU pod(s)"
            ),
        )
    phase: Phase = "Applying" if kind == "disruptive" else "Verifying"
    r = base.model_copy(update={"phase": phase, "released": True})
    return NodeStep(
        node=facts.name,
        rollout=r,
        config=ctx.target,
        event=NodeEvent("Normal", "TransitionStarted", f"{message}: released"),
    )


def advance(ctx: NodeContext, r: NodeRollout) -> NodeStep | None:
    """The next step of a node in transition (None: the transition is over and nothing is
    left to write for it)."""
    facts, view, now, spec = ctx.facts, ctx.view, ctx.now, ctx.spec
    moved = ctx.target_text != r.target or (view.owner or "") != r.policy
    if r.failed:
        if not moved:
            return stay_step(ctx, r)
        if ctx.kind in ("none", "trivial") or view.owner is None:
            return _finish(ctx, r, "the failed change is no longer wanted")
        again = start(ctx)  # a new spec: try again (the node already counts)
        assert again.rollout is not None
        cordoned = again.rollout.cordoned or r.cordoned
        return replace(again, rollout=again.rollout.model_copy(update={"cordoned": cordoned}))
    if moved and not r.released:
        if ctx.kind in ("none", "trivial") or view.owner is None or ctx.kind != r.kind:
            return _finish(ctx, r, "the change was withdrawn before its release")
        assert ctx.target_text is not None
        r = r.model_copy(
            update={"target": ctx.target_text, "generation": ctx.generation, "policy": view.owner}
        )
    if now >= r.started + timedelta(seconds=spec.progress_deadline_seconds):
        return fail_step(
            ctx,
            r,
            "ProgressDeadlineExceeded",
            f"the transition did not finish within progressDeadlineSeconds "
            f"({spec.progress_deadline_seconds}s; it stood in {r.phase})",
        )
    timed_out = now >= r.since + timedelta(seconds=step_timeout(r, spec))
    if r.phase == "Draining":
        return drain_step(ctx, r, timed_out)
    if r.phase == "Pausing":
        waiting = plugin_pause_pending(ctx, r, timed_out)
        return waiting or _enter(ctx, r, "Applying", released=True)
    target = NodeConfig.from_annotation(r.target)
    assert target is not None
    if r.phase == "Applying":
        if not r.agent:
            return _resume(ctx, r, timed_out)
        state = facts.agent_state
        if state in ("failed", "blocked"):
            return fail_step(
                ctx,
                r,
                f"Agent{state.capitalize()}",
                f"the node agent reports {state} applying {_describe(target)} (its Events "
                "on the node say why)",
            )
        if state == "success" and hardware_applied(facts, target):
            return _resume(ctx, r, timed_out)
        if timed_out:
            return fail_step(
                ctx,
                r,
                "ApplyTimeout",
                f"the node agent did not report success for {_describe(target)} within "
                f"stepTimeoutSeconds ({spec.step_timeout_seconds}s; state {state or 'none'})",
            )
        return stay_step(ctx, r)
    # Verifying
    problem = registration_problem(target, view.registration) if r.registered else None
    if problem is None:
        return _finish(ctx, r, f"{_describe(target)} applied and verified")
    if timed_out:
        return fail_step(ctx, r, "RegistrationTimeout", problem)
    return stay_step(ctx, r)


def plugin_pause_pending(ctx: NodeContext, r: NodeRollout, timed_out: bool) -> NodeStep | None:
    """In Pausing: the step while the paused plugin pod has not left the node yet (stay, or
    fail past stepTimeoutSeconds); None once it has left (or none was paused)."""
    if not r.plugin_paused or plugin_left(ctx.view.plugin, r.since):
        return None
    if timed_out:
        return fail_step(
            ctx,
            r,
            "PauseTimeout",
            f"the device plugin pod did not leave the node within stepTimeoutSeconds "
            f"({ctx.spec.step_timeout_seconds}s)",
        )
    return stay_step(ctx, r)


def _resume(ctx: NodeContext, r: NodeRollout, timed_out: bool) -> NodeStep:
    """Applied: resume the paused plugin (its one restart), once its node-config entry renders
    the released configuration: resumed earlier, it would read the old entry and be restarted
    again when the entry is rewritten."""
    if not r.plugin_paused:
        return _enter(ctx, r, "Verifying", plugin_paused=False)
    if entry_rendered(ctx.view.plugin, r.target):
        at = resume_at(ctx.view.plugin)
        if at is None or ctx.now >= at:
            return _enter(ctx, r, "Verifying", plugin_paused=False)
        return replace(stay_step(ctx, r), wake=at)  # a pod started now would count as stale
    if timed_out:
        return fail_step(
            ctx,
            r,
            "NodeConfigTimeout",
            "the node-config entry of the node was not rewritten for the released "
            f"configuration within stepTimeoutSeconds ({ctx.spec.step_timeout_seconds}s); the "
            "policy's ConfigConsistent condition (rule node-config-rendered) says why",
        )
    return stay_step(ctx, r)


def drain_step(ctx: NodeContext, r: NodeRollout, timed_out: bool) -> NodeStep:
    pods, spec = ctx.view.pods, ctx.spec
    if not pods:
        paused = {k: v for k, v in ctx.facts.labels.items() if k in OPERAND_LABELS and v == "true"}
        plugin = ctx.facts.labels.get(contract.LABEL_DEVICE_PLUGIN) is not None
        return _enter(ctx, r, "Pausing", plugin_paused=plugin, paused=paused)
    names = ", ".join(p.key for p in pods[:MAX_NAMED_PODS])
    more = f" and {len(pods) - MAX_NAMED_PODS} more" if len(pods) > MAX_NAMED_PODS else ""
    if timed_out:
        refused = [f"{p.key}: {ctx.refusals[p.key]}" for p in pods if p.key in ctx.refusals]
        why = f"; eviction refused: {'; '.join(refused[:MAX_NAMED_PODS])}" if refused else ""
        kept = [p.key for p in pods if p.empty_dir and not spec.drain.delete_empty_dir_data]
        if kept:
            why += f"; not evicted (emptyDir data, deleteEmptyDirData false): {', '.join(kept)}"
        return fail_step(
            ctx,
            r,
            "DrainTimeout",
            f"{len(pods)} GPU pod(s) still on the node after drain.timeoutSeconds "
            f"({spec.drain.timeout_seconds}s, mode {spec.drain.mode}): {names}{more}{why}",
        )
    if spec.drain.mode == "Wait":
        return stay_step(ctx, r)
    evict = tuple(
        p.key
        for p in pods
        if not p.terminating and (spec.drain.delete_empty_dir_data or not p.empty_dir)
    )
    return stay_step(ctx, r, evict)


def hardware_applied(facts: NodeFacts, target: NodeConfig) -> bool:
    """The agent's inventory says it applied this configuration's hardware."""
    try:
        inventory = Inventory.from_annotation(facts.annotations.get(contract.ANN_INVENTORY))
    except (ValidationError, ValueError):
        return False
    applied = inventory.applied if inventory is not None else None
    return applied is not None and applied.mode == target.mode and target.same_hardware_as(applied)


# The `<mode>` field the HAMi plugin writes in each record of `volcano.sh/node-vgpu-register`
# (Project-HAMi/volcano-vgpu-device-plugin pkg/plugin/vgpu/register.go): the node-config
# entry's operating mode.
REGISTER_MODES = {"hami-core": "hami-core", "mig": "mig"}


def registration_problem(target: NodeConfig, registration: str | None) -> str | None:
    """Why the plugin's registration does not (yet) show `target` (None: it does). Only the
    HAMi vGPU plugin's is read; a mode it does not serve has nothing to verify."""
    expected = REGISTER_MODES.get(target.mode)
    if target.device_plugin != "hami" or expected is None:
        return None
    try:
        gpus = parse_register(registration or "")
    except PayloadError as exc:
        return f"the device plugin's registration does not parse: {exc}"
    if not gpus:
        return "the device plugin has not registered the node's GPUs again"
    wrong = [g for g in gpus if g.mode is not None and g.mode != expected]
    if wrong:
        return f"the device plugin registers mode {wrong[0].mode}, not {expected}"
    split = target.hami_core.device_split_count if target.hami_core else None
    if split is not None and any(g.count != split for g in gpus):
        counts = sorted({g.count for g in gpus})
        return f"the device plugin registers split count {counts}, not {split}"
    return None

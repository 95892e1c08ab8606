"""Safe transitions: which nodes may change now, and each one's next step. Pure.

A node whose released `config` differs from its policy's `target` changes in one of three ways
(`change_kind`):
- `trivial` (only the policy or generation differ, or the node's first configuration): released
  at once, no step;
- `restart` (what the device plugin reads: split count, scaling, filters; or which plugin serves
  it): released under the policy's budget without cordon or drain, then the plugin's
  registration of the node is verified;
- `disruptive` (the mode or the MIG layout): the node goes through
  Draining (cordoned, its GPU pods evicted or waited for, `drain.timeoutSeconds`) ->
  Pausing (its vGPU plugin's placement label off, the GPU Operator's operands
  `paused-for-mig-change`; until the plugin pod has left) -> Applying (`config` := `target`,
  the agent applies it; the plugin resumes once the node-config entry renders it,
  `core.rollout.plugin`) -> Verifying (its registration checked) -> done (operands resumed,
  uncordoned only if the operator cordoned it). `drain.enabled: false` releases at once, then
  verifies.

Every phase has a timeout (`stepTimeoutSeconds`, the drain its own) and the whole transition
`progressDeadlineSeconds`; a timeout or a failing agent ends in `Failed`, where `onFailure`
decides the cordon (the clients are resumed either way: no node is left paused). A policy with a
failed node takes no new nodes until its spec changes: a new generation (any spec change, as a
Deployment's rollout resumes after ProgressDeadlineExceeded) changes every node's `target`, so its
failed nodes start again from the cordon, with new timeouts and a new deadline.

A node leaving a policy whose deletion evicts nothing (`vgpu.volcano.sh/evict-gpu-pods:
"false"`, what `vgpu-operator cleanup` sets unless told `--evict-gpu-pods`) keeps its
configuration while GPU pods run on it (`kept`; a leave not yet released is withdrawn), and
leaves at once when they have ended (`core.rollout.leave`).

Budget: `maxUnavailable` of the policy's pool, counting every node with a transition (from cordon
to uncordon; failed ones too) charged to the policy it is moving to. Each step is written in the
node's one PATCH together with `vgpu.volcano.sh/rollout` (models.rollout), so a restarted operator
continues exactly where it stood and never releases twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

from pydantic import ValidationError

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.gpu_owners import OtherOwner, layout_held
from vgpu_operator.core.nodes.patch import desired_for
from vgpu_operator.core.nodes.selection import is_excluded, matches_selector, select
from vgpu_operator.core.nodes.step import NodeEvent, NodeStep
from vgpu_operator.core.nodes.validate import ParsedPolicy
from vgpu_operator.core.rollout.arrival import arrival_kind
from vgpu_operator.core.rollout.arrive import (
    GpuPod,
    NodeContext,
    NodeView,
    advance,
    due_at,
    start,
)
from vgpu_operator.core.rollout.leave import (
    advance_leave,
    keeps_gpu_pods,
    leavable_policies,
    leaving_nodes,
    needs_pacing,
    start_leave,
    withdraw_leave,
)
from vgpu_operator.core.rollout.plugin import PluginReading
from vgpu_operator.models.policy import VGPUNodePolicy
from vgpu_operator.models.policy_rollout import RolloutSpec
from vgpu_operator.models.rollout import NodeRollout

__all__ = [
    "GpuPod",
    "NodeView",
    "PluginReading",
    "PolicyRollout",
    "RolloutPlan",
    "decide",
    "decide_cluster",
]


@dataclass(frozen=True)
class PolicyRollout:
    """A policy's rollout as its status shows it."""

    policy: str
    budget: int
    in_transition: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    failed: tuple[tuple[str, str, str], ...] = ()  # (node, reason, message)
    # Nodes a deletion that evicts nothing keeps configured while their GPU pods run.
    kept: tuple[str, ...] = ()

    @property
    def halted(self) -> bool:
        return bool(self.failed)


@dataclass(frozen=True)
class RolloutPlan:
    steps: Mapping[str, NodeStep]  # nodes whose release goes through the rollout
    policies: Mapping[str, PolicyRollout]
    due: datetime | None = None  # the earliest timeout: decide again then
    # Leaving nodes kept as their pool's until their step releases them (node -> the policy
    # they leave): the planner writes only the step for them (`core.rollout.leave.held_plan`).
    held: Mapping[str, str] = field(default_factory=dict)


def parse_rollout(facts: NodeFacts) -> tuple[NodeRollout | None, str | None]:
    """The node's rollout annotation, or why it does not parse."""
    try:
        return NodeRollout.from_annotation(facts.annotations.get(contract.ANN_ROLLOUT)), None
    except (ValidationError, ValueError) as exc:
        return None, str(exc).splitlines()[0]


Starter = Callable[[], NodeStep]


def pool_sizes(
    views: Sequence[NodeView],
    policies: Mapping[str, VGPUNodePolicy],
    everyone: Mapping[str, VGPUNodePolicy],
    leaves: Mapping[str, str],
) -> dict[str, int]:
    """The pool each policy's `maxUnavailable` percent is taken of: the nodes it owns and the
    nodes leaving it. A policy being deleted owns none, and its pool would shrink as its nodes
    leave (10 % of 100, then of 90, ... down to one node at a time for the last ones); its pool
    is the nodes its selector still matches (not excluded), which have left or are leaving, so
    the budget stays what it was when the deletion began."""
    members: dict[str, set[str]] = {}
    for v in views:
        mine = v.owner if v.owner is not None and v.owner in policies else leaves.get(v.facts.name)
        if mine is not None:
            members.setdefault(mine, set()).add(v.facts.name)
    for name, p in everyone.items():
        if not p.deleting:
            continue
        matched = members.setdefault(name, set())
        for v in views:
            labels = v.facts.labels
            if not is_excluded(labels) and matches_selector(p.spec.node_selector, labels):
                matched.add(v.facts.name)
    return {name: len(nodes) for name, nodes in members.items()}


def decide(
    views: Iterable[NodeView],
    policies: Mapping[str, VGPUNodePolicy],
    now: datetime,
    refusals: Mapping[str, str] | None = None,
    *,
    leaving: Mapping[str, str] | None = None,
    leaving_policies: Mapping[str, VGPUNodePolicy] | None = None,
    owners: Mapping[str, OtherOwner] | None = None,
) -> RolloutPlan:
    """Every node's step and every policy's rollout. `policies`: the usable ones by name;
    `refusals`: the apiserver's last answer to an eviction, by pod (namespace/name);
    `leaving`: node -> the policy it leaves (`core.rollout.leave.leaving_nodes`), paced by
    that policy (one of `leaving_policies`, which may be being deleted); `owners`: the other MIG
    owners by node: a node whose static layout is held for one
    (`core.nodes.gpu_owners.layout_held`) starts no transition (none would be released: it
    would stay cordoned and drained for nothing)."""
    desired = {name: desired_for(p) for name, p in policies.items()}
    everyone = {**(leaving_policies or {}), **policies}
    leaves = leaving or {}
    views = list(views)
    pool = pool_sizes(views, policies, everyone, leaves)
    steps: dict[str, NodeStep] = {}
    charged: dict[str, list[str]] = {name: [] for name in everyone}
    # Nodes whose transition ends in this pass: their slot frees once that write has landed
    # (the next pass), so the apiserver never shows a node started before another one ended.
    ending: dict[str, int] = dict.fromkeys(everyone, 0)
    failed: dict[str, list[tuple[str, str, str]]] = {name: [] for name in everyone}
    candidates: dict[str, list[tuple[str, Starter, RolloutSpec]]] = {n: [] for n in everyone}
    held: set[str] = set()
    kept: dict[str, list[str]] = {n: [] for n in everyone}
    due: datetime | None = None
    for v in views:
        r, error = parse_rollout(v.facts)
        left = leaves.get(v.facts.name)
        if error is not None:
            # Unreadable: never guess where it stood. Hold the release and report it.
            steps[v.facts.name] = NodeStep(
                node=v.facts.name,
                keep_rollout=True,
                event=NodeEvent(
                    "Warning",
                    "RolloutStateUnreadable",
                    f"{contract.ANN_ROLLOUT} does not parse ({error}); remove it after "
                    "checking the node's cordon and its nvidia.com/gpu.deploy.* labels",
                ),
            )
            if left is not None:
                held.add(v.facts.name)
            continue
        if left is not None or (r is not None and r.kind == "leave"):
            name = left or (r.policy if r is not None else "")
            leaving_from = everyone.get(name)
            ctx = NodeContext(
                view=v,
                spec=leaving_from.spec.rollout if leaving_from is not None else RolloutSpec(),
                target=None,
                target_text=None,
                kind="disruptive",
                generation=leaving_from.generation if leaving_from is not None else 0,
                now=now,
                refusals=refusals or {},
            )
            keep = keeps_gpu_pods(leaving_from) and bool(v.pods)
            if r is None:
                if keep:  # a deletion that evicts nothing: configured while GPU pods run
                    steps[v.facts.name] = NodeStep(node=v.facts.name)
                    held.add(v.facts.name)
                    kept[name].append(v.facts.name)
                elif needs_pacing(v.facts, v.pods):  # else it leaves at once
                    candidates[name].append(
                        (v.facts.name, partial(start_leave, ctx, name), ctx.spec)
                    )
                    held.add(v.facts.name)
                continue
            if keep and r.kind == "leave" and not r.released:
                step = withdraw_leave(ctx, r)  # nothing more evicted; it stays configured
                held.add(v.facts.name)
                kept[name].append(v.facts.name)
            elif r.kind != "leave":
                step = start_leave(ctx, name, r)
            else:
                step = advance_leave(ctx, r)
            if left is not None and step.rollout is not None and not step.rollout.released:
                held.add(v.facts.name)  # keeps its pool's labels and taints until released
        else:
            owner = v.owner if v.owner in policies else None
            want = desired.get(owner) if owner is not None else None
            target = want.target if want is not None else None
            rules = r.policy if r is not None else None
            policy = policies.get(owner or rules or "")
            spec = policy.spec.rollout if policy is not None else RolloutSpec()
            ctx = NodeContext(
                view=v,
                spec=spec,
                target=target,
                target_text=want.target_text if want is not None else None,
                kind=arrival_kind(target, v),
                generation=policy.generation if policy is not None else 0,
                now=now,
                refusals=refusals or {},
            )
            if r is None:
                held_layout = layout_held(v.facts.name, target, owners) is not None
                if owner is not None and ctx.kind in ("restart", "disruptive") and not held_layout:
                    candidates[owner].append((v.facts.name, partial(start, ctx), spec))
                continue
            maybe = advance(ctx, r)
            if maybe is None:
                continue
            step = maybe
        steps[v.facts.name] = step
        nr = step.rollout
        if nr is None and r is not None and r.policy in ending:
            ending[r.policy] += 1
        if nr is not None and nr.policy in charged:
            charged[nr.policy].append(v.facts.name)
            if nr.failed:
                failed[nr.policy].append((v.facts.name, nr.reason, nr.message))
            else:
                at = min(due_at(nr, ctx.spec), step.wake or datetime.max.replace(tzinfo=UTC))
                due = at if due is None or at < due else due
    summaries: dict[str, PolicyRollout] = {}
    for name, policy in everyone.items():
        budget = policy.spec.rollout.budget(pool.get(name, 0))
        waiting: list[str] = []
        room = 0 if failed[name] else budget - len(charged[name]) - ending[name]
        for node, begin, spec in sorted(candidates[name], key=lambda c: c[0]):
            if room > 0:
                room -= 1
                step = begin()
                steps[node] = step
                charged[name].append(node)
                if step.rollout is not None:
                    at = due_at(step.rollout, spec)
                    due = at if due is None or at < due else due
                if step.rollout is not None and step.rollout.released:
                    held.discard(node)  # a leave with drain disabled: released now
            else:
                waiting.append(node)
                steps[node] = NodeStep(node=node)  # held
        summaries[name] = PolicyRollout(
            policy=name,
            budget=budget,
            in_transition=tuple(sorted(charged[name])),
            waiting=tuple(waiting),
            failed=tuple(sorted(failed[name])),
            kept=tuple(sorted(kept[name])),
        )
    holding = {n: leaves[n] for n in held if n in leaves}
    return RolloutPlan(steps=steps, policies=summaries, due=due, held=holding)


def rolling_policies(policies: Iterable[ParsedPolicy]) -> dict[str, VGPUNodePolicy]:
    """The policies whose nodes the rollout moves: usable, not suspended, not being deleted."""
    return {
        p.name: p.policy
        for p in policies
        if p.usable and p.policy is not None and not p.suspended and not p.deleting
    }


def decide_cluster(
    nodes: Iterable[NodeFacts],
    policies: Iterable[ParsedPolicy],
    now: datetime,
    *,
    pods: Mapping[str, tuple[GpuPod, ...]] | None = None,
    registrations: Mapping[str, str] | None = None,
    refusals: Mapping[str, str] | None = None,
    plugins: Mapping[str, PluginReading] | None = None,
    owners: Mapping[str, OtherOwner] | None = None,
) -> RolloutPlan:
    """`decide` for the cluster: selection as the node planner makes it (`plan_cluster`), the
    GPU pods, the plugin's registration and what the configuration reconciler read of the
    plugin (`plugins`; a node without: nothing waited for) per node; `owners` as `decide`."""
    parsed = list(policies)
    facts = list(nodes)
    selectable = [p.policy for p in parsed if p.usable and p.policy is not None]
    assignments = select(facts, selectable)
    leavable = leavable_policies(parsed)
    views = [
        NodeView(
            facts=f,
            owner=assignments[f.name].owner,
            pods=(pods or {}).get(f.name, ()),
            registration=(registrations or {}).get(f.name),
            plugin=(plugins or {}).get(f.name),
        )
        for f in facts
    ]
    return decide(
        views,
        rolling_policies(parsed),
        now,
        refusals,
        leaving=leaving_nodes(facts, assignments, leavable),
        leaving_policies=leavable,
        owners=owners,
    )

"""Per node: what the operator does to it in a pass, and the plan of the whole cluster.

`plan_node` decides each node's action from the selection (`core.nodes.selection`) and the policies:
- `configure`, `update` or `release`: the one PATCH of `core.nodes.patch.diff` (none when the node
  already carries its desired state);
- `conflict`: policies sharing the highest priority select the node; it is left as it is;
- `held`: its policy (or the one that still holds it) is suspended or invalid; nothing is
  written until it is usable again;
- `blocked`: writing would take a label or taint of a user (a wanted label the user has with
  another value, a wanted taint colliding with a user's taint of the same key and effect), the
  node shows no hardware of its mode, its ownership record is unreadable, or the PATCH would be
  invalid: nothing is written to that node at all, and a problem names why;
- a node of a static-MIG pool that another MIG owner reaches (NVIDIA's DRA kubelet plugin, as
  the controller's snapshot shows it: `owners`, `core.nodes.gpu_owners.layout_held`) gets its
  labels, taints and records but no static layout: its released `config` stays as it is (none
  for a node joining), and a problem (`AnotherMIGManager`) names the owner and the fix; the
  layout is released in the first pass after the owner no longer reaches the node;
- a deleted policy with `onDelete: Retain` leaves its nodes as they are, only dropping the record
  (`core.nodes.adoption`); so does one that vanished without the operator's finalizer pass when
  the node's record says `Retain` (`Owned.on_delete`, written when the node was configured).
A record listing what the operator may not own is trusted for the rest and those entries are
dropped at the write; the plan carries a notice naming them (`notices`, blocks nothing).
`plan_cluster` is the whole level-based reconcile, pure: selection and a plan for every node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from vgpu_operator import contract
from vgpu_operator.core.nodes import adoption
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.gpu_owners import LAYOUT_HELD, OtherOwner, layout_held
from vgpu_operator.core.nodes.ownership import (
    disowned,
    held_by_other_policy,
    invalid_writes,
    label_collisions,
    owned_record_unreadable,
    taint_collisions,
)
from vgpu_operator.core.nodes.patch import Desired, desired_for, diff
from vgpu_operator.core.nodes.selection import Assignment, select
from vgpu_operator.core.nodes.step import NodeStep
from vgpu_operator.core.nodes.validate import ParsedPolicy, Problem, node_problems

__all__ = ["Action", "ClusterPlan", "NodePlan", "plan_cluster", "plan_node", "plan_one"]

Action = Literal["none", "configure", "update", "release", "conflict", "held", "blocked"]


@dataclass(frozen=True)
class NodePlan:
    node: str
    action: Action
    patch: dict[str, Any] | None = None
    old_owner: str | None = None
    new_owner: str | None = None
    old_mode: str | None = None
    new_mode: str | None = None
    problems: tuple[Problem, ...] = ()
    conflict: tuple[str, ...] = ()
    # The node already carries the desired state (computed even while held, for readiness).
    in_sync: bool = False
    step: NodeStep | None = None  # the rollout's step this plan carries
    # Warnings that block nothing (posted as node Events with the write): entries of the
    # ownership record the operator may not own, dropped (`core.nodes.ownership.disowned`).
    notices: tuple[Problem, ...] = ()

    @property
    def mode_changed(self) -> bool:
        return self.patch is not None and self.old_mode != self.new_mode


def plan_node(
    facts: NodeFacts,
    assignment: Assignment,
    policies: Mapping[str, ParsedPolicy],
    desired: Mapping[str, Desired] | None = None,
    *,
    require_gpu_evidence: bool = True,
    steps: Mapping[str, NodeStep] | None = None,
    owners: Mapping[str, OtherOwner] | None = None,
) -> NodePlan:
    """`_plan_node`, with the notice of a record's disowned entries on a plan that writes."""
    plan = _plan_node(
        facts,
        assignment,
        policies,
        desired,
        require_gpu_evidence=require_gpu_evidence,
        steps=steps,
        owners=owners,
    )
    if facts.disowned and plan.patch is not None:
        return replace(plan, notices=(disowned(facts),))
    return plan


def _plan_node(
    facts: NodeFacts,
    assignment: Assignment,
    policies: Mapping[str, ParsedPolicy],
    desired: Mapping[str, Desired] | None = None,
    *,
    require_gpu_evidence: bool = True,
    steps: Mapping[str, NodeStep] | None = None,
    owners: Mapping[str, OtherOwner] | None = None,
) -> NodePlan:
    """Decide what to write to one node, given the selection and all policies by name
    (`desired`: `desired_for` of the policies, precomputed once for many nodes).
    `require_gpu_evidence`: a node that shows no hardware of its policy's mode is blocked
    (the operator config's `requireGpuEvidence`). `steps`: the rollout's decisions of this pass
    (`core.rollout.decide.decide`); None plans as if every change were released at once (what the
    reports and the status compare with). `owners`: the other MIG owners the cluster shows by
    node name (`core.volcano.dra_kubelet_plugin.layout_owners`; None: none known)."""
    old_owner = facts.policy_label
    owner = assignment.owner
    base = NodePlan(
        node=facts.name,
        action="none",
        old_owner=old_owner,
        new_owner=owner,
        old_mode=facts.mode_label,
        conflict=assignment.conflict,
    )
    if assignment.conflicted and not _owner_gone(old_owner, assignment, policies):
        return replace(base, action="conflict", new_owner=None, new_mode=facts.mode_label)
    if contract.ANN_OWNED in facts.errors:
        return replace(base, action="blocked", problems=(owned_record_unreadable(facts),))
    # spec.onDelete: Retain (core.nodes.adoption): stop managing, leave everything else in place
    if owner is None and adoption.left_retained(facts):
        return replace(base, in_sync=True)
    if owner is None and adoption.retains(old_owner, policies, facts):
        return replace(base, action="release", patch=adoption.retain_patch(facts))
    owner_policy = policies.get(owner) if owner is not None else None
    policy = owner_policy.policy if owner_policy is not None else None
    cached = desired.get(owner) if desired is not None and owner is not None else None
    want = cached if cached is not None else desired_for(policy)
    holder = _holder(old_owner, owner, policies)
    if holder is not None:
        in_sync = holder == owner and policy is not None and diff(facts, want) is None
        held = () if holder == owner else (held_by_other_policy(facts.name, holder, owner),)
        return replace(base, action="held", in_sync=in_sync, problems=held)
    problems: list[Problem] = []
    if policy is not None:
        problems += node_problems(facts, policy.spec, require_evidence=require_gpu_evidence)
        problems += label_collisions(facts, want.labels)
        problems += taint_collisions(facts, want.taints)
    if problems:
        return replace(base, action="blocked", new_mode=want.mode, problems=tuple(problems))
    step = steps.get(facts.name) if steps is not None else None
    other = layout_held(facts.name, want.target, owners)
    patch = diff(facts, want, step, paced=steps is not None, hold_config=other is not None)
    invalid = invalid_writes(facts.name, patch) if patch is not None else []
    if invalid:
        return replace(base, action="blocked", new_mode=want.mode, problems=tuple(invalid))
    held_layout = (layout_held_problem(facts, other),) if other is not None else ()
    if patch is None:
        action: Action = "none"
    elif owner is None:
        action = "release"
    elif old_owner == owner:
        action = "update"
    else:
        action = "configure"
    return replace(
        base,
        action=action,
        patch=patch,
        new_mode=want.mode,
        in_sync=patch is None,
        step=step,
        problems=held_layout,
    )


def layout_held_problem(facts: NodeFacts, other: OtherOwner) -> Problem:
    """Why the node's static MIG layout is not released (`core.nodes.gpu_owners.layout_held`)."""
    kept = (
        "none released yet"
        if facts.config is None
        else "the configuration released before stays, no change is released"
    )
    return Problem(
        field="spec.mig",
        reason=LAYOUT_HELD,
        message=f"{other.said}: the operator releases no static MIG layout to {facts.name} "
        f"while it does ({kept}; one MIG manager per GPU)",
        fix=other.fix,
        node=facts.name,
    )


def _owner_gone(
    old_owner: str | None, assignment: Assignment, policies: Mapping[str, ParsedPolicy]
) -> bool:
    """The node's policy is deleted (or being deleted) and is not part of the conflict: the node
    is released rather than kept for a policy that no longer exists (its finalizer waits on it)."""
    if old_owner is None or old_owner in assignment.conflict:
        return False
    parsed = policies.get(old_owner)
    return parsed is None or parsed.deleting


def _holder(
    old_owner: str | None, owner: str | None, policies: Mapping[str, ParsedPolicy]
) -> str | None:
    """The policy freezing this node, if any: suspended or invalid, and not being deleted."""
    for name in (old_owner, owner):
        parsed = policies.get(name) if name is not None else None
        if parsed is not None and not parsed.deleting and (parsed.suspended or not parsed.usable):
            return name
    return None


@dataclass(frozen=True)
class ClusterPlan:
    assignments: Mapping[str, Assignment]
    plans: Mapping[str, NodePlan]
    policies: Mapping[str, ParsedPolicy]

    @property
    def patches(self) -> dict[str, dict[str, Any]]:
        """Node name -> the PATCH to send (only nodes needing a write)."""
        return {n: p.patch for n, p in sorted(self.plans.items()) if p.patch is not None}


def plan_cluster(
    nodes: Iterable[NodeFacts],
    policies: Iterable[ParsedPolicy],
    *,
    require_gpu_evidence: bool = True,
    steps: Mapping[str, NodeStep] | None = None,
    owners: Mapping[str, OtherOwner] | None = None,
) -> ClusterPlan:
    """Selection and a plan for every node: the whole level-based reconcile, pure (`steps`:
    the rollout's, `owners`: the other MIG owners by node, see `plan_node`)."""
    by_name = {p.name: p for p in policies}
    selectable = [p.policy for p in by_name.values() if p.usable and p.policy is not None]
    facts = list(nodes)
    assignments = select(facts, selectable)
    desired = {p.name: desired_for(p) for p in selectable}
    plans = {
        f.name: plan_node(
            f,
            assignments[f.name],
            by_name,
            desired,
            require_gpu_evidence=require_gpu_evidence,
            steps=steps,
            owners=owners,
        )
        for f in facts
    }
    return ClusterPlan(assignments=assignments, plans=plans, policies=by_name)


def plan_one(
    facts: NodeFacts, policies: Iterable[ParsedPolicy], *, require_gpu_evidence: bool = True
) -> NodePlan:
    """The plan of one node (a node event): same result as `plan_cluster` gives for it."""
    return plan_cluster([facts], policies, require_gpu_evidence=require_gpu_evidence).plans[
        facts.name
    ]

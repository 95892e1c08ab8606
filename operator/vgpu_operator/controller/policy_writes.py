"""The policy side of the reconciler's pass (`controller.reconciler`): each policy's status
(written only when it changed), the release of a policy being deleted (once none of its nodes
carries its label or is still in a transition charged to it; Kopf's deletion handler waits for
it, and Kopf then removes its finalizer), and the gauges."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller import metrics
from vgpu_operator.controller.observe import CONDITION as OBSERVED
from vgpu_operator.controller.observe import Observer
from vgpu_operator.core.backoff import Backoff
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.planner import ClusterPlan
from vgpu_operator.core.nodes.status import compute_status, status_patch
from vgpu_operator.core.nodes.validate import REFUSED_REASON, ParsedPolicy
from vgpu_operator.core.rollout.decide import parse_rollout
from vgpu_operator.models.policy import VGPUNodePolicyStatus

log = logging.getLogger("vgpu_operator.reconciler")


@dataclass(frozen=True)
class PolicyEntry:
    """What the policy informer keeps per policy."""

    parsed: ParsedPolicy
    uid: str
    resource_version: str
    finalizers: tuple[str, ...]
    status: Mapping[str, Any]


# Conditions computed elsewhere for a policy owning these nodes (e.g. ConfigConsistent).
ExtraConditions = Callable[[str, frozenset[str]], Mapping[str, tuple[str, str, str]]]


class PolicyWrites:
    """Status and finalizer writes; the base of `Reconciler`, whose fields these are."""

    api: client.ApiClient
    now: Callable[[], datetime]
    extra_conditions: ExtraConditions | None
    observer: Observer | None
    node_backoff: Backoff[str]
    _written_status: dict[str, dict[str, Any]]
    _refused_posted: set[tuple[str, str]]
    _released: dict[str, asyncio.Event]  # deleted policies someone waits on
    still_held: dict[str, list[str]]  # deleted policies: the nodes they held at the last pass
    post_event: Callable[[Mapping[str, Any], str, str, str], None]

    def _retry_soon(self) -> None:
        raise NotImplementedError

    def request_full(self) -> None:
        raise NotImplementedError

    async def _write_statuses(
        self,
        cluster: ClusterPlan,
        nodes: Mapping[str, NodeFacts],
        policies: Mapping[str, PolicyEntry],
    ) -> None:
        now = self.now()
        failures = {node: f[1] for node, f in self.node_backoff.failing().items()}
        conditions: dict[str, dict[str, str]] = {}
        try:
            await self._write_each_status(cluster, nodes, policies, now, failures, conditions)
        finally:
            metrics.export_policy_conditions(conditions)

    async def _write_each_status(
        self,
        cluster: ClusterPlan,
        nodes: Mapping[str, NodeFacts],
        policies: Mapping[str, PolicyEntry],
        now: datetime,
        failures: Mapping[str, str],
        conditions: dict[str, dict[str, str]],
    ) -> None:
        for name, entry in policies.items():
            mine = self._written_status.get(name)
            if mine is not None and status_patch(entry.status, _as_status(mine)) is None:
                del self._written_status[name]  # the watch delivered our write
                mine = None
            old = mine if mine is not None else dict(entry.status)
            extra = None
            if self.extra_conditions is not None:
                owned = frozenset(n for n, a in cluster.assignments.items() if a.owner == name)
                extra = self.extra_conditions(name, owned)
            if self.observer is not None:
                extra = {**(extra or {}), OBSERVED: self.observer.condition(name)}
            parsed = cluster.policies.get(name, entry.parsed)  # with a refusal, if any
            new = compute_status(parsed, cluster, nodes, old, now, extra, failures)
            conditions[name] = {c.type: c.status for c in new.conditions}
            body = status_patch(old, new)
            if body is None:
                continue
            try:
                await kubeapi.request(
                    self.api,
                    "PATCH",
                    kubeapi.policy_path(name, status=True),
                    body=body,
                    content_type=kubeapi.MERGE_PATCH,
                )
            except kubeapi.NotFound:
                continue
            self._written_status[name] = body["status"]

    def forget_policy(self, name: str) -> None:
        self._written_status.pop(name, None)
        self.still_held.pop(name, None)

    # -- refusals ---------------------------------------------------------------------------
    def _warn_refused(
        self, parsed: Iterable[ParsedPolicy], policies: Mapping[str, PolicyEntry]
    ) -> None:
        """One Warning Event per refused policy and refusal (`core.volcano.plugin_refusal`), and
        the log; again only after the refusal went away and came back."""
        now: set[tuple[str, str]] = set()
        for p in parsed:
            entry = policies.get(p.name)
            if not p.refused or entry is None:
                continue
            text = "; ".join(x.describe() for x in p.refused)
            now.add((p.name, text))
            if (p.name, text) in self._refused_posted:
                continue
            log.warning("policy %s refused: %s", p.name, text)
            ref = kubeapi.object_ref(contract.POLICY_KIND, p.name, uid=entry.uid)
            self.post_event(ref, "Warning", REFUSED_REASON, text)
        self._refused_posted.clear()
        self._refused_posted.update(now)

    # -- releases ---------------------------------------------------------------------------
    def _report_releases(
        self, nodes: Mapping[str, NodeFacts], policies: Mapping[str, PolicyEntry]
    ) -> None:
        """For each policy being deleted, the nodes it still holds (its label, or a transition
        charged to it); a policy that holds none is released: whoever waits on it
        (`wait_released`, Kopf's deletion handler) is told. The decision is the same with or
        without a finalizer: what the release does to each node was decided by the node plans
        from the node's own records (`core.nodes.adoption`)."""
        for name, entry in policies.items():
            if not entry.parsed.deleting:
                continue
            still = [n for n, f in nodes.items() if f.policy_label == name or _leaving(f, name)]
            self.still_held[name] = still
            if still:
                log.info("policy %s is being deleted; %d nodes still to clean", name, len(still))
                if not all(n in self.node_backoff for n in still):
                    self._retry_soon()  # (a node backing off brings its own pass when due)
                continue
            waiter = self._released.get(name)
            if waiter is not None:
                waiter.set()

    async def wait_released(self, name: str, timeout: float) -> list[str]:
        """Until a pass finds the deleted policy `name` holds no node: [] then; the nodes it
        still held at the last pass if `timeout` seconds pass first."""
        waiter = self._released[name] = asyncio.Event()
        self.still_held.pop(name, None)
        self.request_full()
        try:
            await asyncio.wait_for(waiter.wait(), timeout)
        except TimeoutError:
            return self.still_held.get(name) or [f"(no pass has looked at {name} yet)"]
        finally:
            if self._released.get(name) is waiter:
                del self._released[name]
        return []


def _leaving(facts: NodeFacts, policy: str) -> bool:
    """The node is still in a transition charged to `policy`: after a leave's release its label
    is gone, but its cordon and paused clients are undone only at the end (`core.rollout.leave`);
    the policy's finalizer waits for that too."""
    if contract.ANN_ROLLOUT not in facts.annotations:
        return False
    record, _error = parse_rollout(facts)
    return record is not None and record.policy == policy


def _as_status(raw: Mapping[str, Any]) -> VGPUNodePolicyStatus:
    return VGPUNodePolicyStatus.model_validate(raw)


def export_gauges(
    cluster: ClusterPlan, nodes: Mapping[str, NodeFacts], policies: Iterable[str]
) -> None:
    """Nodes by policy, mode and state; transitions in flight per policy; conflicts."""
    owned: dict[str, tuple[str, str, str]] = {}
    transitions = dict.fromkeys(policies, 0)
    for name, plan in cluster.plans.items():
        facts = nodes.get(name)
        if not (plan.new_owner and plan.new_mode):
            record = parse_rollout(facts)[0] if facts is not None else None
            if record is not None and record.kind == "leave" and record.policy in transitions:
                transitions[record.policy] += 1  # leaving the pool it counts against
            continue
        state = metrics.node_state(facts, refused=plan.action == "blocked")
        owned[name] = (plan.new_owner, plan.new_mode, state)
        if facts is not None and metrics.in_transition(facts):
            transitions[plan.new_owner] = transitions.get(plan.new_owner, 0) + 1
    conflicts = sum(1 for a in cluster.assignments.values() if a.conflicted)
    metrics.export_nodes(owned, transitions, conflicts)

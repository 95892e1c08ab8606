"""The policy side of the policy reconciler's passes (`controller.reconciler`): each policy's
status (written only when it changed), the refusals' Warning Events, the release of a policy
being deleted (once none of its nodes carries its label or is still in a transition charged to
it; Kopf's deletion handler waits for it, and Kopf then removes its finalizer), and the gauges.
The writer owns what it remembers between passes: the statuses written and not seen back yet,
the refusals posted, the waits for releases, the nodes each deleted policy still held, and since
when each policy waits for what it must read first (`ParsedPolicy.waiting`: its status says so
only once the wait lasts `WAIT_REPORTED_AFTER`; a wait that ends sooner, as the one for the first
configuration pass at start-up does, changes no status)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Container, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller import metrics
from vgpu_operator.controller.cache import ClusterCache, ConfigurationState
from vgpu_operator.controller.kept import PolicyEntry
from vgpu_operator.controller.observe import CONDITION as OBSERVED
from vgpu_operator.controller.observe import Observer
from vgpu_operator.core.admission.verdict import CONDITION as ADMISSION
from vgpu_operator.core.findings import CONDITION, ConditionValue, config_condition
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.planner import ClusterPlan
from vgpu_operator.core.nodes.status import compute_status, status_patch
from vgpu_operator.core.nodes.validate import ParsedPolicy
from vgpu_operator.core.rollout.decide import parse_rollout
from vgpu_operator.models.policy import VGPUNodePolicyStatus

log = logging.getLogger("vgpu_operator.reconciler")

# Posts an Event: (the object's reference, type, reason, message); kubeapi.events.EventPoster.
EventPoster = Callable[[Mapping[str, Any], str, str, str], None]

# How long a policy waits (`ParsedPolicy.waiting`) before its status says so: the first
# configuration pass reads the scheduler a few seconds after start-up, after the Nodes, GPU pods
# and DaemonSets are listed.
WAIT_REPORTED_AFTER = timedelta(seconds=30)


class PolicyStatusWriter:
    """Status, refusal Events and release of every policy. It reads the cache (a policy's
    stored status) and the configuration reconciler's findings (`configuration`; None: none
    runs), and reports what observe mode would do (`observer`). `request_full` asks the
    reconciler for a full pass (a release waited for, nodes still to clean)."""

    def __init__(
        self,
        api: client.ApiClient,
        post_event: EventPoster,
        cache: ClusterCache,
        request_full: Callable[[], None],
        *,
        configuration: ConfigurationState | None = None,
        observer: Observer | None = None,
        admission: Callable[[], ConditionValue] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api = api
        self.post_event = post_event
        self.cache = cache
        self.request_full = request_full
        self.configuration = configuration
        self.observer = observer
        self.admission = admission  # the AdmissionPoliciesEnforced condition, as it is now
        self.now = now
        self._written_status: dict[str, dict[str, Any]] = {}
        self._refused_posted: set[tuple[str, str]] = set()  # (policy, refusal)
        self._released: dict[str, asyncio.Event] = {}  # deleted policies someone waits on
        self.still_held: dict[str, list[str]] = {}  # deleted policies: nodes held at the last pass
        self._retry_timer: asyncio.TimerHandle | None = None
        self._waiting_since: dict[str, datetime] = {}  # policies waiting, since when
        self._wait_timer: asyncio.TimerHandle | None = None

    # -- statuses ---------------------------------------------------------------------------
    async def write(
        self,
        cluster: ClusterPlan,
        nodes: Mapping[str, NodeFacts],
        policies: Mapping[str, PolicyEntry],
        failures: Mapping[str, str],
    ) -> None:
        """Each policy's status, from the pass's plan of every node; `failures`: the nodes
        whose writes are backing off, with the apiserver's message."""
        now = self.now()
        conditions: dict[str, dict[str, str]] = {}
        try:
            await self._write_each(cluster, nodes, policies, now, failures, conditions)
        finally:
            metrics.export_policy_conditions(conditions)

    async def _write_each(
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
            owned = frozenset(n for n, a in cluster.assignments.items() if a.owner == name)
            extra = self.configuration_condition(name, owned)
            if self.observer is not None:
                extra = {**extra, OBSERVED: self.observer.condition(name)}
            if self.admission is not None:
                extra = {**extra, ADMISSION: self.admission()}
            parsed = cluster.policies.get(name, entry.parsed)  # with a refusal, if any
            new = compute_status(parsed, cluster, nodes, old, now, extra, failures)
            conditions[name] = {c.type: c.status for c in new.conditions}
            unreported = self._wait_unreported(name, parsed, now)
            body = status_patch(old, new)
            if body is None or unreported:
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

    def configuration_condition(
        self, policy: str, nodes: frozenset[str]
    ) -> dict[str, ConditionValue]:
        """The ConfigConsistent condition of a policy owning `nodes` (none without a
        configuration reconciler). Until its first pass has run, the policy keeps the condition
        it has (a restarted operator writes no status for it)."""
        configuration = self.configuration
        if configuration is None:
            return {}
        if configuration.findings is not None:
            mode = self.cache.config.mode
            return {CONDITION: config_condition(configuration.findings, nodes, mode=mode)}
        stored = self.cache.policies.get(policy)
        for c in (stored.status if stored else {}).get("conditions") or []:
            if c.get("type") == CONDITION:
                kept = (c.get("status", "Unknown"), c.get("reason", ""), c.get("message", ""))
                return {CONDITION: kept}
        return {}

    def forget_policy(self, name: str) -> None:
        self._written_status.pop(name, None)
        self.still_held.pop(name, None)
        self._waiting_since.pop(name, None)

    def _wait_unreported(self, name: str, parsed: ParsedPolicy, now: datetime) -> bool:
        """Whether the status of `parsed` stays as it is: the policy only waits (no refusal,
        no `spec.suspend`) and has waited less than `WAIT_REPORTED_AFTER` so far; a full pass is
        then asked for when the wait would be reported."""
        spec = parsed.policy.spec if parsed.policy is not None else None
        if not parsed.waiting or parsed.refused or spec is None or spec.suspend:
            self._waiting_since.pop(name, None)
            return False
        since = self._waiting_since.setdefault(name, now)
        left = (since + WAIT_REPORTED_AFTER - now).total_seconds()
        if left <= 0:
            return False
        if self._wait_timer is None:

            def fire() -> None:
                self._wait_timer = None
                self.request_full()

            self._wait_timer = asyncio.get_running_loop().call_later(left, fire)
        return True

    # -- refusals ---------------------------------------------------------------------------
    def warn_refused(
        self, parsed: Iterable[ParsedPolicy], policies: Mapping[str, PolicyEntry]
    ) -> None:
        """One Warning Event per refused policy and refusal (`core.volcano.plugin_refusal`,
        `core.nodes.policy_keys`; the first refusal's reason), and the log; again only after the
        refusal went away and came back."""
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
            self.post_event(ref, "Warning", p.refused[0].reason, text)
        self._refused_posted.clear()
        self._refused_posted.update(now)

    # -- releases ---------------------------------------------------------------------------
    def report_releases(
        self,
        nodes: Mapping[str, NodeFacts],
        policies: Mapping[str, PolicyEntry],
        backing_off: Container[str] = (),
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
                # (a node backing off brings its own pass when due; in observe mode, nothing
                # is released until the controller writes again)
                if self.observer is None and not all(n in backing_off for n in still):
                    self._retry_soon()
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

    def _retry_soon(self) -> None:
        """Another full pass after a short pause (the watch may still be catching up); one
        pending at a time."""
        if self._retry_timer is not None:
            return

        def fire() -> None:
            self._retry_timer = None
            self.request_full()

        self._retry_timer = asyncio.get_running_loop().call_later(1.0, fire)


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

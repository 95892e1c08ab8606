"""The shell of safe transitions: reads what `core.rollout.decide` decides from, and does what only
it can.

Each pass of the policy reconciler asks `decide` for every node's step (from the Nodes, their
`vgpu.volcano.sh/rollout` records, the pod index's GPU pods, the plugin's registrations and what
the configuration reconciler's last snapshot says of the plugin pods and node-config entries); the
node PATCHes the reconciler sends carry the steps (cordon, pause, release, resume, uncordon, the
record). What is not a node write is done here: evictions (`POST pods/NAME/eviction`, the
Eviction API, which refuses with 429 while a PodDisruptionBudget forbids it; the refusal is kept
for the failure's reason), Events on the nodes and the policy, and the wake-up at the earliest
timeout. Nothing is kept that a restarted operator needs: the records on the nodes are the state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.cache import ClusterCache, ConfigurationState
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.gpu_owners import OtherOwner
from vgpu_operator.core.nodes.planner import NodePlan
from vgpu_operator.core.nodes.validate import ParsedPolicy
from vgpu_operator.core.rollout.decide import GpuPod, PluginReading, RolloutPlan, decide_cluster
from vgpu_operator.core.rollout.gpu_pods import gpu_pod_of
from vgpu_operator.core.rollout.plugin import plugin_readings
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.volcano import registration

log = logging.getLogger("vgpu_operator.rollout")

Obj = dict[str, Any]
EventPoster = Callable[[Mapping[str, Any], str, str, str], None]
EVICTIONS_AT_ONCE = 8  # parallel eviction requests per pass
EVICTION_RETRY_SECONDS = 5.0  # a refused eviction is asked again this often (as kubectl drain)
DRAIN_POLL_SECONDS = 1.0


def eviction_path(key: str) -> str:
    namespace, _, name = key.partition("/")
    return f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"


def eviction_body(key: str) -> Obj:
    namespace, _, name = key.partition("/")
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }


@dataclass
class PluginReadings:
    """What the last configuration pass read of the device plugin on given nodes, computed once
    per snapshot. `state`: what that pass published (None: no configuration reconciler runs;
    nothing is waited for). Before the first pass, and for a node the snapshot does not have, a
    node reads as unknown (a plugin pod there, no entry): no node moves past a wait on a
    guess."""

    state: ConfigurationState | None
    enforced: bool  # the operator writes the node-config entries (mode enforce)
    _of: ClusterSnapshot | None = None
    _readings: dict[str, PluginReading] = field(default_factory=dict)

    def __call__(self, nodes: Collection[str]) -> Mapping[str, PluginReading]:
        if self.state is None:
            return {}
        snapshot, at = self.state.snapshot, self.state.read_at
        unknown = PluginReading(read_at=datetime.min.replace(tzinfo=UTC), running=True, entry=None)
        if snapshot is None or at is None:
            return dict.fromkeys(nodes, unknown)
        if self._of is not snapshot:
            names = [str((n.get("metadata") or {}).get("name")) for n in snapshot.nodes]
            self._of = snapshot
            self._readings = plugin_readings(snapshot, at, names, enforced=self.enforced)
        return {n: self._readings.get(n, unknown) for n in nodes}  # not in it: not read yet


@dataclass
class RolloutDriver:
    """Reads the cache (`controller.cache`): each node's GPU consumers (None until the pod
    index is synced), the compact Node (for the plugin's registration), its uid (Events)."""

    api: kubeapi.Client
    post_event: EventPoster
    cache: ClusterCache
    # What the configuration reconciler last read of the device plugin on these nodes (pod
    # there, node-config entry rendered); {}: no configuration reconciler, nothing waited for.
    plugin_readings: PluginReadings = field(
        default_factory=lambda: PluginReadings(None, enforced=False)
    )
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    # Nodes whose next step waits for a configuration pass (the plugin pod leaving, the
    # node-config entry rewritten): each pass's end asks the reconciler to look at them again.
    waiting_on_configuration: frozenset[str] = frozenset()
    refusals: dict[str, str] = field(default_factory=dict)  # pod -> the last 429's message
    _asked: dict[str, datetime] = field(default_factory=dict)  # pod -> its last eviction request
    _timer: asyncio.TimerHandle | None = None
    _timer_at: datetime | None = None

    def decide(
        self,
        nodes: Mapping[str, NodeFacts],
        parsed: list[ParsedPolicy],
        owners: Mapping[str, OtherOwner] | None = None,
    ) -> RolloutPlan:
        pods: dict[str, tuple[GpuPod, ...]] = {}
        registrations: dict[str, str] = {}
        for name in nodes:
            on = self.cache.gpu_consumers(name)
            if on is None:
                # The pod index is not in yet: a node looks empty when it is not. No node may
                # start or leave Draining before it is (steps hold on an unknown pod).
                pods[name] = (GpuPod(key="(pod index not synced)", terminating=True),)
            else:
                pods[name] = tuple(p for p in map(gpu_pod_of, on) if p is not None)
            obj = self.cache.node_object(name) or {}
            text = registration(obj)
            if text:
                registrations[name] = text
        moving = [n for n, f in nodes.items() if contract.ANN_ROLLOUT in f.annotations]
        plan = decide_cluster(
            nodes.values(),
            parsed,
            self.now(),
            pods=pods,
            registrations=registrations,
            refusals=self.refusals,
            plugins=self.plugin_readings(moving) if moving else {},
            owners=owners,
        )
        self.waiting_on_configuration = frozenset(
            n
            for n, step in plan.steps.items()
            if step.rollout is not None
            and step.rollout.plugin_paused
            and step.rollout.phase in ("Pausing", "Applying")
        )
        return plan

    async def act(
        self,
        plan: RolloutPlan,
        plans: Mapping[str, NodePlan],
        written: Mapping[str, NodePlan],
        wake: Callable[[], None],
    ) -> None:
        """After the node writes: evict what the steps ask (nodes the planner did not hold or
        block), post the Events of the steps that were written, set the timer."""
        keys = [
            key
            for node, step in plan.steps.items()
            if plans.get(node) is not None and plans[node].action not in ("held", "conflict")
            for key in step.evict
        ]
        live = {k for step in plan.steps.values() for k in step.evict}
        self.refusals = {k: v for k, v in self.refusals.items() if k in live}
        now = self.now()
        self._asked = {k: t for k, t in self._asked.items() if k in live}
        retry = timedelta(seconds=EVICTION_RETRY_SECONDS)
        keys = [k for k in keys if k not in self._asked or now - self._asked[k] >= retry]
        self._asked.update(dict.fromkeys(keys, now))
        gate = asyncio.Semaphore(EVICTIONS_AT_ONCE)

        async def evict(key: str) -> None:
            async with gate:
                await self._evict(key)

        await asyncio.gather(*(evict(k) for k in keys))
        for node, step in plan.steps.items():
            if step.event is None or node not in written:
                continue
            ref = kubeapi.object_ref("Node", node, uid=self.cache.node_uid(node))
            self.post_event(ref, step.event.type, step.event.reason, step.event.message)
            if step.event.type == "Warning" and step.rollout is not None:
                policy = kubeapi.object_ref(contract.POLICY_KIND, step.rollout.policy)
                message = f"node {node}: {step.event.message}"
                self.post_event(policy, "Warning", step.event.reason, message)
        due = plan.due
        draining = [s for s in plan.steps.values() if s.rollout and s.rollout.phase == "Draining"]
        if draining:
            # pods leave without a Node event: look again soon while a node drains
            soon = self.now() + timedelta(seconds=DRAIN_POLL_SECONDS)
            due = soon if due is None or soon < due else due
        self._schedule(due, wake)

    async def _evict(self, key: str) -> None:
        try:
            await kubeapi.request(
                self.api, "POST", eviction_path(key), body=eviction_body(key), field_manager=None
            )
        except kubeapi.NotFound:
            self.refusals.pop(key, None)  # already gone
            return
        except kubeapi.TooManyRequests as exc:  # a PodDisruptionBudget forbids it for now
            self.refusals[key] = exc.message
            log.info("eviction of %s refused: %s", key, exc.message)
            return
        except kubeapi.ApiError as exc:
            self.refusals[key] = f"{exc.status} {exc.message}"
            log.warning("eviction of %s failed: %s", key, exc.message)
            return
        self.refusals.pop(key, None)
        log.info("evicted %s", key)

    def _schedule(self, due: datetime | None, wake: Callable[[], None]) -> None:
        """One timer, at the earliest timeout of a node in transition."""
        if due is None:
            return
        if self._timer is not None and self._timer_at is not None and self._timer_at <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, (due - self.now()).total_seconds()) + 0.05

        def fire() -> None:
            self._timer = None
            self._timer_at = None
            wake()

        self._timer_at = due
        self._timer = asyncio.get_running_loop().call_later(delay, fire)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

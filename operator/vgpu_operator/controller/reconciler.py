"""The write side of the controller: one task that plans with the core and closes the difference.

The cache (`controller.cache`: the node informer, Kopf's policy index) keeps Nodes and policies
in memory. The watch callbacks and Kopf's policy handlers only *request* work: a policy change
asks for a full pass, a node change for that node. The reconciler batches requests, takes a
snapshot of the cache, calls the pure core (`plan_cluster`, `compute_status`) and writes through
its two writers: one merge PATCH per node that differs (none when it already matches;
`controller.node_writes.NodeWriter`), a status PATCH per policy whose status changed
(`controller.policy_writes.PolicyStatusWriter`), and itself one Event per policy that changed
nodes. Being the only writer in the process, it needs no per-node locks; a 409 (someone else
wrote the node since the watch saw it) means: read that node again and plan it again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from kubernetes_asyncio import client

from vgpu_operator import contract, heap, kubeapi
from vgpu_operator.controller import metrics
from vgpu_operator.controller.cache import ClusterCache, ConfigurationState
from vgpu_operator.controller.kept import PolicyEntry
from vgpu_operator.controller.node_writes import NodeWriter
from vgpu_operator.controller.observe import Observer
from vgpu_operator.controller.policy_writes import EventPoster, PolicyStatusWriter, export_gauges
from vgpu_operator.controller.rollout import RolloutDriver
from vgpu_operator.core.backoff import Backoff
from vgpu_operator.core.findings import ConditionValue
from vgpu_operator.core.nodes.events import node_events, policy_event
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.gpu_owners import OtherOwner, agent_partitions
from vgpu_operator.core.nodes.patch import desired_for
from vgpu_operator.core.nodes.planner import ClusterPlan, NodePlan, plan_cluster
from vgpu_operator.core.nodes.step import NodeStep
from vgpu_operator.core.nodes.validate import ParsedPolicy
from vgpu_operator.core.refusals import (
    NOT_READ_YET,
    AscendScheduler,
    refusal_scheduler,
    refuse_policies,
)
from vgpu_operator.core.rollout.leave import plan_with_leaves
from vgpu_operator.core.volcano.dra_kubelet_plugin import layout_owners
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.waiting import run_passes

log = logging.getLogger("vgpu_operator.reconciler")

__all__ = ["PolicyEntry", "Reconciler", "ReconcilerOptions"]


@dataclass
class ReconcilerOptions:
    concurrency: int = 32  # parallel node PATCHes (bounded, like any well-behaved client)
    debounce_seconds: float = 0.05  # gather a burst of events into one pass
    resync_seconds: float = 300.0  # full pass even without events (heals anything missed)
    conflict_retries: int = 3
    status_interval: float = 1.0  # node-triggered passes recompute status at most this often
    # A node that shows no hardware of its policy's mode is reported, never written: the
    # operator config's `requireGpuEvidence` (ReconcilerOptions.for_config).
    require_gpu_evidence: bool = True
    # `mode: observe`: no node written, what enforce would write reported (controller.observe)
    observe: bool = False

    def for_config(self, config: OperatorConfig) -> ReconcilerOptions:
        """These options with what the operator config decides for the policy reconciler."""
        return replace(
            self,
            require_gpu_evidence=config.require_gpu_evidence,
            observe=config.mode == "observe",
        )


PLAN_CHUNK = 200  # nodes planned at a time while the writes go on (`Reconciler._plan_in_chunks`)


class Reconciler:
    """The policy reconciler: reads the cache, plans, and writes through its `node_writer` and
    `status_writer`. `rollout` (`controller.rollout`): safe transitions (None releases every
    change at once); `configuration`: what the configuration reconciler publishes (None: none
    runs), for the policies' ConfigConsistent condition and the scheduler the refusals read
    (`core.refusals`). In observe mode no rollout acts and no node is written: an `Observer`
    reports what enforce would do."""

    def __init__(
        self,
        api: client.ApiClient,
        cache: ClusterCache,
        post_event: EventPoster,
        options: ReconcilerOptions | None = None,
        *,
        rollout: RolloutDriver | None = None,
        configuration: ConfigurationState | None = None,
        admission: Callable[[], ConditionValue] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        node_backoff: Backoff[str] | None = None,
        clock: Callable[[], float] = time.monotonic,  # the node back-off's time
    ) -> None:
        self.cache = cache
        self.post_event = post_event
        self.options = options if options is not None else ReconcilerOptions()
        self.rollout = rollout
        self.observer: Observer | None = None
        if self.options.observe:  # observe: no rollout acts, no node is written
            self.rollout = None
            self.observer = Observer(post_event, cache.node_uid)
        self.node_writer = NodeWriter(
            api,
            self.request_nodes,
            concurrency=self.options.concurrency,
            conflict_retries=self.options.conflict_retries,
            observe=self.observer is not None,
            backoff=node_backoff,
            clock=clock,
        )
        self.status_writer = PolicyStatusWriter(
            api,
            post_event,
            cache,
            self.request_full,
            configuration=configuration,
            observer=self.observer,
            admission=admission,
            now=now,
        )
        self.passes = 0
        self._full = False
        self._nodes: set[str] = set()
        self._wake = asyncio.Event()
        self._reported: set[tuple[str, str]] = set()  # (node, reason) of Warnings posted
        self._last_status = 0.0
        self._status_scheduled = False
        self._steps: Mapping[str, NodeStep] | None = None  # the rollout's steps of the pass
        self._held: Mapping[str, str] = {}  # leaving nodes not released yet
        self._configuration = configuration
        self._refused_with: AscendScheduler | None = None  # the scheduler the last pass read
        # The other MIG owners by node the last pass planned with: no static layout is
        # released to these nodes (`core.nodes.gpu_owners.layout_held`).
        self._owners: Mapping[str, OtherOwner] = {}

    @property
    def idle(self) -> asyncio.Event:
        """Set while no node writes are under way (the configuration pass waits for it)."""
        return self.node_writer.idle

    # -- requests (from the watches, Kopf's handlers, the writers' timers) ------------------
    def request_full(self) -> None:
        self._full = True
        self._wake.set()

    def request_nodes(self, names: Iterable[str]) -> None:
        self._nodes.update(names)
        self._wake.set()

    def configuration_published(self, snapshot: ClusterSnapshot) -> bool:
        """A configuration pass published `snapshot`: a full pass (True) when what the refusals
        read of the scheduler (its version, the global soft-slicing switch), or the nodes another
        MIG owner reaches (`_layout_owners`: the pass also follows a Node or DaemonSet change),
        are not what the last pass planned with."""
        changed = (
            refusal_scheduler(snapshot) != self._refused_with
            or self._layout_owners() != self._owners
        )
        if changed:
            self.request_full()
        return changed

    def _layout_owners(self) -> dict[str, OtherOwner]:
        """The other MIG owners by node (`core.volcano.dra_kubelet_plugin.layout_owners`): the
        DaemonSets and Nodes as the watches hold them now, the pods as the last configuration
        pass read them (none before it, or without one: the placement decides alone). None
        looked for while no policy asks for a static layout (at 5,000 nodes that a DRA kubelet
        plugin half reaches, the look takes about 80 ms)."""
        static = any(
            e.parsed.policy is not None and agent_partitions(desired_for(e.parsed.policy).target)
            for e in self.cache.policies.items.values()
        )
        daemonsets = self.cache.daemonset_objects()
        nodes = self.cache.node_objects()
        if not static or not daemonsets or not nodes:
            return {}
        state = self._configuration
        pods = state.snapshot.pods if state is not None and state.snapshot is not None else []
        return layout_owners(daemonsets, nodes, pods)

    def _refusal_scheduler(self) -> AscendScheduler | None:
        """The scheduler as the last configuration pass read it: `NOT_READ_YET` before the
        first pass published (the Ascend pools that may turn soft slicing on wait for it), None
        when no configuration reconciler runs (nothing is refused for the scheduler's version)."""
        state = self._configuration
        if state is None:
            return None
        return refusal_scheduler(state.snapshot) if state.snapshot is not None else NOT_READ_YET

    # -- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        await run_passes(
            self._wake,
            self._pass,
            debounce=self.options.debounce_seconds,
            resync=self.options.resync_seconds,
            retry=1.0,
            name="reconcile pass",
        )

    async def _pass(self, resync: bool) -> bool:
        full, nodes = self._full or resync, set(self._nodes)
        self._full, self._nodes = False, set()
        try:
            await self.reconcile(full=full, only=nodes)
        except Exception:
            metrics.RECONCILES.labels(result="error").inc()
            self._full = True  # the retry is a full pass
            raise
        if full:
            heap.give_back()  # a full pass's plans and patches (vgpu_operator/heap.py)
        return full

    async def reconcile(self, *, full: bool, only: set[str]) -> None:
        """One pass. A node-triggered pass plans only the requested nodes (selection is per
        node, so a subset plans exactly as the whole would); status, Events and releases need
        the whole picture and are computed after writes, on full passes, and otherwise at most
        every `status_interval` seconds."""
        start = time.monotonic()
        nodes, policies = self.cache.snapshot()
        self.node_writer.overlay(nodes)
        scheduler = self._refusal_scheduler()
        parsed = refuse_policies(  # as `plan` refuses them
            (p.parsed for p in policies.values()),
            self.cache.config,
            self.cache.plugin_values(),
            nodes=nodes.values(),
            scheduler=scheduler,
        )
        self._refused_with = scheduler
        self.status_writer.warn_refused(parsed, policies)
        self._owners = owners = self._layout_owners()
        paced = self.rollout.decide(nodes, parsed, owners) if self.rollout is not None else None
        self._steps = paced.steps if paced is not None else None
        self._held = paced.held if paced is not None else {}
        wanted = only | set(self._steps or ())  # the rollout looks at every node
        targets = list(nodes.values()) if full else [nodes[n] for n in wanted if n in nodes]
        plans: dict[str, NodePlan] = {}
        chunks = self._plan_in_chunks(targets, parsed, plans)
        written = await self.node_writer.write(chunks, lambda t: self._plan(t, parsed), nodes)
        for _ in chunks:  # planned to the end even where nothing was written (observe)
            pass
        if paced is not None and self.rollout is not None:
            await self.rollout.act(paced, plans, written, self.request_full)
            moved = [n for n, p in written.items() if p.step is not None]
            if moved:
                self.request_nodes(moved)  # the next step may follow at once
        self.passes += 1
        now = time.monotonic()
        if full or written or now - self._last_status >= self.options.status_interval:
            self._last_status = now
            cluster = plan_cluster(
                nodes.values(),
                parsed,
                require_gpu_evidence=self.options.require_gpu_evidence,
                owners=owners,
            )
            self._emit_events(cluster, policies, written)
            if self.observer is not None:
                self.observer.nodes(cluster, nodes)
            await self.status_writer.write(cluster, nodes, policies, self.node_writer.failures())
            self.status_writer.report_releases(nodes, policies, self.node_writer.backoff)
            export_gauges(cluster, nodes, policies)
        elif not self._status_scheduled:
            self._status_scheduled = True
            asyncio.get_running_loop().call_later(self.options.status_interval, self._status_pass)
        metrics.RECONCILES.labels(result="ok").inc()
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - start)

    def _plan(self, targets: Iterable[NodeFacts], parsed: list[ParsedPolicy]) -> ClusterPlan:
        """The node plans of this pass: the rollout's steps carried, and a leaving node kept as
        its pool's until its step releases it (`core.rollout.leave`)."""
        return plan_with_leaves(
            targets,
            parsed,
            require_gpu_evidence=self.options.require_gpu_evidence,
            steps=self._steps,
            held=self._held,
            owners=self._owners,
        )

    def _plan_in_chunks(
        self, targets: list[NodeFacts], parsed: list[ParsedPolicy], into: dict[str, NodePlan]
    ) -> Iterator[NodePlan]:
        """The plans of `targets`, made `PLAN_CHUNK` nodes at a time as the writers ask for
        them (each plan is also put in `into`): the first PATCH leaves after one chunk's
        planning, not after the whole cluster's (about 1.2 s at 5,000 nodes), and planning goes
        on while the apiserver answers. A node's plan depends on that node and the policies
        only (`core.nodes.selection`), so chunks plan exactly as the whole would."""
        for start in range(0, len(targets), PLAN_CHUNK):
            part = self._plan(targets[start : start + PLAN_CHUNK], parsed).plans
            into.update(part)
            yield from part.values()

    def _status_pass(self) -> None:
        self._status_scheduled = False
        self.request_nodes([])

    # -- events -----------------------------------------------------------------------------
    def _emit_events(
        self,
        cluster: ClusterPlan,
        policies: Mapping[str, PolicyEntry],
        written: Mapping[str, NodePlan],
    ) -> None:
        problems = [p for p in cluster.plans.values() if p.problems]
        specs, left_out = node_events([*written.values(), *problems], self._reported)
        for name, entry in policies.items():
            spec = policy_event(name, written.values())
            if spec is not None:
                if left_out:
                    spec = replace(
                        spec, message=f"{spec.message} ({left_out} node Events not posted)"
                    )
                ref = kubeapi.object_ref(contract.POLICY_KIND, name, uid=entry.uid)
                self.post_event(ref, spec.type, spec.reason, spec.message)
        for spec in specs:
            ref = kubeapi.object_ref("Node", spec.name, uid=self.cache.node_uid(spec.name))
            self.post_event(ref, spec.type, spec.reason, spec.message)
            if spec.type == "Warning":
                self._reported.add((spec.name, spec.reason))
        current = {(p.node, pr.reason) for p in problems for pr in p.problems}
        self._reported &= current  # a problem that went away may be reported again later

"""The write side of the controller: one task that plans with the core and closes the difference.

The node informer (`controller.informer`) and Kopf's policy index (`controller.policies`) keep
Nodes and policies in memory. Their callbacks and Kopf's policy handlers only *request* work: a
policy change asks for a full pass, a node change for that node. The reconciler batches
requests, takes a snapshot of both, calls the pure core (`plan_cluster`,
`compute_status`) and writes: one merge PATCH per node that differs (none when it already
matches), a status PATCH per policy whose status changed, one Event per policy that changed
nodes. Being the only writer in the process, it needs no per-node locks; a 409 (someone else
wrote the node since the watch saw it) means: read that node again and plan it again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller import metrics
from vgpu_operator.controller.node_writes import NodeWrites, node_write_backoff
from vgpu_operator.controller.observe import Observer
from vgpu_operator.controller.policy_writes import (
    ExtraConditions,
    PolicyEntry,
    PolicyWrites,
    export_gauges,
)
from vgpu_operator.controller.rollout import RolloutDriver
from vgpu_operator.core.backoff import Backoff
from vgpu_operator.core.nodes.adoption import OnDelete, with_on_delete_default
from vgpu_operator.core.nodes.events import node_events, policy_event
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.planner import ClusterPlan, NodePlan, plan_cluster
from vgpu_operator.core.nodes.step import NodeStep
from vgpu_operator.core.nodes.validate import ParsedPolicy
from vgpu_operator.core.rollout.leave import plan_with_leaves
from vgpu_operator.core.volcano.plugin_refusal import PluginNodeValues, refuse_ignored
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.waiting import run_passes

log = logging.getLogger("vgpu_operator.reconciler")

__all__ = ["PolicyEntry", "Reconciler", "ReconcilerOptions"]

# Posts an Event: (the object's reference, type, reason, message); kubeapi.events.EventPoster.
EventPoster = Callable[[Mapping[str, Any], str, str, str], None]


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
    on_delete: OnDelete = "Delete"  # the default of a policy's spec.onDelete (core.nodes.adoption)

    def for_config(self, config: OperatorConfig) -> ReconcilerOptions:
        """These options with what the operator config decides for the policy reconciler."""
        return replace(
            self,
            require_gpu_evidence=config.require_gpu_evidence,
            observe=config.mode == "observe",
            on_delete=config.on_delete,
        )


PLAN_CHUNK = 200  # nodes planned at a time while the writes go on (`Reconciler._plan_in_chunks`)

Snapshot = Callable[[], tuple[dict[str, NodeFacts], dict[str, PolicyEntry]]]
NodeUid = Callable[[str], str]


@dataclass
class Reconciler(NodeWrites, PolicyWrites):
    api: client.ApiClient
    snapshot: Snapshot
    post_event: EventPoster
    node_uid: NodeUid = lambda _name: ""
    options: ReconcilerOptions = field(default_factory=ReconcilerOptions)
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    extra_conditions: ExtraConditions | None = None
    # Safe transitions (controller.rollout): None releases every change at once.
    rollout: RolloutDriver | None = None
    observer: Observer | None = None  # mode: observe (made from the options)
    # What the configured HAMi plugin registers whatever a node's entry says (≤ v1.11; None:
    # it applies per-node values, or is unknown): policies it cannot apply are refused.
    plugin_values: Callable[[], PluginNodeValues | None] = lambda: None

    _full: bool = False
    _nodes: set[str] = field(default_factory=set)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    # Writes this process made that the watch may not have delivered yet (node -> object).
    _fresh: dict[str, NodeFacts] = field(default_factory=dict)
    _written_status: dict[str, dict[str, Any]] = field(default_factory=dict)
    _reported: set[tuple[str, str]] = field(default_factory=set)
    _refused_posted: set[tuple[str, str]] = field(default_factory=set)  # (policy, refusal)
    _released: dict[str, asyncio.Event] = field(default_factory=dict)
    still_held: dict[str, list[str]] = field(default_factory=dict)
    _last_status: float = 0.0
    _status_scheduled: bool = False
    # Nodes whose writes the apiserver refused (anything but 404/409): not written again before
    # their backoff allows; one timer wakes the reconciler for the earliest (`_write_nodes`).
    node_backoff: Backoff[str] = field(default_factory=node_write_backoff)
    clock: Callable[[], float] = time.monotonic  # the backoff's time (the event loop's clock)
    _backoff_timer: asyncio.TimerHandle | None = None
    _backoff_timer_at: float = 0.0
    _retry_timer: asyncio.TimerHandle | None = None
    _steps: Mapping[str, NodeStep] | None = None  # the rollout's steps of the current pass
    _held: Mapping[str, str] = field(default_factory=dict)  # leaving nodes not released yet
    passes: int = 0
    # Set while no node writes are under way (the configuration pass waits for it).
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()
        if self.options.observe:  # observe: no rollout acts, no node is written
            self.rollout = None
            if self.observer is None:
                self.observer = Observer(self.post_event, self.node_uid, self.options.on_delete)

    @property
    def conflict_retries(self) -> int:
        return self.options.conflict_retries

    @property
    def concurrency(self) -> int:
        return self.options.concurrency

    @property
    def writing(self) -> bool:
        return not self.idle.is_set()

    @writing.setter
    def writing(self, value: bool) -> None:
        if value:
            self.idle.clear()
        else:
            self.idle.set()

    # -- requests (called by handlers) ------------------------------------------------------
    def request_full(self) -> None:
        self._full = True
        self._wake.set()

    def request_nodes(self, names: Iterable[str]) -> None:
        self._nodes.update(names)
        self._wake.set()

    def _retry_soon(self) -> None:
        """Another full pass after a short pause (the watch may still be catching up); one
        pending at a time."""
        if self._retry_timer is not None:
            return

        def fire() -> None:
            self._retry_timer = None
            self.request_full()

        self._retry_timer = asyncio.get_running_loop().call_later(1.0, fire)

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
        return full

    async def reconcile(self, *, full: bool, only: set[str]) -> None:
        """One pass. A node-triggered pass plans only the requested nodes (selection is per
        node, so a subset plans exactly as the whole would); status, Events and releases need
        the whole picture and are computed after writes, on full passes, and otherwise at most
        every `status_interval` seconds."""
        start = time.monotonic()
        nodes, policies = self.snapshot()
        self._overlay_fresh(nodes)
        parsed = refuse_ignored(
            with_on_delete_default((p.parsed for p in policies.values()), self.options.on_delete),
            self.plugin_values(),
        )
        self._warn_refused(parsed, policies)
        paced = self.rollout.decide(nodes, parsed) if self.rollout is not None else None
        self._steps = paced.steps if paced is not None else None
        self._held = paced.held if paced is not None else {}
        wanted = only | set(self._steps or ())  # the rollout looks at every node
        targets = list(nodes.values()) if full else [nodes[n] for n in wanted if n in nodes]
        plans: dict[str, NodePlan] = {}
        chunks = self._plan_in_chunks(targets, parsed, plans)
        written = await self._write_nodes(chunks, parsed, nodes)
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
                nodes.values(), parsed, require_gpu_evidence=self.options.require_gpu_evidence
            )
            self._emit_events(cluster, policies, written)
            if self.observer is not None:
                self.observer.nodes(cluster, nodes)
            await self._write_statuses(cluster, nodes, policies)
            self._report_releases(nodes, policies)
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

    def _overlay_fresh(self, nodes: dict[str, NodeFacts]) -> None:
        """Our own writes the watch has not delivered yet replace what the informer holds."""
        for name, facts in list(self._fresh.items()):
            seen = nodes.get(name)
            if seen is not None and _newer_or_same(seen.resource_version, facts.resource_version):
                del self._fresh[name]  # the watch caught up with our own write
            elif seen is not None:
                nodes[name] = facts

    def is_own_write(self, name: str, facts: NodeFacts) -> bool:
        """True for the watch event of a write this process made (nothing to do for it)."""
        fresh = self._fresh.get(name)
        return fresh is not None and fresh.resource_version == facts.resource_version

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
            ref = kubeapi.object_ref("Node", spec.name, uid=self.node_uid(spec.name))
            self.post_event(ref, spec.type, spec.reason, spec.message)
            if spec.type == "Warning":
                self._reported.add((spec.name, spec.reason))
        current = {(p.node, pr.reason) for p in problems for pr in p.problems}
        self._reported &= current  # a problem that went away may be reported again later


def _newer_or_same(seen: str, ours: str) -> bool:
    """resourceVersions are opaque, but etcd's are integers; compare when both parse."""
    try:
        return int(seen) >= int(ours)
    except ValueError:
        return seen == ours

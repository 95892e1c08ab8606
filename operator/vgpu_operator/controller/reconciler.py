"""The write side of the controller: one task that plans with the core and closes the difference.

Two informers (`controller.informer`) keep Nodes and policies in memory. Their callbacks only
*request* work: a policy change asks for a full pass, a node change for that node. The reconciler
batches requests, takes a snapshot of the informers, calls the pure core (`plan_cluster`,
`compute_status`) and writes: one merge PATCH per node that differs (none when it already
matches), a status PATCH per policy whose status changed, one Event per policy that changed
nodes. Being the only writer in the process, it needs no per-node locks; a 409 (someone else
wrote the node since the watch saw it) means: read that node again and plan it again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller import metrics
from vgpu_operator.core.events import EventSpec, node_events, policy_event
from vgpu_operator.core.nodefacts import NodeFacts, node_facts
from vgpu_operator.core.nodestate import ClusterPlan, NodePlan, plan_cluster
from vgpu_operator.core.status import compute_status, status_patch
from vgpu_operator.core.validate import ParsedPolicy
from vgpu_operator.models.policy import VGPUNodePolicyStatus
from vgpu_operator.waiting import wait_set

log = logging.getLogger("vgpu_operator.reconciler")

EventPoster = Callable[[EventSpec, Mapping[str, Any]], None]


@dataclass(frozen=True)
class PolicyEntry:
    """What the policy informer keeps per policy."""

    parsed: ParsedPolicy
    uid: str
    resource_version: str
    finalizers: tuple[str, ...]
    status: Mapping[str, Any]


@dataclass
class ReconcilerOptions:
    concurrency: int = 32  # parallel node PATCHes (bounded, like any well-behaved client)
    debounce_seconds: float = 0.05  # gather a burst of events into one pass
    resync_seconds: float = 300.0  # full pass even without events (heals anything missed)
    conflict_retries: int = 3
    status_interval: float = 1.0  # node-triggered passes recompute status at most this often


Snapshot = Callable[[], tuple[dict[str, NodeFacts], dict[str, PolicyEntry]]]
NodeUid = Callable[[str], str]
# Conditions computed elsewhere for a policy owning these nodes (e.g. ConfigConsistent).
ExtraConditions = Callable[[str, frozenset[str]], Mapping[str, tuple[str, str, str]]]


@dataclass
class Reconciler:
    api: client.ApiClient
    snapshot: Snapshot
    post_event: EventPoster
    node_uid: NodeUid = lambda _name: ""
    options: ReconcilerOptions = field(default_factory=ReconcilerOptions)
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    extra_conditions: ExtraConditions | None = None

    _full: bool = False
    _nodes: set[str] = field(default_factory=set)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    # Writes this process made that the watch may not have delivered yet (node -> object).
    _fresh: dict[str, NodeFacts] = field(default_factory=dict)
    _written_status: dict[str, dict[str, Any]] = field(default_factory=dict)
    _reported: set[tuple[str, str]] = field(default_factory=set)
    _last_status: float = 0.0
    _status_scheduled: bool = False
    passes: int = 0
    writing: bool = False  # node writes are under way (the configuration pass waits for them)

    # -- requests (called by handlers) ------------------------------------------------------
    def request_full(self) -> None:
        self._full = True
        self._wake.set()

    def request_nodes(self, names: Iterable[str]) -> None:
        self._nodes.update(names)
        self._wake.set()

    def _retry_soon(self) -> None:
        """Another full pass after a short pause (the watch may still be catching up)."""
        loop = asyncio.get_running_loop()
        loop.call_later(1.0, self.request_full)

    # -- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        last_full = time.monotonic()
        while True:
            timeout = max(0.0, self.options.resync_seconds - (time.monotonic() - last_full))
            if not await wait_set(self._wake, timeout):
                self._full = True
            await asyncio.sleep(self.options.debounce_seconds)
            self._wake.clear()
            full, nodes = self._full, set(self._nodes)
            self._full, self._nodes = False, set()
            if full:
                last_full = time.monotonic()
            try:
                await self.reconcile(full=full, only=nodes)
            except asyncio.CancelledError:
                raise
            except Exception:
                metrics.RECONCILES.labels(result="error").inc()
                log.exception("reconcile pass failed; retrying with a full pass")
                await asyncio.sleep(1.0)
                self._full = True
                self._wake.set()
                continue

    async def reconcile(self, *, full: bool, only: set[str]) -> None:
        """One pass. A node-triggered pass plans only the requested nodes (selection is per
        node, so a subset plans exactly as the whole would); status, Events and finalizers need
        the whole picture and are computed after writes, on full passes, and otherwise at most
        every `status_interval` seconds."""
        start = time.monotonic()
        nodes, policies = self.snapshot()
        self._overlay_fresh(nodes)
        parsed = [p.parsed for p in policies.values()]
        targets = nodes.values() if full else [nodes[n] for n in only if n in nodes]
        planned = plan_cluster(targets, parsed)
        written = await self._write_nodes(planned.plans, parsed, nodes)
        self.passes += 1
        now = time.monotonic()
        if full or written or now - self._last_status >= self.options.status_interval:
            self._last_status = now
            cluster = plan_cluster(nodes.values(), parsed)
            self._emit_events(cluster, policies, written)
            await self._write_statuses(cluster, nodes, policies)
            await self._release_finalizers(cluster, nodes, policies)
            _export_gauges(cluster)
        elif not self._status_scheduled:
            self._status_scheduled = True
            asyncio.get_running_loop().call_later(self.options.status_interval, self._status_pass)
        metrics.RECONCILES.labels(result="ok").inc()
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - start)

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

    # -- nodes ------------------------------------------------------------------------------
    async def _write_nodes(
        self,
        plans: Mapping[str, NodePlan],
        parsed: list[ParsedPolicy],
        nodes: dict[str, NodeFacts],
    ) -> dict[str, NodePlan]:
        """PATCH every node whose plan has one; returns the plans that were written."""
        written: dict[str, NodePlan] = {}

        async def write(plan: NodePlan) -> None:
            for _attempt in range(self.options.conflict_retries + 1):
                if plan.patch is None:
                    return
                try:
                    obj = await kubeapi.request(
                        self.api,
                        "PATCH",
                        kubeapi.node_path(plan.node),
                        body=plan.patch,
                        content_type=kubeapi.MERGE_PATCH,
                        accept=kubeapi.METADATA_ONLY,
                    )
                except kubeapi.Conflict:
                    metrics.NODE_WRITES.labels(outcome="conflict").inc()
                    fresh = await kubeapi.request(self.api, "GET", kubeapi.node_path(plan.node))
                    nodes[plan.node] = node_facts(fresh)
                    plan = plan_cluster([nodes[plan.node]], parsed).plans[plan.node]
                    continue
                except kubeapi.NotFound:
                    nodes.pop(plan.node, None)
                    return
                metrics.NODE_WRITES.labels(outcome="ok").inc()
                facts = node_facts(_written(obj, plan.patch or {}, nodes.get(plan.node)))
                nodes[plan.node] = facts
                self._fresh[plan.node] = facts
                written[plan.node] = plan
                return
            log.warning("node %s kept changing under us; will retry", plan.node)
            self.request_nodes([plan.node])

        # A fixed set of workers over one queue: bounded concurrency without a thousand tasks
        # waiting on a semaphore (whose wake-ups cost more than the writes' own bookkeeping).
        todo = iter([p for p in plans.values() if p.patch is not None])

        async def worker() -> None:
            for plan in todo:
                try:
                    await write(plan)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    metrics.NODE_WRITES.labels(outcome="error").inc()
                    log.error("node write failed: %s", exc)
                    self._retry_soon()  # heal with a full pass shortly

        self.writing = True
        try:
            await asyncio.gather(*(worker() for _ in range(self.options.concurrency)))
        finally:
            self.writing = False
        return written

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
                self.post_event(spec, _policy_ref(name, entry.uid))
        for spec in specs:
            self.post_event(spec, _node_ref(spec.name, self.node_uid(spec.name)))
            if spec.type == "Warning":
                self._reported.add((spec.name, spec.reason))
        current = {(p.node, pr.reason) for p in problems for pr in p.problems}
        self._reported &= current  # a problem that went away may be reported again later

    # -- status -----------------------------------------------------------------------------
    async def _write_statuses(
        self,
        cluster: ClusterPlan,
        nodes: Mapping[str, NodeFacts],
        policies: Mapping[str, PolicyEntry],
    ) -> None:
        now = self.now()
        for name, entry in policies.items():
            if entry.parsed.deleting:
                continue
            mine = self._written_status.get(name)
            if mine is not None and status_patch(entry.status, _as_status(mine)) is None:
                del self._written_status[name]  # the watch delivered our write
                mine = None
            old = mine if mine is not None else dict(entry.status)
            extra = None
            if self.extra_conditions is not None:
                owned = frozenset(n for n, a in cluster.assignments.items() if a.owner == name)
                extra = self.extra_conditions(name, owned)
            new = compute_status(entry.parsed, cluster, nodes, old, now, extra)
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

    # -- finalizers -------------------------------------------------------------------------
    async def _release_finalizers(
        self,
        cluster: ClusterPlan,
        nodes: Mapping[str, NodeFacts],
        policies: Mapping[str, PolicyEntry],
    ) -> None:
        for name, entry in policies.items():
            if not entry.parsed.deleting or contract.FINALIZER not in entry.finalizers:
                continue
            still = [n for n, f in nodes.items() if f.policy_label == name]
            if still:
                log.info("policy %s is being deleted; %d nodes still to clean", name, len(still))
                self._retry_soon()
                continue
            remaining = [f for f in entry.finalizers if f != contract.FINALIZER]
            try:
                await kubeapi.request(
                    self.api,
                    "PATCH",
                    kubeapi.policy_path(name),
                    body={
                        "metadata": {
                            "finalizers": remaining,
                            "resourceVersion": entry.resource_version,
                        }
                    },
                    content_type=kubeapi.MERGE_PATCH,
                )
            except kubeapi.NotFound:
                continue
            except kubeapi.Conflict:
                log.info("policy %s changed while releasing its finalizer; again", name)
                self._retry_soon()
                continue
            self.forget_policy(name)


def _written(
    response: Mapping[str, Any], patch: Mapping[str, Any], before: NodeFacts | None
) -> dict[str, Any]:
    """The Node after a write, from a metadata-only response: its taints are the patch's when
    it set them, else the ones it had (the PATCH carried the resourceVersion they were read
    at, so nobody changed them in between). A full Node response is taken as it is."""
    if "spec" in response:
        return dict(response)
    spec = patch.get("spec") or {}
    kept = [dict(t) for t in (before.taints if before else ())]
    taints = spec.get("taints", kept)
    return {"metadata": response.get("metadata") or {}, "spec": {"taints": taints}}


def _as_status(raw: Mapping[str, Any]) -> VGPUNodePolicyStatus:
    return VGPUNodePolicyStatus.model_validate(raw)


def _newer_or_same(seen: str, ours: str) -> bool:
    """resourceVersions are opaque, but etcd's are integers; compare when both parse."""
    try:
        return int(seen) >= int(ours)
    except ValueError:
        return seen == ours


def _policy_ref(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name, "uid": uid},
    }


def _node_ref(name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": uid}}


def _export_gauges(cluster: ClusterPlan) -> None:
    metrics.CONFLICTS.set(sum(1 for a in cluster.assignments.values() if a.conflicted))
    counts: dict[tuple[str, str], int] = {}
    for plan in cluster.plans.values():
        if plan.new_owner and plan.new_mode:
            key = (plan.new_owner, plan.new_mode)
            counts[key] = counts.get(key, 0) + 1
    metrics.NODES_MANAGED.clear()
    for (policy, mode), n in counts.items():
        metrics.NODES_MANAGED.labels(policy=policy, mode=mode).set(n)

"""The configuration reconciler: keeps the Volcano scheduler and the HAMi device plugins
consistent with the policies and the operator config, and says what is not.

One task, woken by watches (the configured ConfigMaps, DaemonSets and the scheduler Deployment;
Nodes whose released config, inventory or plugin registration changed; policies), by deferred
restarts and by a periodic resync. A pass: read a `ClusterSnapshot`, in `enforce` mode write the
differences of what the operator owns and restart what must re-read, as the pass's write plan
says (`core.volcano.writes`; `volcano_writes` sends it), then run every rule. Findings go out as
the `ConfigConsistent` condition of each policy (through the policy reconciler, the only status
writer, from the `ConfigurationState` each pass publishes), as Warning Events on the objects
involved (once per finding) and as the `vgpu_operator_findings` metric.
In `report` mode nothing is written to any Volcano/HAMi object.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import heap, kubeapi
from vgpu_operator.controller import metrics
from vgpu_operator.controller.cache import ClusterCache, ConfigurationState
from vgpu_operator.controller.rules_worker import run_rules  # in a worker, at a deadline
from vgpu_operator.controller.snapshot import (
    configmap_refs,
    read_only_configmap_refs,
    read_snapshot,
)
from vgpu_operator.controller.volcano_writes import enforce_configuration
from vgpu_operator.controller.write_results import (
    WriteBackoff,
    Written,
    retry_at,
    write_backoff,
)
from vgpu_operator.core.findings import (
    FindingEvent,
    finding_counts,
    finding_events,
    finding_key,
    still_found,
)
from vgpu_operator.core.rollout.gpu_pods import plugin_refs
from vgpu_operator.core.volcano import restarts as planner
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, meta
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.findings import Finding, ObjectRef
from vgpu_operator.models.volcano import registration
from vgpu_operator.waiting import run_passes, wait_set

log = logging.getLogger("vgpu_operator.volcano")

HISTORY = 1000  # writes and restarts remembered (for logs, tests and the demo)
# Findings also logged when they first appear (rule id -> what the log line says it is).
LOGGED_FINDINGS = {
    "stranded-pods": "stranded vGPU pod",
    "plugin-not-hami": "not HAMi's plugin, left alone",
}


@dataclass
class VolcanoOptions:
    enabled: bool = True
    debounce_seconds: float = 0.5  # gather a burst of events into one pass
    min_pass_seconds: float = 2.0  # at most one pass this often
    resync_seconds: float = 300.0
    restart_settle_seconds: float = 5.0  # quiet time after the last change before a restart
    stranded_checks: tuple[float, ...] = (5.0, 30.0)  # passes after a restart, for stranded pods
    # Finding Events are sent this many at once, then as many again every `event_batch_seconds`
    # until none is left (a finding on every node of 5,000 is 5,000 Events: sent without
    # planning another pass for each batch).
    events_per_batch: int = 20
    event_batch_seconds: float = 2.0
    # A pass waits while the policy reconciler is writing Nodes (at most this long): it then
    # renders the whole batch once, instead of competing with the writes pass after pass.
    max_defer_seconds: float = 10.0


# After each pass: its snapshot, and whether its findings changed (`controller.app` turns this
# into requests for work).
Passed = Callable[[ClusterSnapshot, bool], None]


@dataclass
class VolcanoReconciler:
    api: client.ApiClient
    config: OperatorConfig
    post_event: Callable[[Mapping[str, Any], str, str, str], None]  # ref, type, reason, message
    options: VolcanoOptions = field(default_factory=VolcanoOptions)
    # The controller's watches (`controller.cache`): the compact Nodes, the pods holding GPU
    # resources and every DaemonSet (compact). None, or a kind not listed yet: a pass lists
    # them itself (as `doctor` does).
    cache: ClusterCache | None = None
    # What each pass publishes for the other parts: its snapshot, when its reading began, its
    # findings (the rollout's waits, the policies' ConfigConsistent condition).
    published: ConfigurationState = field(default_factory=ConfigurationState)
    passed: Passed = lambda snapshot, findings_changed: None
    # Set while the policy reconciler is not writing Nodes (None: never wait).
    nodes_idle: asyncio.Event | None = None
    now: Callable[[], datetime] = lambda: datetime.now(UTC)

    _read_at: datetime | None = None
    passes: int = 0
    restarted: list[planner.RestartAction] = field(default_factory=list)  # in order, all time
    writes: list[Written] = field(default_factory=list)  # in order, all time
    _ledger: dict[str, datetime] = field(default_factory=dict)
    _posted: set[str] = field(default_factory=set)
    _signature: frozenset[str] | None = None
    _registered: dict[str, int] = field(default_factory=dict)
    _scheduler_device: tuple[str, str] | None = None  # the ConfigMap the scheduler conf names
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _in_pass: bool = False
    _timers: list[asyncio.TimerHandle] = field(default_factory=list)
    _queued: list[tuple[FindingEvent, dict[str, Any]]] = field(default_factory=list)
    _sender: asyncio.TimerHandle | None = None
    # Objects whose writes were refused (not 404/409), from pass to pass (`write_results`).
    backoff: WriteBackoff = field(default_factory=write_backoff)

    @property
    def findings(self) -> list[Finding] | None:
        """The last pass's (None: not checked yet)."""
        return self.published.findings

    # -- requests ---------------------------------------------------------------------------
    def request(self) -> None:
        self._wake.set()

    def due(self) -> bool:
        """A pass is asked for or running: the last snapshot may be out of date."""
        return self._wake.is_set() or self._in_pass

    def request_at(self, when: datetime) -> None:
        delay = max(0.0, (when - self.now()).total_seconds())
        loop = asyncio.get_running_loop()
        self._timers = [t for t in self._timers if not t.cancelled() and t.when() > loop.time()]
        due = loop.time() + delay + 0.05
        if any(abs(t.when() - due) < 0.1 for t in self._timers):
            return  # a pass is already asked for then (e.g. each pass re-asks for a back-off)
        self._timers.append(loop.call_at(due, self.request))

    def node_changed(self, name: str, body: Mapping[str, Any], deleted: bool = False) -> None:
        """A node event: ask for a pass only when the plugin's registration changed (the
        policy reconciler's handler already asks for one on released config changes)."""
        if deleted:
            if self._registered.pop(name, None) is not None:
                self.request()
            return
        value = registration(body)
        alloc = (body.get("status") or {}).get("allocatable") or {}
        digest = hash((value, tuple(sorted((k, str(v)) for k, v in alloc.items()))))
        if self._registered.get(name) != digest:
            first = name not in self._registered
            self._registered[name] = digest
            if not first or value is not None:
                self.request()

    def watches(self, kind: str, namespace: str | None, name: str) -> bool:
        """Is this one of the objects the rules read (filter for the watch handlers)?"""
        cfg = self.config
        if kind == "ConfigMap":
            ref = (namespace or "", name)
            read = (*configmap_refs(cfg), *read_only_configmap_refs(cfg))
            return ref in read or ref == self._scheduler_device
        if kind == "DaemonSet":  # HAMi's plugins, the DRA kubelet plugin (config.dra)
            return (namespace or "", name) in plugin_refs(cfg)
        if kind == "Deployment":
            dep = cfg.scheduler.deployment
            return (namespace, name) == (dep.namespace, dep.name)
        return False

    def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        if self._sender is not None:
            self._sender.cancel()

    # -- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        self.request()
        await run_passes(
            self._wake,
            self._pass,
            debounce=self.options.debounce_seconds,
            min_interval=self.options.min_pass_seconds,
            resync=self.options.resync_seconds,
            retry=5.0,
            before=self._wait_for_node_writes,
            name="configuration pass",
        )

    async def _pass(self, resync: bool) -> bool:
        self._in_pass = True
        try:
            await self.reconcile()
        except Exception:
            metrics.CONFIGURATION_PASSES.labels(result="error").inc()
            raise
        finally:
            self._in_pass = False
        metrics.CONFIGURATION_PASSES.labels(result="ok").inc()
        return True

    async def _wait_for_node_writes(self) -> None:
        """While Nodes are being written, wait (at most `max_defer_seconds`): the pass then
        renders the whole batch once, instead of competing with the writes pass after pass."""
        if self.nodes_idle is not None:
            await wait_set(self.nodes_idle, self.options.max_defer_seconds)

    async def read(self) -> ClusterSnapshot:
        self._read_at = self.now()
        cache = self.cache
        return await read_snapshot(
            self.api,
            self.config,
            cache.node_objects() if cache is not None else None,
            gpu_pods=cache.gpu_pods() if cache is not None else None,
            daemonsets=cache.daemonset_objects() if cache is not None else None,
        )

    async def reconcile(self) -> None:
        snapshot = await self.read()
        if self.config.mode == "enforce":
            snapshot = await self._enforce(snapshot)
        src = snapshot.scheduler_device_config
        self._scheduler_device = (src.namespace, src.name)
        results = await run_rules(snapshot)
        self.published.findings = results.findings
        self.passes += 1
        changed = self._report(snapshot, results.findings)
        self.published.snapshot, self.published.read_at = snapshot, self._read_at
        self.passed(snapshot, changed)
        heap.give_back()  # the pass's pickled snapshot and payloads (vgpu_operator/heap.py)

    # -- enforce ----------------------------------------------------------------------------
    async def _enforce(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """Plan the pass's writes (`core.volcano.writes`), send what is due now, and come back
        when what waits falls due; the snapshot returned is the cluster after the writes."""
        now = self.now()
        settings = planner.RestartSettings.from_config(
            self.config, self.options.restart_settle_seconds
        )
        plan, result = await enforce_configuration(
            self.api, snapshot, now, self.backoff, self._ledger, settings
        )
        if result.conflicts:
            self.request()  # rendered from an outdated object: again on the newer one
        for w in result.written:
            log.info("wrote %s %s/%s: %s", w.kind, w.namespace, w.name, w.what)
            self._post_normal(w.kind, w.namespace, w.name, w.uid, "ConfigRendered", w.what)
        self.writes = [*self.writes, *result.written][-HISTORY:]
        # a pod template change (args, placement) rolls the DaemonSet: a restart
        rolled = [(planner.daemonset_key(ns, name), now) for _, ns, name in result.rolled]
        done = [r.action for r in result.restarted]
        self._ledger = planner.record({**self._ledger, **dict(rolled)}, done, now)
        keep = max(settings.min_interval, timedelta(minutes=10))
        self._ledger = planner.prune(self._ledger, now, keep)
        for r in result.restarted:
            log.warning("restarted %s %s/%s: %s", r.action.kind, r.namespace, r.name, r.reason)
            self.restarted = [*self.restarted, r.action][-HISTORY:]
            self._post_normal(r.kind, r.namespace, r.name, "", "Restarted", r.reason)
        if (wake := plan.wake_at(now)) is not None:
            self.request_at(wake)  # a deferred restart or DaemonSet PATCH
        if (due := retry_at(self.backoff)) is not None:
            self.request_at(due)  # the earliest object backing off
        if result.restarted:
            for delay in self.options.stranded_checks:
                self.request_at(now + timedelta(seconds=delay))
        if result.written or result.restarted:
            snapshot = await self.read()
        return snapshot

    # -- reporting --------------------------------------------------------------------------
    def _report(self, snapshot: ClusterSnapshot, findings: list[Finding]) -> bool:
        """Metrics, logs and Events of the pass's findings; True when they changed."""
        metrics.export_findings(finding_counts(findings))
        logged = [
            f for f in findings if f.id in LOGGED_FINDINGS and finding_key(f) not in self._posted
        ]
        for f in logged:  # new ones: after a scheduler restart, the passes that follow find them
            log.warning("%s: %s Fix: %s", LOGGED_FINDINGS[f.id], f.message, f.fix)
        events, self._posted = finding_events(findings, self._posted)
        uids = _uids(snapshot)
        refs = [(ev, _ref(ev.target, uids)) for ev in events]
        # no such object (e.g. a missing ConfigMap): nothing to show it on
        fresh = [(ev, ref) for ev, ref in refs if ref["metadata"]["uid"] is not None]
        self._queued = still_found(self._queued, self._posted) + fresh
        if self._sender is None:
            self._send_events()
        signature = frozenset(finding_key(f) for f in findings)
        if signature == self._signature:
            return False
        self._signature = signature
        return True

    def _send_events(self) -> None:
        """Send `events_per_batch` queued finding Events; the rest after `event_batch_seconds`."""
        self._sender = None
        batch = self.options.events_per_batch
        sending, self._queued = self._queued[:batch], self._queued[batch:]
        for ev, ref in sending:
            self.post_event(ref, "Warning", ev.reason, ev.message)
        if self._queued:
            loop = asyncio.get_running_loop()
            self._sender = loop.call_later(self.options.event_batch_seconds, self._send_events)

    def _post_normal(
        self, kind: str, namespace: str, name: str, uid: str, reason: str, message: str
    ) -> None:
        ref = kubeapi.object_ref(kind, name, namespace=namespace, uid=uid)
        self.post_event(ref, "Normal", reason, message)


def _uids(s: ClusterSnapshot) -> dict[tuple[str, str, str], str]:
    out: dict[tuple[str, str, str], str] = {}
    for kind, items in (
        ("ConfigMap", s.configmaps),
        ("Deployment", s.deployments),
        ("DaemonSet", s.daemonsets),
        ("Node", s.nodes),
        ("Pod", s.pods),
    ):
        for obj in items:
            m = meta(obj)
            out[(kind, str(m.get("namespace") or ""), str(m.get("name")))] = str(m.get("uid") or "")
    return out


def _ref(target: ObjectRef, uids: Mapping[tuple[str, str, str], str]) -> dict[str, Any]:
    uid = uids.get((target.kind, target.namespace or "", target.name), "")
    return kubeapi.object_ref(target.kind, target.name, namespace=target.namespace, uid=uid)

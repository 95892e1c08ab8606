"""Restart planning: which Volcano/HAMi components must restart to re-read what changed, and when.

Both the scheduler and the device plugin read the device config once per process, and the plugin
reads its node-config entry once at start (`InitDevicesConfig` under `sync.Once` in
volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/config.go; `LoadNvidiaConfig`
before the restart loop in Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:cmd/vgpu/main.go). So:
- a change of what the scheduler reads once (its device ConfigMap, or the deviceshare arguments
  the operator wrote into its conf) -> a rollout restart of the scheduler Deployment;
- a change of the device ConfigMap the plugin reads -> a rollout restart of the plugin DaemonSet;
- a change of one node's node-config entry -> only that node's plugin pod is replaced;
- anything else -> nothing.
A pod template change the operator makes for another reason (the plugin's placement, its args)
restarts the pods too: it is recorded in the same ledger, and `rollout_due` holds it to the same
limits.

The plan is computed from state, not from the writes of one pass: a component needs a restart
when one of its live pods started before the last change of what it reads, and no restart was
requested since that change. That makes it coalesced (many changes arriving together: the restart
waits `settle` after the last of them, so it happens once) and restart-safe (an operator restart
does not repeat a rollout already under way). It is rate-limited: the same component is not
restarted again within `minIntervalSeconds` of the previous restart (a scheduler restart can strand
pending vGPU pods: in its first session deviceshare can skip the device predicate); what has to wait
is returned as deferred, with the time it is due.
Pod start times are whole seconds, so a pod that started in the second of a change counts as
started before it (`rules.snapshot.started_before`), and a restart is never carried out before
that second is over: its replacement pods are then known to be newer.
What the planner reads is taken off a snapshot by `restart_inputs`. Pure: `now` and the ledger
of previous restarts are passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from vgpu_operator import contract
from vgpu_operator.core.volcano.plugin_identity import is_hami_workload
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, annotations_of, meta, pod_done
from vgpu_operator.core.volcano.times import (
    data_changed_at,
    known_after,
    parse_time,
    pod_started,
    started_before,
)
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.volcano_views import WorkloadView

ActionKind = Literal["rollout-deployment", "rollout-daemonset", "delete-pod"]
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"  # what `kubectl rollout restart` sets


@dataclass(frozen=True)
class Workload:
    """The scheduler Deployment or the plugin DaemonSet, as far as restarts are concerned."""

    namespace: str
    name: str
    restarted_at: datetime | None = None  # the pod template's restartedAt annotation
    pod_starts: tuple[datetime, ...] = ()  # start times of its live pods


@dataclass(frozen=True)
class PluginPod:
    namespace: str
    name: str
    node: str
    started: datetime


@dataclass(frozen=True)
class RestartInputs:
    """When what each component reads once last changed, and the components' pods."""

    scheduler_reads_changed: datetime | None = None
    plugin_reads_changed: datetime | None = None
    node_entries_changed: Mapping[str, datetime] = field(default_factory=dict)
    scheduler: Workload | None = None
    plugin: Workload | None = None
    plugin_pods: tuple[PluginPod, ...] = ()


@dataclass(frozen=True)
class RestartSettings:
    allowed: bool = True
    min_interval: timedelta = timedelta(seconds=300)
    settle: timedelta = timedelta(seconds=5)  # quiet time after the last change

    @classmethod
    def from_config(cls, config: OperatorConfig, settle_seconds: float) -> RestartSettings:
        return cls(
            allowed=config.restarts.allowed,
            min_interval=timedelta(seconds=config.restarts.min_interval_seconds),
            settle=timedelta(seconds=settle_seconds),
        )


@dataclass(frozen=True)
class RestartAction:
    kind: ActionKind
    namespace: str
    name: str  # Deployment, DaemonSet or Pod name
    key: str  # ledger key: the component, stable across pod replacements
    reason: str
    node: str | None = None


@dataclass(frozen=True)
class Deferred:
    """A restart that has to wait: the action, and when it is due."""

    action: RestartAction
    until: datetime

    @property
    def key(self) -> str:
        return self.action.key

    @property
    def reason(self) -> str:
        return self.action.reason


@dataclass(frozen=True)
class RestartPlan:
    actions: tuple[RestartAction, ...] = ()
    deferred: tuple[Deferred, ...] = ()

    @property
    def wake_at(self) -> datetime | None:
        """When the planner should run again for what is deferred."""
        return min((d.until for d in self.deferred), default=None)


def deployment_key(namespace: str, name: str) -> str:
    return f"deployment/{namespace}/{name}"


def daemonset_key(namespace: str, name: str) -> str:
    return f"daemonset/{namespace}/{name}"


def node_pod_key(node: str) -> str:
    return f"plugin-pod/{node}"


# --- what the planner reads off a snapshot -------------------------------------------------


def restarted_at(obj: Mapping[str, Any] | None) -> datetime | None:
    """The pod template's restartedAt annotation of a Deployment or DaemonSet (None: never)."""
    template = ((obj or {}).get("spec") or {}).get("template") or {}
    return parse_time(((template.get("metadata") or {}).get("annotations") or {}).get(RESTARTED_AT))


def _raw(items: list[dict[str, Any]], view: WorkloadView | None) -> dict[str, Any] | None:
    if view is None:
        return None
    return next(
        (
            o
            for o in items
            if meta(o).get("namespace") == view.namespace and meta(o).get("name") == view.name
        ),
        None,
    )


def _live_starts(s: ClusterSnapshot, view: WorkloadView) -> tuple[datetime, ...]:
    starts = [pod_started(p) for p in s.pods_of(view) if not pod_done(p)]
    return tuple(t for t in starts if t is not None)


def restart_inputs(s: ClusterSnapshot) -> RestartInputs:
    """What the planner needs, read off the snapshot."""
    sched_cm = s.scheduler_device_config.cm
    conf_stamp = parse_time(annotations_of(s.scheduler_cm or {}).get(contract.ANN_DATA_CHANGED_AT))
    sched_changed = [t for t in (data_changed_at(sched_cm) if sched_cm else None, conf_stamp) if t]
    plugin_cm = s.plugin_device_config.cm
    entries = {
        node: t for node, raw in s.owned_node_entries.items() if (t := parse_time(raw)) is not None
    }
    scheduler = plugin = None
    pods: list[PluginPod] = []
    if s.scheduler is not None:
        v = s.scheduler
        raw = _raw(s.deployments, v)
        scheduler = Workload(v.namespace, v.name, restarted_at(raw), _live_starts(s, v))
    if s.plugin is not None and is_hami_workload(s.plugin):  # another plugin reads none of it
        v = s.plugin
        raw = _raw(s.daemonsets, v)
        plugin = Workload(v.namespace, v.name, restarted_at(raw), _live_starts(s, v))
        for p in s.pods_of(v):
            started, node = pod_started(p), (p.get("spec") or {}).get("nodeName")
            if started is not None and node and not pod_done(p):
                pods.append(PluginPod(v.namespace, str(meta(p).get("name")), str(node), started))
    return RestartInputs(
        scheduler_reads_changed=max(sched_changed) if sched_changed else None,
        plugin_reads_changed=data_changed_at(plugin_cm) if plugin_cm else None,
        node_entries_changed=entries,
        scheduler=scheduler,
        plugin=plugin,
        plugin_pods=tuple(pods),
    )


def _latest(*times: datetime | None) -> datetime | None:
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Planner:
    ledger: Mapping[str, datetime]
    settings: RestartSettings
    now: datetime
    actions: list[RestartAction] = field(default_factory=list)
    deferred: list[Deferred] = field(default_factory=list)

    def due(self, key: str, since: datetime, restarted: datetime | None) -> datetime | None:
        """When the component may restart for a change at `since`; None: a restart requested
        after the change is already under way."""
        last = _latest(self.ledger.get(key), restarted)
        if last is not None and last >= since:
            return None
        at = known_after(since) + self.settings.settle  # replacements start in a later second
        if last is not None:
            at = max(at, last + self.settings.min_interval)
        return at

    def add(self, due: datetime, action: RestartAction) -> bool:
        """Plan the action now, or defer it; True when it is planned now."""
        if self.now >= due:
            self.actions.append(action)
            return True
        self.deferred.append(Deferred(action, due))
        return False

    def workload(
        self, kind: ActionKind, key: str, w: Workload | None, since: datetime | None, what: str
    ) -> Literal["none", "running", "planned", "deferred"]:
        if w is None or since is None:
            return "none"
        stale = sum(1 for t in w.pod_starts if started_before(t, since))
        if not stale:
            return "none"
        due = self.due(key, since, w.restarted_at)
        if due is None:
            return "running"
        reason = f"{stale} pod(s) started before {what} changed at {_stamp(since)}"
        action = RestartAction(kind, w.namespace, w.name, key, reason)
        return "planned" if self.add(due, action) else "deferred"


def plan_restarts(
    inputs: RestartInputs,
    ledger: Mapping[str, datetime],
    settings: RestartSettings,
    now: datetime,
) -> RestartPlan:
    """What to restart now, and what later (see the module docstring)."""
    if not settings.allowed:
        return RestartPlan()
    p = _Planner(ledger, settings, now)
    sched = inputs.scheduler
    if sched is not None:
        p.workload(
            "rollout-deployment",
            deployment_key(sched.namespace, sched.name),
            sched,
            inputs.scheduler_reads_changed,
            "what the scheduler reads once",
        )
    plugin = inputs.plugin
    ds_state = "none"
    ds_last: datetime | None = None
    if plugin is not None:
        ds_key = daemonset_key(plugin.namespace, plugin.name)
        ds_state = p.workload(
            "rollout-daemonset", ds_key, plugin, inputs.plugin_reads_changed, "the device config"
        )
        ds_last = _latest(ledger.get(ds_key), plugin.restarted_at)
    if ds_state in ("planned", "deferred"):
        # the rollout replaces every plugin pod; per-node restarts now would double it
        return RestartPlan(tuple(p.actions), tuple(p.deferred))
    for pod in sorted(inputs.plugin_pods, key=lambda x: (x.node, x.name)):
        since = inputs.node_entries_changed.get(pod.node)
        if since is None or not started_before(pod.started, since):
            continue
        if ds_last is not None and ds_last >= since and pod.started < ds_last:
            continue  # a DaemonSet rollout requested after the change replaces it
        key = node_pod_key(pod.node)
        due = p.due(key, since, None)
        if due is None:
            continue
        reason = f"started before the node-config entry of {pod.node} changed at {_stamp(since)}"
        p.add(due, RestartAction("delete-pod", pod.namespace, pod.name, key, reason, pod.node))
    return RestartPlan(tuple(p.actions), tuple(p.deferred))


def record(
    ledger: Mapping[str, datetime], done: Iterable[RestartAction], now: datetime
) -> dict[str, datetime]:
    """The ledger after the actions were carried out at `now`."""
    out = dict(ledger)
    for action in done:
        out[action.key] = now
    return out


def prune(ledger: Mapping[str, datetime], now: datetime, keep: timedelta) -> dict[str, datetime]:
    """Forget restarts older than `keep` (they no longer limit anything)."""
    return {k: t for k, t in ledger.items() if now - t < keep}


def rollout_due(
    ledger: Mapping[str, datetime],
    key: str,
    restarted_at: datetime | None,
    settings: RestartSettings,
    now: datetime,
) -> datetime | None:
    """When a rollout of the component the planner did not plan may happen: a pod template
    change the operator makes itself (the plugin's placement), which restarts its pods like a
    rollout restart and so counts as one under the same limits. `now` or later; None: restarts
    are not allowed."""
    if not settings.allowed:
        return None
    last = _latest(ledger.get(key), restarted_at)
    return now if last is None else max(now, last + settings.min_interval)

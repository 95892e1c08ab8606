"""The types of a configuration pass's write plan (`core.volcano.writes.plan_writes`): each
write with the exact body enforce sends, and when it falls due. Pure data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vgpu_operator.core.volcano.restarts import RestartAction
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot

Obj = dict[str, Any]

MANAGED_BY = {"app.kubernetes.io/managed-by": "vgpu-operator"}
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
RESTART_KINDS = {"rollout-deployment": "Deployment", "rollout-daemonset": "DaemonSet"}


@dataclass(frozen=True)
class ConfigMapWrite:
    """A ConfigMap the operator creates (`body`: the whole object) or PATCHes (`body`: a JSON
    merge patch of its data and the operator's annotations, with the resourceVersion)."""

    namespace: str
    name: str
    create: bool
    body: Mapping[str, Any]
    diff: str  # unified diff of every data key that changes
    entries: tuple[str, ...] = ()  # node-config entries that change
    what: str = ""  # what changes, in words (the Event's message)

    @property
    def kind(self) -> str:
        return "ConfigMap"

    @property
    def verb(self) -> str:
        return "POST" if self.create else "PATCH"

    @property
    def content_type(self) -> str:
        return JSON if self.create else MERGE_PATCH


@dataclass(frozen=True)
class WorkloadPatch:
    """One strategic merge PATCH of a plugin DaemonSet's pod template (args and placement): it
    restarts the DaemonSet's pods. `due`: when it may go (None: now)."""

    kind: str
    namespace: str
    name: str
    what: tuple[str, ...]
    body: Mapping[str, Any]
    args: bool = False  # it sets the plugin's args
    due: datetime | None = None
    uid: str = ""

    verb = "PATCH"
    content_type = STRATEGIC_MERGE_PATCH


@dataclass(frozen=True)
class Restart:
    """A restart the planner asks for: a rollout restart of the scheduler Deployment or the
    plugin DaemonSet (`body`: the pod template's restartedAt, as `kubectl rollout restart`
    sets it; `pods`: an OnDelete DaemonSet's live pods, deleted after it), or the deletion of
    one plugin pod (its DaemonSet recreates it). `due`: when it may go (None: now)."""

    action: RestartAction
    due: datetime | None = None
    body: Mapping[str, Any] | None = None
    pods: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return RESTART_KINDS.get(self.action.kind, "Pod")

    @property
    def namespace(self) -> str:
        return self.action.namespace

    @property
    def name(self) -> str:
        return self.action.name

    @property
    def reason(self) -> str:
        return self.action.reason

    @property
    def verb(self) -> str:
        return "DELETE" if self.action.kind == "delete-pod" else "PATCH"

    @property
    def content_type(self) -> str:
        return JSON if self.action.kind == "delete-pod" else MERGE_PATCH


@dataclass(frozen=True)
class WritePlan:
    configmaps: tuple[ConfigMapWrite, ...] = ()
    workloads: tuple[WorkloadPatch, ...] = ()
    restarts: tuple[Restart, ...] = ()
    notes: tuple[str, ...] = ()  # what is not rendered, and why
    # the cluster right after every write of the plan (deferred ones included), before the
    # restarts: what `plan`'s findings are computed on
    after: ClusterSnapshot | None = None

    def wake_at(self, now: datetime) -> datetime | None:
        """The earliest deferred write: when a pass should run again for it."""
        return min((d for d in self._dues() if d is not None and d > now), default=None)

    def _dues(self) -> list[datetime | None]:
        return [w.due for w in self.workloads] + [r.due for r in self.restarts]

    def pending(self, now: datetime) -> set[tuple[str, str]]:
        """DaemonSets whose template change waits: it restarts their pods when it goes."""
        return {(w.namespace, w.name) for w in self.workloads if w.due and w.due > now}

"""Warning Events on pods that can never be scheduled (the checks: `core.volcano.unschedulable`).

Pods come from the pod index: a pending GPU pod is checked when its event comes, and every
pending one again after each configuration pass (what the cluster offers may have changed). The
context is the last pass's snapshot; while a pass is due or the policy reconciler is writing
Nodes it may be out of date, so a pod's check then waits for the pass. One Event per pod and
cause, in the life of the process: a pod is forgotten once bound or gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from vgpu_operator import kubeapi
from vgpu_operator.controller import metrics
from vgpu_operator.controller.informer import DELETED, Change
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.unschedulable import Cause, FitContext, causes, fit_context, pending

log = logging.getLogger("vgpu_operator.unschedulable")

Obj = dict[str, Any]
PostEvent = Callable[[Mapping[str, Any], str, str, str], None]  # ref, type, reason, message


class UnschedulableWarnings:
    def __init__(self, post_event: PostEvent, fresh: Callable[[], bool] = lambda: True) -> None:
        self.post_event = post_event
        self.fresh = fresh  # the last snapshot still describes the cluster (no pass is due)
        self._snapshot: ClusterSnapshot | None = None
        self._context: FitContext | None = None
        self._posted: dict[str, set[str]] = {}  # pod uid -> causes posted

    @property
    def context(self) -> FitContext | None:
        """Built from the last snapshot when first needed (most passes have no pending pod)."""
        if self._context is None and self._snapshot is not None:
            self._context = fit_context(self._snapshot)
        return self._context

    def snapshot_taken(self, snapshot: ClusterSnapshot, pending_pods: Iterable[Obj]) -> None:
        """After a configuration pass: the new context, and every pending pod checked in it."""
        self._snapshot, self._context = snapshot, None
        for pod in pending_pods:
            self.check(pod)

    async def pod_changed(self, change: Change[Obj]) -> None:
        """A pod index event: forget a pod that is gone or bound, check a pending one."""
        pod = change.item
        uid = _uid(pod)
        if change.type == DELETED or not pending(pod):
            self._posted.pop(uid, None)
            return
        if self.fresh():
            self.check(pod)

    def check(self, pod: Obj) -> list[Cause]:
        """Post the causes not posted yet for this pod; returns them."""
        ctx = self.context
        if ctx is None:
            return []
        found = causes(pod, ctx)
        posted = self._posted.setdefault(_uid(pod), set())
        new = [c for c in found if c.id not in posted]
        meta = pod.get("metadata") or {}
        for cause in new:
            posted.add(cause.id)
            ref = kubeapi.object_ref(
                "Pod", str(meta.get("name")), namespace=meta.get("namespace"), uid=_uid(pod)
            )
            log.warning(
                "pod %s/%s can never be scheduled (%s): %s",
                meta.get("namespace"),
                meta.get("name"),
                cause.reason,
                cause.message,
            )
            self.post_event(ref, "Warning", cause.reason, cause.message)
            metrics.UNSCHEDULABLE_WARNINGS.labels(cause=cause.id).inc()
        if not posted:
            del self._posted[_uid(pod)]
        return new


def _uid(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")

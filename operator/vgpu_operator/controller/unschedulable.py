"""Warning Events on pods that can never be scheduled (the checks: `core.volcano.never_fit`,
the vGPU ones and the DRA ones).

Pods come from the pod index (which keeps every pod holding a ResourceClaim, pending ones too):
a pending GPU or claim pod is checked when its event comes, and every pending one again after
each configuration pass (what the cluster offers may have changed). A claim pod's claims come
from the claim index, which keeps the requests of the claims not yet allocated
(`controller.claims`): a claim made from the pod's template arrives after the pod, so the pods
holding a claim are checked again when it comes (`claim_changed`). The context is the last
pass's snapshot (its DeviceClasses and ResourceSlices for the DRA checks); while a pass is due or
the policy reconciler is writing Nodes it may be out of date, so a pod's check then waits for the
pass. One Event per pod and cause, in the life of the process: a pod is forgotten once bound or
gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from vgpu_operator import kubeapi
from vgpu_operator.controller import metrics
from vgpu_operator.controller.informer import DELETED, Change
from vgpu_operator.core.dra.unschedulable import claim_keys
from vgpu_operator.core.volcano.fit_context import FitContext
from vgpu_operator.core.volcano.never_fit import (
    AnyCause,
    NeverFitContext,
    never_fit_context,
    pod_causes,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.unschedulable import pending

log = logging.getLogger("vgpu_operator.unschedulable")

Obj = dict[str, Any]
PostEvent = Callable[[Mapping[str, Any], str, str, str], None]  # ref, type, reason, message
Claims = Callable[[], Mapping[str, Mapping[str, Any]]]  # "namespace/name" -> a claim's requests


def _no_claims() -> Mapping[str, Mapping[str, Any]]:
    return {}


class UnschedulableWarnings:
    def __init__(
        self,
        post_event: PostEvent,
        fresh: Callable[[], bool] = lambda: True,
        claims: Claims = _no_claims,
    ) -> None:
        self.post_event = post_event
        self.fresh = fresh  # the last snapshot still describes the cluster (no pass is due)
        self.claims = claims  # the unallocated claims' requests, as the claim index holds them
        self._snapshot: ClusterSnapshot | None = None
        self._context: NeverFitContext | None = None
        self._posted: dict[str, set[str]] = {}  # pod uid -> causes posted

    @property
    def never_fit(self) -> NeverFitContext | None:
        """Built from the last snapshot when first needed (most passes have no pending pod)."""
        if self._context is None and self._snapshot is not None:
            self._context = never_fit_context(self._snapshot)
        return self._context

    @property
    def context(self) -> FitContext | None:
        """The vGPU nodes as the last snapshot shows them."""
        ctx = self.never_fit
        return ctx.vgpu if ctx is not None else None

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

    async def claim_changed(self, key: str, pending_pods: Iterable[Obj]) -> None:
        """A ResourceClaim not yet allocated ("namespace/name") came or changed: the pending
        pods holding it checked again, while the snapshot holds (else the pass checks them)."""
        if not self.fresh():
            return
        for pod in pending_pods:
            if pending(pod) and key in claim_keys(pod):
                self.check(pod)

    def check(self, pod: Obj) -> list[AnyCause]:
        """Post the causes not posted yet for this pod; returns them."""
        ctx = self.never_fit
        if ctx is None:
            return []
        found = pod_causes(pod, ctx, self.claims())
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

"""The claim index: every ResourceClaim's allocated drivers, and the requests of the claims not
yet allocated, from one list-then-watch.

A pod holding a ResourceClaim is a GPU consumer when the claim is allocated by a driver the
operator config lists (`gpuDraDrivers`, `models.gpu_resources`). The driver is on the claim, not
on the pod, so the controller watches the claims (resource.k8s.io/v1, across namespaces: the
chart's ClusterRole grants get/list/watch) and keeps of each only its allocation's drivers
(`controller.snapshot.compact_claim`): a few dozen bytes a claim. A claim not yet allocated keeps
its requests as well (`asks()`, `core.dra.unschedulable.claim_ask`: class, selectors, count),
for the never-fit checks of its pending pod (`controller.unschedulable`); it drops them once
allocated, so what is held beyond the drivers grows with the pending claims only. `on_ask` hears
of each claim whose requests came or changed.

Until the first listing is in, and whenever the cluster serves no resource.k8s.io/v1 (before
Kubernetes 1.34) or the right to list claims is missing, `drivers()` is None and every claim
counts (the safe side: a pod is drained that need not be). The watch then retries with a long
back-off (at most every ten minutes), logging each failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from vgpu_operator import kubeapi
from vgpu_operator.controller.informer import DELETED, Change, Informer
from vgpu_operator.controller.kept import namespaced_name
from vgpu_operator.controller.snapshot import CLAIMS_PATH, compact_claim
from vgpu_operator.core.dra.unschedulable import claim_ask
from vgpu_operator.core.rollout.gpu_pods import interned
from vgpu_operator.models.gpu_resources import ClaimDrivers, claim_drivers

PAGE = 500
BACKOFF = (5.0, 600.0)  # seconds: first and longest pause after a failed list or watch

Obj = Mapping[str, Any]


class ClaimIndex:
    """`await index.run()` keeps it; `drivers()` and `asks()` read it (one event loop: no
    lock)."""

    def __init__(
        self,
        api: Any,
        options: kubeapi.WatchOptions | None = None,
        on_ask: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        opts = replace(
            options or kubeapi.WatchOptions(page_size=PAGE, backoff=BACKOFF),
            kind="resourceclaims",
            reduce=compact_claim,
        )
        self.informer: Informer[frozenset[str]] = Informer(
            api,
            "resourceclaims",
            CLAIMS_PATH,
            claim_drivers,
            self._changed,
            opts,
            key=namespaced_name,
        )
        self.on_ask = on_ask
        self._asks: dict[str, Obj] = {}

    @property
    def synced(self) -> asyncio.Event:
        return self.informer.synced

    async def run(self) -> None:
        await self.informer.run()

    def drivers(self) -> ClaimDrivers | None:
        """Each claim ("namespace/name") -> its allocation's drivers; None until synced."""
        return self.informer.items if self.synced.is_set() else None

    def asks(self) -> Mapping[str, Obj]:
        """Each claim not yet allocated ("namespace/name") -> its requests."""
        return self._asks

    async def _changed(self, change: Change[frozenset[str]]) -> None:
        """Keep a claim's requests while it is not allocated; a change of the drivers asks for
        no work (they are read when a node's pods are)."""
        ask = claim_ask(change.obj) if change.type != DELETED else None
        if ask is None:
            self._asks.pop(change.name, None)
            return
        if self._asks.get(change.name) == ask:
            return
        self._asks[change.name] = interned(ask)
        if self.on_ask is not None:
            await self.on_ask(change.name)

"""The claim index: every ResourceClaim's allocated drivers, from one list-then-watch.

A pod holding a ResourceClaim is a GPU consumer when the claim is allocated by a driver the
operator config lists (`gpuDraDrivers`, `models.gpu_resources`). The driver is on the claim, not
on the pod, so the controller watches the claims (resource.k8s.io/v1, across namespaces: the
chart's ClusterRole grants get/list/watch) and keeps of each only its allocation's drivers
(`controller.snapshot.compact_claim`): a few dozen bytes a claim.

Until the first listing is in, and whenever the cluster serves no resource.k8s.io/v1 (before
Kubernetes 1.34) or the right to list claims is missing, `drivers()` is None and every claim
counts (the safe side: a pod is drained that need not be). The watch then retries with a long
back-off (at most every ten minutes), logging each failure.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from vgpu_operator import kubeapi
from vgpu_operator.controller.informer import Change, Informer
from vgpu_operator.controller.kept import namespaced_name
from vgpu_operator.controller.snapshot import CLAIMS_PATH, compact_claim
from vgpu_operator.models.gpu_resources import ClaimDrivers, claim_drivers

PAGE = 500
BACKOFF = (5.0, 600.0)  # seconds: first and longest pause after a failed list or watch


async def _ignore(change: Change[frozenset[str]]) -> None:
    """A claim's change asks for no work: it is read when a node's pods are."""


class ClaimIndex:
    """`await index.run()` keeps it; `drivers()` reads it (one event loop: no lock)."""

    def __init__(self, api: Any, options: kubeapi.WatchOptions | None = None) -> None:
        opts = replace(
            options or kubeapi.WatchOptions(page_size=PAGE, backoff=BACKOFF),
            kind="resourceclaims",
            reduce=compact_claim,
        )
        self.informer: Informer[frozenset[str]] = Informer(
            api, "resourceclaims", CLAIMS_PATH, claim_drivers, _ignore, opts, key=namespaced_name
        )

    @property
    def synced(self) -> asyncio.Event:
        return self.informer.synced

    async def run(self) -> None:
        await self.informer.run()

    def drivers(self) -> ClaimDrivers | None:
        """Each claim ("namespace/name") -> its allocation's drivers; None until synced."""
        return self.informer.items if self.synced.is_set() else None

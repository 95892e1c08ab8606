"""The pod index: the pods that hold GPU resources, per node, from one list-then-watch.

The API cannot select pods by what they request, so the watch (`kubeapi.list_watch` through the
lean informer) takes every pod that has not finished (`status.phase!=Succeeded,
status.phase!=Failed`: a pod that finishes leaves the selection and arrives as DELETED) and
keeps only those whose containers request or limit a GPU resource
(`core.rollout.gpu_pods.holds_gpu`: the
configured vGPU names, Volcano's own, `nvidia.com/gpu`, `nvidia.com/mig-*`,
`huawei.com/Ascend*`, legacy GPU sharing), cut down to the fields read
(`core.rollout.gpu_pods.compact_pod`).
The listing is reduced page by page: 50,000 pods are never held at once.

Readers: the configuration reconciler (the stranded and legacy pod rules), the unschedulable
pod warnings, and a drain (`consumers_on(node, claims)`: the pods on the node that consume a
GPU, their ResourceClaims judged against the claim index as it is then). Keys are
`namespace/name`.

Which names count may grow while the index runs: a configuration pass reads NVIDIA's device
plugin configs (`core.rollout.gpu_pods.snapshot_gpu_resources`), and `use(resources)` takes
them. A pod the index left out may then be a GPU pod, and the index holds nothing of it: when
the new names match a resource the old did not (`GpuResources.widens`), the index lists the
pods again (the listing's difference adds them; what it held stays readable meanwhile). The
plugin qualifies every name with `nvidia.com/`, which always counts, so with NVIDIA's plugin
as it is this never lists again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from vgpu_operator import kubeapi
from vgpu_operator.controller.informer import DELETED, Change, Informer
from vgpu_operator.core.rollout.gpu_pods import (
    RUNNING_OR_PENDING,
    GpuResources,
    Obj,
    gpu_pod,
    holds_gpu,
    node_of,
    plugin_config_names,
    pod_key,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.gpu_resources import ClaimDrivers

log = logging.getLogger("vgpu_operator.pods")

PODS_PATH = "/api/v1/pods"
# Pods per listed page: the decoded page is what the listing holds at most at once (250 rather
# than 500 left 3 MiB less resident after a listing of 50,000 pods, measured).
PAGE = 250


class PodIndex:
    """`await index.run()` keeps it; `pods_on(node)`, `unbound()`, `pods()`, `get(key)` read
    it (one event loop: no lock). `on_change` gets every change of a kept pod, after the
    index has taken it in."""

    def __init__(
        self,
        api: Any,
        resources: GpuResources,
        on_change: Callable[[Change[Obj]], Awaitable[None]] | None = None,
        options: kubeapi.WatchOptions | None = None,
    ) -> None:
        self.resources = resources
        self._keep = gpu_pod(resources)
        opts = replace(
            options or kubeapi.WatchOptions(page_size=PAGE),
            kind="pods",
            field_selector=RUNNING_OR_PENDING,
            reduce=self._parse,
        )
        self.informer: Informer[Obj] = Informer(
            api, "pods", PODS_PATH, self._parse, self._changed, opts, key=pod_key
        )
        self.on_change = on_change
        self._by_node: dict[str, dict[str, Obj]] = {}
        self._relist = asyncio.Event()
        self._problems: tuple[str, ...] = ()
        self.relists = 0  # listings asked for because the names grew

    def _parse(self, pod: Mapping[str, Any]) -> Obj | None:
        return self._keep(pod)

    @property
    def synced(self) -> asyncio.Event:  # the first listing is in
        return self.informer.synced

    async def run(self) -> None:
        """The informer, started again (a new listing) when `use` widens the names."""
        while True:
            watch = asyncio.ensure_future(self.informer.run())
            widened = asyncio.ensure_future(self._relist.wait())
            try:
                await asyncio.wait({watch, widened}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                widened.cancel()
                if not watch.done():
                    watch.cancel()
                await asyncio.gather(watch, widened, return_exceptions=True)
            if not self._relist.is_set():
                watch.result()  # the informer ended on its own: its error, or its end
                return
            self._relist.clear()
            self.relists += 1

    def use(self, resources: GpuResources) -> bool:
        """Count GPU pods by `resources` from now on; True when that lists the pods again."""
        widened = self.resources.widens(resources)
        self.resources, self._keep = resources, gpu_pod(resources)
        if widened:
            self._relist.set()
        return widened

    # -- reading ----------------------------------------------------------------------------
    def get(self, key: str) -> Obj | None:
        return self.informer.items.get(key)

    def pods(self) -> list[Obj]:
        return list(self.informer.items.values())

    def pods_on(self, node: str) -> list[Obj]:
        """The GPU pods bound to `node` (running or about to)."""
        return list(self._by_node.get(node, {}).values()) if node else []

    def snapshot_taken(self, snapshot: ClusterSnapshot) -> None:
        """Add the names NVIDIA's device plugin's configs in a configuration pass's snapshot
        may advertise. Names are only added while the operator runs: a pod given a resource
        under a name the config no longer has still holds its GPU."""
        read = plugin_config_names(snapshot)
        if read.problems != self._problems:
            self._problems = read.problems
            ref = snapshot.config.nvidia_device_plugin_config
            where = "/".join(ref.ref()) if ref else ""
            for problem in read.problems:
                log.warning("NVIDIA device plugin config %s: %s", where, problem)
        if self.use(self.resources.with_names(read.names)):
            log.info("GPU resource names grew (%s): listing the pods again", sorted(read.names))

    def consumers_on(self, node: str, claims: ClaimDrivers | None) -> list[Obj]:
        """The pods on `node` that consume a GPU, their claims judged against `claims` (None:
        every claim counts)."""
        return [p for p in self.pods_on(node) if holds_gpu(p, self.resources, claims)]

    def unbound(self) -> list[Obj]:
        """The GPU pods not bound to any node yet (pending scheduling)."""
        return list(self._by_node.get("", {}).values())

    def nodes(self) -> set[str]:
        """Nodes with at least one GPU pod."""
        return {n for n in self._by_node if n}

    def __len__(self) -> int:
        return len(self.informer.items)

    # -- keeping ----------------------------------------------------------------------------
    async def _changed(self, change: Change[Obj]) -> None:
        key = change.name
        if change.previous is not None:
            before = node_of(change.previous)
            held = self._by_node.get(before)
            if held is not None:
                held.pop(key, None)
                if not held:
                    del self._by_node[before]
        if change.type != DELETED:
            self._by_node.setdefault(node_of(change.item), {})[key] = change.item
        if self.on_change is not None:
            await self.on_change(change)

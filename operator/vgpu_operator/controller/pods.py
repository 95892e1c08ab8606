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
pod warnings, and a drain (`pods_on(node)`). Keys are `namespace/name`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from vgpu_operator import kubeapi
from vgpu_operator.controller.informer import DELETED, Change, Informer
from vgpu_operator.core.rollout.gpu_pods import (
    RUNNING_OR_PENDING,
    GpuResources,
    Obj,
    gpu_pod,
    node_of,
    pod_key,
)

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
        parse = gpu_pod(resources)
        opts = replace(
            options or kubeapi.WatchOptions(page_size=PAGE),
            kind="pods",
            field_selector=RUNNING_OR_PENDING,
            reduce=parse,
        )
        self.informer: Informer[Obj] = Informer(
            api, "pods", PODS_PATH, parse, self._changed, opts, key=pod_key
        )
        self.on_change = on_change
        self._by_node: dict[str, dict[str, Obj]] = {}

    @property
    def synced(self) -> asyncio.Event:  # the first listing is in
        return self.informer.synced

    async def run(self) -> None:
        await self.informer.run()

    # -- reading ----------------------------------------------------------------------------
    def get(self, key: str) -> Obj | None:
        return self.informer.items.get(key)

    def pods(self) -> list[Obj]:
        return list(self.informer.items.values())

    def pods_on(self, node: str) -> list[Obj]:
        """The GPU pods bound to `node` (running or about to)."""
        return list(self._by_node.get(node, {}).values()) if node else []

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

"""An in-memory API server for one Node, with the semantics the agent loop relies on: merge
PATCH with a resourceVersion precondition (409), the listings and watch events of
`kubeapi.list_watch` (a new listing after a 410), and a record of every write. Used to test
agent.loop without a cluster."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

from vgpu_operator import contract, kubeapi
from vgpu_operator.core.nodes.mergepatch import apply_merge_patch


class MemoryNodeApi:
    def __init__(self, node: str, annotations: dict[str, str] | None = None) -> None:
        self.node = node
        self.rv = 1
        self.obj: dict[str, Any] | None = {
            "metadata": {
                "name": node,
                "uid": f"uid-{node}",
                "resourceVersion": "1",
                "labels": {"kubernetes.io/hostname": node},
                "annotations": dict(annotations or {}),
            }
        }
        self.history: list[tuple[int, dict[str, Any]]] = []  # (rv, event) for watches
        self.patches: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.lists = 0
        self.watches = 0
        self.oldest = 0  # resourceVersions below this are "compacted": 410
        self.conflicts = 0  # the next N PATCHes with a precondition get 409
        self._changed = asyncio.Condition()

    # --- what the test does (as the controller or kubelet would) ---------------------------

    async def _bump(self, kind: str) -> None:
        self.rv += 1
        if self.obj is not None:
            self.obj["metadata"]["resourceVersion"] = str(self.rv)
        obj = copy.deepcopy(self.obj) or {
            "metadata": {"name": self.node, "resourceVersion": str(self.rv)}
        }
        self.history.append((self.rv, {"type": kind, "object": obj}))
        async with self._changed:
            self._changed.notify_all()

    async def annotate(self, key: str, value: str | None) -> None:
        assert self.obj is not None
        self.obj = apply_merge_patch(self.obj, {"metadata": {"annotations": {key: value}}})
        await self._bump("MODIFIED")

    async def release(self, config: str | None) -> None:
        await self.annotate(contract.ANN_CONFIG, config)

    async def heartbeat(self) -> None:
        assert self.obj is not None
        self.obj["status"] = {"heartbeat": self.rv}
        await self._bump("MODIFIED")

    async def expire(self) -> None:
        """Compact history: open watches end with 410 Gone, old resourceVersions are refused."""
        self.oldest = self.rv + 1
        self.history.append((self.rv, {"type": "ERROR", "object": {"kind": "Status", "code": 410}}))
        async with self._changed:
            self._changed.notify_all()

    @property
    def state(self) -> str | None:
        assert self.obj is not None
        labels: dict[str, str] = self.obj["metadata"].get("labels") or {}
        return labels.get(contract.LABEL_STATE)

    def annotation(self, key: str) -> str | None:
        assert self.obj is not None
        annotations: dict[str, str] = self.obj["metadata"].get("annotations") or {}
        return annotations.get(key)

    @property
    def writes(self) -> int:
        return len(self.patches) + len(self.events)

    # --- NodeApi ---------------------------------------------------------------------------

    async def get(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.obj)

    async def changes(self) -> AsyncIterator[kubeapi.Listing | kubeapi.WatchEvent]:
        """What `kubeapi.list_watch` yields: a listing, the events after it, and a new listing
        when the history it watches from is compacted (410)."""
        while True:
            self.lists += 1
            since = self.rv
            items = [copy.deepcopy(self.obj)] if self.obj is not None else []
            yield kubeapi.Listing(items, str(since))
            self.watches += 1
            sent = len([1 for rv, _ in self.history if rv <= since])
            gone = False
            while not gone:
                while sent < len(self.history):
                    rv, event = self.history[sent]
                    sent += 1
                    if event["type"] == "ERROR":
                        gone = True  # 410: list again
                        break
                    if rv > since:
                        yield kubeapi.WatchEvent(event["type"], event["object"])
                if not gone:
                    async with self._changed:
                        await self._changed.wait()

    async def patch(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self.obj is not None
        want = (body.get("metadata") or {}).get("resourceVersion")
        if want is not None and (self.conflicts > 0 or want != str(self.rv)):
            self.conflicts = max(0, self.conflicts - 1)
            raise kubeapi.Conflict(self.node)
        self.patches.append(copy.deepcopy(body))
        body = copy.deepcopy(body)
        body["metadata"].pop("resourceVersion", None)
        self.obj = apply_merge_patch(self.obj, body)
        await self._bump("MODIFIED")
        return copy.deepcopy(self.obj)

    async def post_event(self, body: dict[str, Any]) -> None:
        self.events.append(body)

"""A lean list-and-watch cache for the two kinds the operator keeps whole in memory.

Nodes are the one kind whose events come by the thousand: every write the operator makes comes
back as an event, and so does every heartbeat of a node whose status changes. Kopf's watch runs
each event through its whole pipeline (body wrappers, index and cause detection, per-object
queues); measured at 1,000 nodes, that was about a third of the operator's CPU while it converged.
This informer does what client-go's does and nothing more:

- list (paginated), compare with what it held, and call back for what was added, changed or
  removed; `synced` is set once the first listing has been delivered;
- watch from the listing's resourceVersion, with bookmarks, and resume from the last version
  seen when the apiserver ends the stream or the connection drops (with backoff);
- list again when the apiserver answers 410 Gone (the version has been compacted away).

Each event is parsed once, by `parse`, into what the operator keeps; the raw object is handed to
the callback too and then dropped. Callbacks run in order, one at a time, like Kopf's handlers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import aiohttp

from vgpu_operator import kubeapi
from vgpu_operator.controller import metrics

log = logging.getLogger("vgpu_operator.informer")

T = TypeVar("T")

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(frozen=True, slots=True)
class Change(Generic[T]):
    """One event as the callback gets it."""

    type: str  # ADDED, MODIFIED or DELETED
    name: str
    item: T  # what `parse` made of the object (for DELETED: of its last state)
    previous: T | None  # what was held before, if anything
    obj: Mapping[str, Any]  # the raw object (for a deletion found by listing: name only)


Callback = Callable[[Change[T]], Awaitable[None]]


class Gone(Exception):
    """410: the resourceVersion asked for is no longer in the apiserver's history; list again."""


class WatchFailed(Exception):
    """The apiserver ended a watch with an error other than 410."""


@dataclass
class Informer(Generic[T]):
    api: Any  # kubernetes_asyncio.client.ApiClient
    kind: str  # for logs and metrics
    path: str  # the collection, e.g. /api/v1/nodes
    parse: Callable[[Mapping[str, Any]], T]
    on_event: Callback[T]
    page_size: int = 500
    watch_seconds: int = 300  # the apiserver ends each watch after this long; resumed at once
    backoff: tuple[float, float] = (0.5, 30.0)  # first and longest pause after a failure

    items: dict[str, T] = field(default_factory=dict)
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    resource_version: str | None = None  # of the last event or listing delivered; None: list
    lists: int = 0  # listings done (the first one, and one per 410)
    _versions: dict[str, str] = field(default_factory=dict)

    async def run(self) -> None:
        pause = self.backoff[0]
        while True:
            try:
                if self.resource_version is None:
                    await self.list()
                began = time.monotonic()
                await self.watch()
                if time.monotonic() - began >= 1.0:
                    pause = self.backoff[0]
                else:  # ended at once, with no error: do not spin on it
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, self.backoff[1])
            except Gone:
                log.info("%s: version %s is gone; listing again", self.kind, self.resource_version)
                metrics.WATCH_RESTARTS.labels(kind=self.kind, reason="gone").inc()
                self.resource_version = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection lost, apiserver restarting, a 5xx...
                log.warning("%s: watch failed (%s); again in %.1fs", self.kind, exc, pause)
                metrics.WATCH_RESTARTS.labels(kind=self.kind, reason="error").inc()
                await asyncio.sleep(pause)
                pause = min(pause * 2, self.backoff[1])

    # -- listing ----------------------------------------------------------------------------
    async def list(self) -> None:
        """Read the whole collection and deliver the difference to what is held."""
        listed: dict[str, Mapping[str, Any]] = {}
        query: dict[str, str] = {"limit": str(self.page_size)}
        while True:
            try:
                page = await kubeapi.request(self.api, "GET", self.path, query=query, timeout=60)
            except kubeapi.ApiException as exc:
                if exc.status == 410:  # the continue token expired mid-listing
                    raise Gone(self.path) from exc
                raise
            for obj in page.get("items") or []:
                listed[obj["metadata"]["name"]] = obj
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                break
            query["continue"] = meta["continue"]
        self.lists += 1
        for name in [n for n in self.items if n not in listed]:  # deleted while not watching
            item = self.items.pop(name)
            self._versions.pop(name, None)
            await self._call(Change(DELETED, name, item, item, {"metadata": {"name": name}}))
        for name, obj in listed.items():
            version = str(obj["metadata"].get("resourceVersion", ""))
            if self._versions.get(name) == version:
                continue
            await self._deliver(MODIFIED if name in self.items else ADDED, name, version, obj)
        self.resource_version = str(meta.get("resourceVersion", ""))
        self.synced.set()

    # -- watching ---------------------------------------------------------------------------
    async def watch(self) -> None:
        """One watch from `resource_version` until the apiserver ends it."""
        raw: Any = self.api
        resp = await raw.call_api(
            self.path,
            "GET",
            query_params=[
                ("watch", "true"),
                ("allowWatchBookmarks", "true"),
                ("resourceVersion", self.resource_version or ""),
                ("timeoutSeconds", str(self.watch_seconds)),
            ],
            header_params={"Accept": kubeapi.JSON},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            # No total: a watch is meant to last. A silent connection is a dead one.
            _request_timeout=aiohttp.ClientTimeout(
                total=None, connect=30, sock_read=self.watch_seconds + 30
            ),
        )
        try:
            if resp.status == 410:
                raise Gone(self.path)
            if resp.status != 200:
                raise WatchFailed(f"{resp.status} {(await resp.read())[:200]!r}")
            pending = b""
            async for chunk in resp.content.iter_any():
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()  # an event not complete yet
                for line in lines:
                    if line.strip():
                        await self._event(json.loads(line))
        finally:
            resp.close()  # cancelled or failed mid-stream: the connection must not be reused

    async def _event(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(str(obj.get("message", "")))
            raise WatchFailed(str(obj.get("message", obj)))
        meta = obj.get("metadata") or {}
        version = str(meta.get("resourceVersion", ""))
        if kind == "BOOKMARK":
            self.resource_version = version
            return
        name = str(meta.get("name", ""))
        if kind == DELETED:
            previous = self.items.pop(name, None)
            self._versions.pop(name, None)
            await self._call(Change(DELETED, name, self.parse(obj), previous, obj))
        elif kind in (ADDED, MODIFIED):
            await self._deliver(kind, name, version, obj)
        self.resource_version = version

    async def _deliver(self, kind: str, name: str, version: str, obj: Mapping[str, Any]) -> None:
        item = self.parse(obj)
        previous = self.items.get(name)
        self.items[name] = item
        self._versions[name] = version
        await self._call(Change(kind, name, item, previous, obj))

    async def _call(self, change: Change[T]) -> None:
        """The callback; its failure is logged, and does not stop the watch (the event is
        not delivered again: the periodic full pass heals what it missed)."""
        try:
            await self.on_event(change)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "%s %s: handling its %s event failed", self.kind, change.name, change.type
            )

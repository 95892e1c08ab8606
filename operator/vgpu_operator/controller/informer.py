"""A lean in-memory cache of a kind, fed by `kubeapi.list_watch`.

Nodes are the one kind whose events come by the thousand: every write the operator makes comes
back as an event, and so does every heartbeat of a node whose status changes. Kopf's watch runs
each event through its whole pipeline (body wrappers, index and cause detection, per-object
queues); measured at 1,000 nodes, that was about a third of the operator's CPU while it converged.
This informer does what client-go's does and nothing more. The list-then-watch itself (pages,
bookmarks, resuming, listing again on 410, randomized watch timeouts, back-off) is
`kubeapi.list_watch`, shared with the node agent; here:

- a listing is compared with what is held, and the callback gets what was added, changed or
  removed; `synced` is set once the first listing has been delivered;
- each watch event is parsed once, by `parse`, into what the operator keeps; the raw object is
  handed to the callback too and then dropped. Callbacks run in order, one at a time;
- `parse` may keep nothing (None): such an object is neither held nor delivered, and one that
  was held and no longer parses is delivered as DELETED (it left what is kept). Objects are held
  by `key` (the name; namespace/name for a namespaced kind watched across namespaces).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from vgpu_operator import kubeapi

log = logging.getLogger("vgpu_operator.informer")

T = TypeVar("T")

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(frozen=True, slots=True)
class Change(Generic[T]):
    """One event as the callback gets it."""

    type: str  # ADDED, MODIFIED or DELETED
    name: str  # the key: the name, or namespace/name
    item: T  # what `parse` made of the object (for DELETED: of its last state kept)
    previous: T | None  # what was held before, if anything
    obj: Mapping[str, Any]  # the raw object (for a deletion found by listing: name only)


Callback = Callable[[Change[T]], Awaitable[None]]


def object_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _stub(key: str) -> dict[str, Any]:
    """The object of a deletion found by listing: its name (and namespace) only."""
    namespace, _, name = key.rpartition("/")
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"metadata": meta}


@dataclass
class Informer(Generic[T]):
    api: Any  # kubernetes_asyncio.client.ApiClient
    kind: str  # for logs and metrics
    path: str  # the collection, e.g. /api/v1/nodes
    parse: Callable[[Mapping[str, Any]], T | None]  # None: not kept
    on_event: Callback[T]
    options: kubeapi.WatchOptions = field(default_factory=kubeapi.WatchOptions)
    key: Callable[[Mapping[str, Any]], str] = object_name

    items: dict[str, T] = field(default_factory=dict)
    resource_version: str | None = None  # of the last listing or event delivered
    lists: int = 0  # listings delivered (the first one, and one per 410)
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    _versions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.options.kind:
            self.options = replace(self.options, kind=self.kind)

    async def run(self) -> None:
        async for update in kubeapi.list_watch(self.api, self.path, self.options):
            if isinstance(update, kubeapi.Listing):
                await self._listed(update)
            else:
                await self._event(update)

    async def _listed(self, listing: kubeapi.Listing) -> None:
        """Deliver the difference between a listing and what is held."""
        listed = {self.key(o): o for o in listing.items}
        self.lists += 1
        for name in [n for n in self.items if n not in listed]:  # deleted while not watching
            item = self.items.pop(name)
            self._versions.pop(name, None)
            await self._call(Change(DELETED, name, item, item, _stub(name)))
        for name, obj in listed.items():
            version = str(obj["metadata"].get("resourceVersion", ""))
            if self._versions.get(name) == version:
                continue
            await self._deliver(MODIFIED if name in self.items else ADDED, name, version, obj)
        self.resource_version = listing.resource_version
        self.synced.set()

    async def _event(self, event: kubeapi.WatchEvent) -> None:
        obj = event.obj
        version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        name = self.key(obj)
        if event.type == DELETED:
            previous = self.items.pop(name, None)
            self._versions.pop(name, None)
            item = self.parse(obj)
            last = item if item is not None else previous
            if last is not None:
                await self._call(Change(DELETED, name, last, previous, obj))
        else:
            await self._deliver(event.type, name, version, obj)
        self.resource_version = version

    async def _deliver(self, kind: str, name: str, version: str, obj: Mapping[str, Any]) -> None:
        item = self.parse(obj)
        previous = self.items.get(name)
        if item is None:  # not kept: forget it if it was held
            if previous is not None:
                del self.items[name]
                self._versions.pop(name, None)
                await self._call(Change(DELETED, name, previous, previous, obj))
            return
        self.items[name] = item
        self._versions[name] = version
        await self._call(Change(ADDED if previous is None else kind, name, item, previous, obj))

    async def _call(self, change: Change[T]) -> None:
        """The callback; its failure is logged, and does not stop the watch (the event is
        not delivered again: the periodic full pass heals what it missed)."""
        try:
            await self.on_event(change)
        except Exception:
            log.exception(
                "%s %s: handling its %s event failed", self.kind, change.name, change.type
            )

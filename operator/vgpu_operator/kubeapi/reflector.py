"""List-then-watch, as client-go's reflector does it, as one async iterator, over any transport.

`list_watch(transport, path, ...)` yields:

- `Listing(items, resource_version)`: the whole collection (paginated), first, and again
  whenever the watch cannot resume (410 Gone, or a failure after which the version is lost);
- `WatchEvent(type, obj)`: ADDED, MODIFIED or DELETED, in order, from the listing's version on.

Between those it keeps to client-go's semantics: bookmarks asked for and followed (they only move
the version on), a watch the apiserver ends is resumed from the last version seen without listing
again, each watch asks for a randomized timeout (client-go: between the minimum and twice it, so
a fleet of clients does not reconnect in step), failures back off exponentially with jitter, and
410 Gone lists again at once. Label and field selectors go to both the list and the watch, so the
apiserver filters.

These decisions live here once, for both clients: the controller's (`kubeapi.watch`, on
kubernetes-asyncio and aiohttp) and the node agent's (`kubeapi.lite`, on asyncio streams). A
`Transport` only moves bytes: one JSON GET, and the lines of one watch response. Standard library
only. The iterator never ends by itself; cancel the task that iterates it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from vgpu_operator.kubeapi.errors import ApiError, Gone

log = logging.getLogger("vgpu_operator.kubeapi.watch")

MAX_LINE = 8 * 1024 * 1024  # one watch event per line; etcd caps objects at 1.5 MiB
LIST_TIMEOUT = 60.0  # seconds for one page of a listing

WATCH_RESTARTS_NAME = "vgpu_operator_watch_restarts_total"
WATCH_RESTARTS_HELP = (
    "Watches started again, by kind and reason (gone: listed again; error: after a failure)"
)


@dataclass(frozen=True, slots=True)
class Listing:
    items: Sequence[Mapping[str, Any]]
    resource_version: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED or DELETED
    obj: Mapping[str, Any]


@dataclass(frozen=True)
class WatchOptions:
    label_selector: str | None = None
    field_selector: str | None = None
    page_size: int = 500
    min_watch_seconds: float = 300.0  # each watch asks for [min, 2*min) (client-go)
    backoff: tuple[float, float] = (0.5, 30.0)  # first and longest pause after a failure
    kind: str = ""  # for logs and metrics
    # Applied to each listed item as its page arrives; None drops the item. A listing of tens
    # of thousands of objects of which few are kept is then never held whole.
    reduce: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None = None


DEFAULT_OPTIONS = WatchOptions()


class WatchFailed(ApiError):
    """The apiserver ended a watch with an ERROR event other than 410."""


class Transport(Protocol):
    """What list-then-watch needs from a client. Its errors are the `kubeapi.errors` tree, or
    one of `failures` (the transport's own, after which a watch resumes as after any failure)."""

    failures: tuple[type[BaseException], ...]

    async def get_json(self, path: str, query: dict[str, str], timeout: float) -> dict[str, Any]:
        """One GET; the decoded body."""
        ...

    def watch_lines(
        self, path: str, query: list[tuple[str, str]], seconds: int
    ) -> AsyncIterator[bytes]:
        """The lines of one watch response (each at most MAX_LINE), until the server ends it;
        the connection is not reused after the iterator is closed early."""
        ...


Restarted = Callable[[str, str], None]  # (kind, reason): counts a restart


async def list_all(
    transport: Transport, path: str, options: WatchOptions = WatchOptions()
) -> Listing:
    """The whole collection, page by page; Gone if a continue token expired mid-way."""
    items: list[Mapping[str, Any]] = []
    query = selectors(options)
    query["limit"] = str(options.page_size)
    while True:
        page = await transport.get_json(path, query, LIST_TIMEOUT)
        got = page.pop("items", None) or []
        if options.reduce is None:
            items.extend(got)
        else:
            items.extend(r for r in map(options.reduce, got) if r is not None)
        del got  # the next page is not read while this one is still held
        meta = page.get("metadata") or {}
        if not meta.get("continue"):
            return Listing(items, str(meta.get("resourceVersion", "")))
        query["continue"] = meta["continue"]


async def list_watch(
    transport: Transport,
    path: str,
    options: WatchOptions = WatchOptions(),
    *,
    since: str | None = None,
    restarted: Restarted | None = None,
) -> AsyncIterator[Listing | WatchEvent]:
    """List, then watch from the listing's version, forever (see the module docstring).
    With `since`, start by watching from that version (a caller that already holds a listing).
    `restarted(kind, reason)` is called on each restart (the client's metric)."""
    version = since
    pause = options.backoff[0]
    kind = options.kind or path
    failures: tuple[type[BaseException], ...] = (
        ApiError,
        TimeoutError,
        OSError,
        ValueError,
        *transport.failures,
    )
    while True:
        try:
            if version is None:
                listing = await list_all(transport, path, options)
                version = listing.resource_version
                yield listing
            began = time.monotonic()
            async for event in _watch_once(transport, path, options, version):
                if isinstance(event, str):  # a bookmark: only the version moves
                    version = event
                    continue
                version = str((event.obj.get("metadata") or {}).get("resourceVersion") or version)
                yield event
            if time.monotonic() - began >= 1.0:
                pause = options.backoff[0]
            else:  # ended at once, with no error: do not spin on it
                await asyncio.sleep(_jitter(pause))
                pause = min(pause * 2, options.backoff[1])
        except Gone:
            log.info("%s: version %s is gone; listing again", kind, version)
            if restarted is not None:
                restarted(kind, "gone")
            version = None
        except failures as exc:
            # Connection lost, the apiserver restarting, a 5xx, a broken line... resume from
            # the last version seen; it may be gone by then (410 lists again).
            wait = _jitter(pause)
            log.warning("%s: watch failed (%s); again in %.1fs", kind, exc, wait)
            if restarted is not None:
                restarted(kind, "error")
            await asyncio.sleep(wait)
            pause = min(pause * 2, options.backoff[1])


async def _watch_once(
    transport: Transport, path: str, options: WatchOptions, version: str
) -> AsyncIterator[WatchEvent | str]:
    """One watch until the apiserver ends it: events, and bookmark versions as str."""
    seconds = int(options.min_watch_seconds * (1.0 + random.random()))
    query = [
        *selectors(options).items(),
        ("watch", "true"),
        ("allowWatchBookmarks", "true"),
        ("resourceVersion", version),
        ("timeoutSeconds", str(seconds)),
    ]
    async for line in transport.watch_lines(path, query, seconds):
        decoded = decode_event(line, path, version)
        if decoded is not None:
            yield decoded


def decode_event(line: bytes, path: str, version: str) -> WatchEvent | str | None:
    """One line of a watch (a metav1.WatchEvent as JSON): the event, a bookmark's version (str),
    or None (a blank line, or a type this client does not follow). An ERROR event raises: Gone
    for 410 (list again), WatchFailed otherwise (resume)."""
    if not line.strip():
        return None
    event = json.loads(line)
    kind = event.get("type")
    obj = event.get("object") or {}
    if kind == "ERROR":
        code = int(obj.get("code") or 0)
        message = str(obj.get("message", obj))
        if code == 410:
            raise Gone(410, "Gone", path=path, body=json.dumps(obj))
        raise WatchFailed(code, message, path=path, body=json.dumps(obj))
    if kind == "BOOKMARK":
        return str((obj.get("metadata") or {}).get("resourceVersion") or version)
    if kind in ("ADDED", "MODIFIED", "DELETED"):
        return WatchEvent(kind, obj)
    return None


def selectors(options: WatchOptions) -> dict[str, str]:
    query: dict[str, str] = {}
    if options.label_selector:
        query["labelSelector"] = options.label_selector
    if options.field_selector:
        query["fieldSelector"] = options.field_selector
    return query


def _jitter(seconds: float) -> float:
    """client-go's wait.Jitter with factor 1.0: between the pause and twice it."""
    return seconds * (1.0 + random.random())

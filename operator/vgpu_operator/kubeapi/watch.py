"""List-then-watch, as client-go's reflector does it, as one async iterator.

`list_watch(api, path, ...)` yields:

- `Listing(items, resource_version)`: the whole collection (paginated), first, and again
  whenever the watch cannot resume (410 Gone, or a failure after which the version is lost);
- `WatchEvent(type, obj)`: ADDED, MODIFIED or DELETED, in order, from the listing's version on.

Between those it keeps to client-go's semantics: bookmarks asked for and followed (they only move
the version on), a watch the apiserver ends is resumed from the last version seen without listing
again, each watch asks for a randomized timeout (client-go: between the minimum and twice it, so
a fleet of clients does not reconnect in step), failures back off exponentially with jitter, and
410 Gone lists again at once. Label and field selectors go to both the list and the watch, so the
apiserver filters.

The iterator never ends by itself; cancel the task that iterates it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client import Counter

from vgpu_operator.kubeapi.errors import ApiError, Gone
from vgpu_operator.kubeapi.request import JSON, open_stream, request

log = logging.getLogger("vgpu_operator.kubeapi.watch")

MAX_LINE = 8 * 1024 * 1024  # one watch event per line; etcd caps objects at 1.5 MiB

WATCH_RESTARTS = Counter(
    "vgpu_operator_watch_restarts_total",
    "Watches started again, by kind and reason (gone: listed again; error: after a failure)",
    ["kind", "reason"],
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


class WatchFailed(ApiError):
    """The apiserver ended a watch with an ERROR event other than 410."""


async def list_all(api: Any, path: str, options: WatchOptions = WatchOptions()) -> Listing:
    """The whole collection, page by page; Gone if a continue token expired mid-way."""
    items: list[Mapping[str, Any]] = []
    query = _selectors(options)
    query["limit"] = str(options.page_size)
    while True:
        page = await request(api, "GET", path, query=query, timeout=60)
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
    api: Any,
    path: str,
    options: WatchOptions = WatchOptions(),
    *,
    since: str | None = None,
) -> AsyncIterator[Listing | WatchEvent]:
    """List, then watch from the listing's version, forever (see the module docstring).
    With `since`, start by watching from that version (a caller that already holds a listing)."""
    version = since
    pause = options.backoff[0]
    kind = options.kind or path
    while True:
        try:
            if version is None:
                listing = await list_all(api, path, options)
                version = listing.resource_version
                yield listing
            began = time.monotonic()
            async for event in _watch_once(api, path, options, version):
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
            WATCH_RESTARTS.labels(kind=kind, reason="gone").inc()
            version = None
        except (ApiError, aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            # Connection lost, the apiserver restarting, a 5xx, a broken line... resume from
            # the last version seen; it may be gone by then (410 lists again).
            wait = _jitter(pause)
            log.warning("%s: watch failed (%s); again in %.1fs", kind, exc, wait)
            WATCH_RESTARTS.labels(kind=kind, reason="error").inc()
            await asyncio.sleep(wait)
            pause = min(pause * 2, options.backoff[1])


async def _watch_once(
    api: Any, path: str, options: WatchOptions, version: str
) -> AsyncIterator[WatchEvent | str]:
    """One watch until the apiserver ends it: events, and bookmark versions as str."""
    seconds = int(options.min_watch_seconds * (1.0 + random.random()))
    query = [
        *_selectors(options).items(),
        ("watch", "true"),
        ("allowWatchBookmarks", "true"),
        ("resourceVersion", version),
        ("timeoutSeconds", str(seconds)),
    ]
    resp = await open_stream(
        api,
        "GET",
        path,
        query=query,
        headers={"Accept": JSON},
        # No total: a watch is meant to last. A silent connection is a dead one.
        timeout=aiohttp.ClientTimeout(total=None, connect=30, sock_read=seconds + 30),
    )
    try:
        while True:
            line = await resp.content.readline(max_line_length=MAX_LINE)
            if not line:
                return
            if not line.strip():
                continue
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
                yield str((obj.get("metadata") or {}).get("resourceVersion") or version)
            elif kind in ("ADDED", "MODIFIED", "DELETED"):
                yield WatchEvent(kind, obj)
    finally:
        resp.close()  # cancelled or failed mid-stream: the connection must not be reused


def _selectors(options: WatchOptions) -> dict[str, str]:
    query: dict[str, str] = {}
    if options.label_selector:
        query["labelSelector"] = options.label_selector
    if options.field_selector:
        query["fieldSelector"] = options.field_selector
    return query


def _jitter(seconds: float) -> float:
    """client-go's wait.Jitter with factor 1.0: between the pause and twice it."""
    return seconds * (1.0 + random.random())

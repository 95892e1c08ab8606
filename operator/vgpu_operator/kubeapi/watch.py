"""List-then-watch on a kubernetes-asyncio client (the controller's): `kubeapi.reflector`'s
semantics over this client's requests and aiohttp's streams.

`list_watch(api, path, ...)` yields `Listing`s and `WatchEvent`s as `kubeapi.reflector` describes
(client-go's reflector: resume, bookmarks, listing again on 410, randomized timeouts, back-off);
restarts are counted in `vgpu_operator_watch_restarts_total`. The iterator never ends by itself;
cancel the task that iterates it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from prometheus_client import Counter

from vgpu_operator.kubeapi.aio import JSON, open_stream, request
from vgpu_operator.kubeapi.reflector import (
    DEFAULT_OPTIONS,
    MAX_LINE,
    WATCH_RESTARTS_HELP,
    WATCH_RESTARTS_NAME,
    Listing,
    WatchEvent,
    WatchFailed,
    WatchOptions,
)
from vgpu_operator.kubeapi.reflector import list_all as reflector_list_all
from vgpu_operator.kubeapi.reflector import list_watch as reflector_list_watch

__all__ = ["Listing", "WatchEvent", "WatchFailed", "WatchOptions", "list_all", "list_watch"]

WATCH_RESTARTS = Counter(WATCH_RESTARTS_NAME, WATCH_RESTARTS_HELP, ["kind", "reason"])


class _Aiohttp:
    """`reflector.Transport` on a kubernetes-asyncio ApiClient (`kubeapi.request`)."""

    failures: tuple[type[BaseException], ...] = (aiohttp.ClientError,)

    def __init__(self, api: Any) -> None:
        self.api = api

    async def get_json(self, path: str, query: dict[str, str], timeout: float) -> dict[str, Any]:
        return await request(self.api, "GET", path, query=query, timeout=timeout)

    async def watch_lines(
        self, path: str, query: list[tuple[str, str]], seconds: int
    ) -> AsyncIterator[bytes]:
        resp = await open_stream(
            self.api,
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
                yield line
        finally:
            resp.close()  # cancelled or failed mid-stream: the connection must not be reused


def _restarted(kind: str, reason: str) -> None:
    WATCH_RESTARTS.labels(kind=kind, reason=reason).inc()


async def list_all(api: Any, path: str, options: WatchOptions = DEFAULT_OPTIONS) -> Listing:
    """The whole collection, page by page; Gone if a continue token expired mid-way."""
    return await reflector_list_all(_Aiohttp(api), path, options)


def list_watch(
    api: Any,
    path: str,
    options: WatchOptions = DEFAULT_OPTIONS,
    *,
    since: str | None = None,
) -> AsyncIterator[Listing | WatchEvent]:
    """List, then watch from the listing's version, forever (`kubeapi.reflector`).
    With `since`, start by watching from that version (a caller that already holds a listing)."""
    return reflector_list_watch(_Aiohttp(api), path, options, since=since, restarted=_restarted)

"""`kubeapi.list_watch` on the wire, with client-go's reflector semantics: a paginated listing,
selectors on the list and the watch, bookmarks, resuming from the last version when the server
ends a watch, listing again on 410 (an ERROR event or the HTTP status), randomized timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.kit.wire import Wire, error, serve, status, stream
from vgpu_operator import kubeapi

PATH = "/api/v1/nodes"
OPTIONS = kubeapi.WatchOptions(
    field_selector="metadata.name=n1",
    label_selector="pool=a",
    page_size=1,
    min_watch_seconds=60,
    backoff=(0.01, 0.02),
    kind="test",
)


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    async for w in serve():
        yield w


def node(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}}


def event(kind: str, name: str, rv: str) -> dict[str, Any]:
    return {"type": kind, "object": node(name, rv)}


def bookmark(rv: str) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": rv}}}


async def collect(wire: Wire, count: int) -> list[kubeapi.Listing | kubeapi.WatchEvent]:
    got: list[kubeapi.Listing | kubeapi.WatchEvent] = []
    async with wire.client() as api:
        async for update in kubeapi.list_watch(api, PATH, OPTIONS):
            got.append(update)
            if len(got) == count:
                break
    return got


class Script:
    """Listings and watch streams served in order; the queries they were asked with."""

    def __init__(self, listings: list[list[dict[str, Any]]], watches: list[Any]) -> None:
        self.listings = listings  # each: the pages of one listing
        self.watches = watches  # each: a list of events, or an int HTTP status
        self.list_queries: list[dict[str, str]] = []
        self.watch_queries: list[dict[str, str]] = []
        self._pages: list[dict[str, Any]] = []

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        if query.get("watch") == "true":
            self.watch_queries.append(query)
            if not self.watches:
                await asyncio.sleep(3600)  # nothing more: an idle watch
            step = self.watches.pop(0)
            if isinstance(step, int):
                return error(step, "too old resource version")
            return await stream(request, step)
        self.list_queries.append(query)
        if "continue" not in query:
            self._pages = list(self.listings.pop(0))
        return web.json_response(self._pages.pop(0))


def page(items: list[dict[str, Any]], rv: str, cont: str = "") -> dict[str, Any]:
    meta = {"resourceVersion": rv, **({"continue": cont} if cont else {})}
    return {"items": items, "metadata": meta}


async def test_lists_every_page_then_watches_from_the_listing_with_the_selectors(
    wire: Wire,
) -> None:
    script = Script(
        listings=[[page([node("a", "3")], "10", cont="c1"), page([node("b", "4")], "10")]],
        watches=[[event("ADDED", "c", "11"), event("DELETED", "a", "12")]],
    )
    wire.on("GET", PATH, script)
    listing, added, deleted = await collect(wire, 3)
    assert isinstance(listing, kubeapi.Listing) and listing.resource_version == "10"
    assert [o["metadata"]["name"] for o in listing.items] == ["a", "b"]
    assert added == kubeapi.WatchEvent("ADDED", node("c", "11"))
    assert deleted == kubeapi.WatchEvent("DELETED", node("a", "12"))
    first, second = script.list_queries
    assert (first["limit"], second["continue"]) == ("1", "c1")
    (watch,) = script.watch_queries
    assert watch["resourceVersion"] == "10" and watch["allowWatchBookmarks"] == "true"
    for query in (first, second, watch):
        assert query["fieldSelector"] == "metadata.name=n1"
        assert query["labelSelector"] == "pool=a"
    # client-go: the minimum, times a random factor in [1, 2)
    assert 60 <= int(watch["timeoutSeconds"]) < 120


async def test_resumes_from_the_last_version_or_bookmark_without_listing_again(
    wire: Wire,
) -> None:
    script = Script(
        listings=[[page([], "10")]],
        watches=[
            [event("ADDED", "a", "11"), bookmark("15")],  # the server ends the watch here
            [event("MODIFIED", "a", "16")],
        ],
    )
    wire.on("GET", PATH, script)
    got = await collect(wire, 3)
    assert got[1:] == [
        kubeapi.WatchEvent("ADDED", node("a", "11")),
        kubeapi.WatchEvent("MODIFIED", node("a", "16")),
    ]
    assert [q["resourceVersion"] for q in script.watch_queries] == ["10", "15"]
    assert len(script.list_queries) == 1


@pytest.mark.parametrize(
    "gone",
    [
        [{"type": "ERROR", "object": status(410, "too old resource version", "Expired")}],
        410,  # the watch request itself answered 410
    ],
)
async def test_410_lists_again_and_watches_from_the_new_listing(wire: Wire, gone: Any) -> None:
    script = Script(
        listings=[[page([node("a", "3")], "10")], [page([node("b", "30")], "40")]],
        watches=[gone, [event("ADDED", "c", "41")]],
    )
    wire.on("GET", PATH, script)
    first, second, added = await collect(wire, 3)
    assert isinstance(first, kubeapi.Listing) and isinstance(second, kubeapi.Listing)
    assert [o["metadata"]["name"] for o in second.items] == ["b"]
    assert added == kubeapi.WatchEvent("ADDED", node("c", "41"))
    assert [q["resourceVersion"] for q in script.watch_queries] == ["10", "40"]


async def test_a_failed_watch_backs_off_and_resumes_from_where_it_was(wire: Wire) -> None:
    script = Script(
        listings=[[page([], "10")]],
        watches=[
            [event("ADDED", "a", "11")],
            500,  # the apiserver failing for a moment
            [{"type": "ERROR", "object": status(500, "internal error")}],
            [event("MODIFIED", "a", "12")],
        ],
    )
    wire.on("GET", PATH, script)
    got = await collect(wire, 3)
    assert got[2] == kubeapi.WatchEvent("MODIFIED", node("a", "12"))
    assert [q["resourceVersion"] for q in script.watch_queries] == ["10", "11", "11", "11"]
    assert len(script.list_queries) == 1


async def test_a_listing_is_reduced_page_by_page(wire: Wire) -> None:
    """`reduce` sees each item as its page arrives; what it returns None for is not kept."""
    seen: list[str] = []

    def keep_b(obj: Any) -> dict[str, Any] | None:
        seen.append(obj["metadata"]["name"])
        return {"name": obj["metadata"]["name"]} if obj["metadata"]["name"] == "b" else None

    script = Script(
        listings=[[page([node("a", "3")], "10", cont="c1"), page([node("b", "4")], "10")]],
        watches=[],
    )
    wire.on("GET", PATH, script)
    options = kubeapi.WatchOptions(page_size=1, reduce=keep_b)
    async with wire.client() as api:
        listing = await kubeapi.list_all(api, PATH, options)
    assert listing.items == [{"name": "b"}] and seen == ["a", "b"]
    assert listing.resource_version == "10"

"""The lean informer against the real apiserver: listing, watching, resuming, listing again.

ConfigMaps in a fresh namespace stand in for Nodes and policies (the informer does not care what
it watches), so these tests share nothing with the ones that watch Nodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import eventually
from vgpu_operator import kubeapi
from vgpu_operator.controller.informer import ADDED, DELETED, MODIFIED, Change, Informer
from vgpu_operator.kubeapi import MERGE_PATCH, Gone, WatchOptions, reflector, request
from vgpu_operator.kubeapi import watch as kwatch

Events = list[tuple[str, str, str | None, str | None]]  # type, name, value, previous value


def value(obj: Mapping[str, Any]) -> str | None:
    data = obj.get("data") or {}
    return data.get("v")


def path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    return f"{base}/{name}" if name else base


async def create(api: client.ApiClient, namespace: str, name: str, v: str) -> None:
    body = {"metadata": {"name": name, "labels": {"t": "informer"}}, "data": {"v": v}}
    await request(api, "POST", path(namespace), body=body)


async def change(api: client.ApiClient, namespace: str, name: str, v: str) -> None:
    body = {"data": {"v": v}}
    await request(api, "PATCH", path(namespace, name), body=body, content_type=MERGE_PATCH)


async def delete(api: client.ApiClient, namespace: str, name: str) -> None:
    await request(api, "DELETE", path(namespace, name))


class Watched:
    """An informer on one namespace's ConfigMaps, recording what it delivers (of ours only:
    kube-root-ca.crt may come and go)."""

    def __init__(self, api: client.ApiClient, namespace: str, **options: Any) -> None:
        self.seen: Events = []
        opts = WatchOptions(kind="configmaps", **options)
        self.informer = Informer(api, "configmaps", path(namespace), value, self.record, opts)
        self.task: asyncio.Task[None] | None = None

    async def record(self, c: Change[str | None]) -> None:
        if c.name.startswith("cm-"):
            self.seen.append((c.type, c.name, c.item, c.previous))
        if c.item == "poison":
            raise RuntimeError("a callback that fails")

    async def start(self) -> Watched:
        self.task = asyncio.create_task(self.informer.run())
        await asyncio.wait_for(self.informer.synced.wait(), 30)
        return self

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


@pytest.fixture
async def watched(api: client.ApiClient, namespace: str) -> AsyncIterator[Callable[..., Watched]]:
    made: list[Watched] = []

    def make(**options: Any) -> Watched:
        made.append(Watched(api, namespace, **options))
        return made[-1]

    yield make
    for w in made:
        await w.stop()


def has(seen: Events, *event: Any) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return tuple(event) in seen

    check.__name__ = f"delivered {event}"
    return check


async def test_lists_then_watches_every_change_in_order(
    api: client.ApiClient, namespace: str, watched: Callable[..., Watched]
) -> None:
    for i in range(3):
        await create(api, namespace, f"cm-{i}", str(i))
    w = await watched(page_size=2).start()  # the listing takes two pages
    inf, seen = w.informer, w.seen
    assert sorted(seen) == [(ADDED, f"cm-{i}", str(i), None) for i in range(3)]
    assert {k: v for k, v in inf.items.items() if k.startswith("cm-")} == {
        "cm-0": "0",
        "cm-1": "1",
        "cm-2": "2",
    }

    await create(api, namespace, "cm-new", "a")
    await change(api, namespace, "cm-new", "b")
    await delete(api, namespace, "cm-0")
    await eventually(has(seen, DELETED, "cm-0", "0", "0"), timeout=20, interval=0.1)
    assert seen[3:] == [
        (ADDED, "cm-new", "a", None),
        (MODIFIED, "cm-new", "b", "a"),  # the callback gets what was held before
        (DELETED, "cm-0", "0", "0"),
    ]
    assert "cm-0" not in inf.items and inf.items["cm-new"] == "b"
    assert inf.lists == 1


async def test_resumes_where_the_apiserver_ended_the_watch_without_listing_again(
    api: client.ApiClient, namespace: str, watched: Callable[..., Watched]
) -> None:
    # The apiserver ends each watch after 1 to 2 s (randomized as client-go does).
    w = await watched(min_watch_seconds=1).start()
    inf, seen = w.informer, w.seen
    for i in range(4):
        await create(api, namespace, f"cm-{i}", str(i))
        await asyncio.sleep(0.7)  # spread over several watches
    await eventually(has(seen, ADDED, "cm-3", "3", None), timeout=20, interval=0.1)
    assert [name for _, name, _, _ in seen] == [f"cm-{i}" for i in range(4)]  # each once
    assert inf.lists == 1


async def test_lists_again_when_its_version_is_gone_and_delivers_what_it_missed(
    api: client.ApiClient, namespace: str, watched: Callable[..., Watched], monkeypatch: Any
) -> None:
    """The apiserver answers 410 when the version a watch resumes from has left its history.
    A fresh local apiserver's watch cache still holds its whole history (it serves even
    resourceVersion=1), so the 410 itself is the one thing simulated here: the first watch
    after the gap raises what `kubeapi.list_watch` raises on a 410 ERROR event (tests/unit/
    kubeapi/test_watch.py checks that mapping on the wire); the listing and the rest are real."""
    await create(api, namespace, "cm-kept", "1")
    await create(api, namespace, "cm-removed", "1")
    w = await watched().start()
    inf, seen = w.informer, w.seen
    restarts = kwatch.WATCH_RESTARTS.labels(kind="configmaps", reason="gone")
    gone_before = restarts._value.get()
    await w.stop()  # what happens while the informer cannot watch: a change and a deletion
    await change(api, namespace, "cm-kept", "2")
    await delete(api, namespace, "cm-removed")
    real_watch = reflector._watch_once
    calls: list[str] = []

    def gone_once(api_: Any, path_: str, options: Any, version: str) -> Any:
        calls.append(version)
        if len(calls) == 1:
            raise Gone(410, "too old resource version")
        return real_watch(api_, path_, options, version)

    # The iterator resumes from the informer's last version: start it from there.
    monkeypatch.setattr(reflector, "_watch_once", gone_once)
    since = inf.resource_version

    async def resume() -> None:
        async for update in kubeapi.list_watch(api, path(namespace), inf.options, since=since):
            if isinstance(update, kubeapi.Listing):
                await inf._listed(update)
            else:
                await inf._event(update)

    task = asyncio.create_task(resume())
    try:
        await eventually(has(seen, DELETED, "cm-removed", "1", "1"), timeout=20, interval=0.1)
        await eventually(has(seen, MODIFIED, "cm-kept", "2", "1"), timeout=20, interval=0.1)
        assert inf.lists == 2 and len(calls) == 2 and calls[1] != calls[0]  # from the listing
        assert restarts._value.get() == gone_before + 1
        await create(api, namespace, "cm-after", "x")  # and it watches again afterwards
        await eventually(has(seen, ADDED, "cm-after", "x", None), timeout=20, interval=0.1)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_failing_callback_does_not_stop_the_watch(
    api: client.ApiClient, namespace: str, watched: Callable[..., Watched]
) -> None:
    w = await watched().start()
    inf, seen = w.informer, w.seen
    await create(api, namespace, "cm-bad", "poison")
    await create(api, namespace, "cm-good", "fine")
    await eventually(has(seen, ADDED, "cm-good", "fine", None), timeout=20, interval=0.1)
    assert (ADDED, "cm-bad", "poison", None) in seen
    assert inf.lists == 1

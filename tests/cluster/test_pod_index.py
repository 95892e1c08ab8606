"""The pod index against the real apiserver: it follows GPU pods created, bound, finished and
deleted (a finished pod leaves the field selector and comes as DELETED), keeps no other pod,
and survives the apiserver ending its watch and a 410."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory, eventually
from vgpu_operator import kubeapi
from vgpu_operator.controller.informer import ADDED, DELETED, MODIFIED, Change
from vgpu_operator.controller.pods import PodIndex
from vgpu_operator.core.rollout.gpu_pods import gpu_resources
from vgpu_operator.kubeapi import Gone, WatchOptions, reflector
from vgpu_operator.models.config import OperatorConfig

Seen = list[tuple[str, str]]  # (type, namespace/name)


def pods_path(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")


def manifest(name: str, limits: dict[str, str], node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "volcano",  # none runs here: an unbound pod stays Pending
        "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}],
        "tolerations": [{"operator": "Exists"}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


GPU = {"nvidia.com/gpu": "1"}
CPU = {"cpu": "100m"}


class Followed:
    """A pod index of the whole cluster, recording the changes of one namespace's pods."""

    def __init__(self, api: client.ApiClient, namespace: str, **options: Any) -> None:
        self.namespace = namespace
        self.seen: Seen = []
        self.index = PodIndex(
            api, gpu_resources(OperatorConfig()), self.record, WatchOptions(**options)
        )
        self.task: asyncio.Task[None] | None = None

    async def record(self, change: Change[dict[str, Any]]) -> None:
        if change.name.startswith(f"{self.namespace}/"):
            self.seen.append((change.type, change.name.split("/", 1)[1]))

    async def start(self) -> Followed:
        self.task = asyncio.create_task(self.index.run())
        await asyncio.wait_for(self.index.synced.wait(), 30)
        return self

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    def held(self) -> set[str]:
        prefix = f"{self.namespace}/"
        return {k.split("/", 1)[1] for k in self.index.informer.items if k.startswith(prefix)}

    def on(self, node: str) -> set[str]:
        return {p["metadata"]["name"] for p in self.index.pods_on(node)}

    def until(self, what: str, check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
        async def done() -> bool:
            return check()

        done.__name__ = what
        return done


@pytest.fixture
async def followed(api: client.ApiClient, namespace: str) -> AsyncIterator[Callable[..., Followed]]:
    made: list[Followed] = []

    def make(**options: Any) -> Followed:
        made.append(Followed(api, namespace, **options))
        return made[-1]

    yield make
    for f in made:
        await f.stop()


async def create(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> None:
    await kubeapi.request(api, "POST", pods_path(namespace), body=body, field_manager=None)


async def phase(api: client.ApiClient, namespace: str, name: str) -> str:
    pod = await kubeapi.request(api, "GET", pods_path(namespace, name))
    return str((pod.get("status") or {}).get("phase"))


async def test_it_follows_gpu_pods_created_bound_finished_and_deleted(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    followed: Callable[..., Followed],
) -> None:
    [node] = await make_nodes("A100-SXM4-80GB", 1, prefix="pix")
    await create(api, namespace, manifest("before", GPU, node=node))  # in the first listing
    f = await followed().start()
    assert f.held() == {"before"} and f.on(node) == {"before"}

    await create(api, namespace, manifest("web", CPU, node=node))  # never kept
    await create(api, namespace, manifest("train", GPU))
    await eventually(f.until("train held, unbound", lambda: "train" in f.held()), timeout=20)
    assert "train" in {p["metadata"]["name"] for p in f.index.unbound()}

    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "train"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    await kubeapi.request(
        api, "POST", pods_path(namespace, "train") + "/binding", body=binding, field_manager=None
    )
    await eventually(f.until("train on the node", lambda: "train" in f.on(node)), timeout=20)

    async def running() -> bool:
        return await phase(api, namespace, "train") == "Running"  # kwok runs it

    await eventually(running, timeout=30)
    # It finishes: the pod stays in the API, Succeeded, and leaves the index as DELETED.
    await kubeapi.request(
        api,
        "PATCH",
        pods_path(namespace, "train") + "/status",
        body={"status": {"phase": "Succeeded"}},
        content_type=kubeapi.MERGE_PATCH,
        field_manager=None,
    )
    await eventually(f.until("train gone", lambda: "train" not in f.held()), timeout=20)
    assert await phase(api, namespace, "train") == "Succeeded"

    await kubeapi.request(api, "DELETE", pods_path(namespace, "before"))
    await eventually(f.until("before gone", lambda: f.held() == set()), timeout=60)
    assert f.on(node) == set() and node not in f.index.nodes()
    assert f.seen[0] == (ADDED, "before") and (ADDED, "train") in f.seen
    assert [t for t, n in f.seen if n == "train"][-2:] == [MODIFIED, DELETED]
    assert [t for t, n in f.seen if n == "before"][-1] == DELETED
    assert not [n for _, n in f.seen if n == "web"]
    assert f.index.informer.lists == 1


async def test_it_resumes_when_the_apiserver_ends_its_watch(
    api: client.ApiClient, namespace: str, followed: Callable[..., Followed]
) -> None:
    f = await followed(min_watch_seconds=1).start()  # each watch ends after 1 to 2 s
    for i in range(4):
        await create(api, namespace, manifest(f"gpu-{i}", GPU))
        await asyncio.sleep(0.7)  # spread over several watches
    want = {f"gpu-{i}" for i in range(4)}
    await eventually(f.until("all four held", lambda: f.held() == want), timeout=20)
    assert [name for _, name in f.seen] == sorted(want)  # each delivered once
    assert f.index.informer.lists == 1


async def test_it_lists_again_on_410_and_delivers_what_it_missed(
    api: client.ApiClient,
    namespace: str,
    followed: Callable[..., Followed],
    monkeypatch: Any,
) -> None:
    """The 410 itself is simulated as in test_informer.py (a fresh apiserver's watch cache still
    holds its whole history); the listing, the events and the index are real."""
    await create(api, namespace, manifest("kept", GPU))
    await create(api, namespace, manifest("removed", GPU))
    f = await followed().start()
    inf = f.index.informer
    await f.stop()  # while it cannot watch: one pod goes, one comes, one finishes
    await kubeapi.request(api, "DELETE", pods_path(namespace, "removed"))
    await create(api, namespace, manifest("new", GPU))
    await kubeapi.request(
        api,
        "PATCH",
        pods_path(namespace, "kept") + "/status",
        body={"status": {"phase": "Failed"}},
        content_type=kubeapi.MERGE_PATCH,
        field_manager=None,
    )
    real_watch = reflector._watch_once
    calls: list[str] = []

    def gone_once(api_: Any, path_: str, options: Any, version: str) -> Any:
        calls.append(version)
        if len(calls) == 1:
            raise Gone(410, "too old resource version")
        return real_watch(api_, path_, options, version)

    monkeypatch.setattr(reflector, "_watch_once", gone_once)
    since = inf.resource_version

    async def resume() -> None:
        async for update in kubeapi.list_watch(api, inf.path, inf.options, since=since):
            if isinstance(update, kubeapi.Listing):
                await inf._listed(update)
            else:
                await inf._event(update)

    task = asyncio.create_task(resume())
    try:
        await eventually(f.until("relisted", lambda: f.held() == {"new"}), timeout=30)
        assert (DELETED, "removed") in f.seen and (DELETED, "kept") in f.seen
        assert (ADDED, "new") in f.seen
        assert inf.lists == 2 and len(calls) == 2 and calls[1] != calls[0]
        await create(api, namespace, manifest("after", GPU))  # and it watches again
        await eventually(f.until("after held", lambda: "after" in f.held()), timeout=20)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

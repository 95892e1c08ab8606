"""Helpers for the safe-transition cluster tests: GPU pods bound to simulated nodes (kwok runs them,
the Eviction API and PodDisruptionBudgets are the apiserver's and the controller manager's), and a
watcher that records every node's transition as the apiserver shows it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.helpers import eventually
from vgpu_operator import contract
from vgpu_operator.kubeapi import (
    MERGE_PATCH,
    Conflict,
    Listing,
    NotFound,
    WatchOptions,
    list_watch,
    node_path,
    request,
)
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.rollout import NodeRollout

ENDED = ("Succeeded", "Failed")
DELAY_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"  # devtools' kwok-stages-delayed.yaml


def pool_spec(pool: str, mode: str = "hami-core", **rollout: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeSelector": {"matchLabels": {"test/pool": pool}}, "mode": mode}
    if mode == "hami-core":
        spec["hamiCore"] = {"deviceSplitCount": 10}
    if rollout:
        spec["rollout"] = rollout
    return spec


async def gpu_pod(
    api: client.ApiClient,
    namespace: str,
    name: str,
    node: str,
    *,
    labels: dict[str, str] | None = None,
    complete_after: str | None = None,
    limits: Mapping[str, str] | None = None,
    held: bool = False,
) -> str:
    """A pod holding a GPU (`limits`, default one `nvidia.com/gpu`), bound to `node` (what a
    scheduler would have done); kwok runs it. `held`: it carries the test's finalizer (`hold`)."""
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if complete_after is not None:
        meta["annotations"] = {DELAY_ANNOTATION: complete_after}
    if held:
        meta["finalizers"] = [HOLD_FINALIZER]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "train",
                    "image": "registry.example/train:1",
                    "resources": {"limits": dict(limits or {"nvidia.com/gpu": "1"})},
                }
            ],
        },
    }
    path = f"/api/v1/namespaces/{namespace}/pods"
    await request(api, "POST", path, body=body, field_manager=None)
    return f"{namespace}/{name}"


async def pod(api: client.ApiClient, key: str) -> dict[str, Any] | None:
    namespace, _, name = key.partition("/")
    try:
        return await request(api, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    except NotFound:
        return None


async def wait_running(api: client.ApiClient, keys: Iterable[str]) -> None:
    async def running() -> bool:
        for key in keys:
            obj = await pod(api, key)
            if obj is None or (obj.get("status") or {}).get("phase") != "Running":
                return False
        return True

    await eventually(running, timeout=60)


def rollout_of(obj: dict[str, Any]) -> NodeRollout | None:
    annotations = obj["metadata"].get("annotations") or {}
    return NodeRollout.from_annotation(annotations.get(contract.ANN_ROLLOUT))


def config_of(obj: dict[str, Any]) -> NodeConfig | None:
    annotations = obj["metadata"].get("annotations") or {}
    return NodeConfig.from_annotation(annotations.get(contract.ANN_CONFIG))


async def began_with_drain(api: client.ApiClient, node: str) -> bool:
    """The node's transition began with a cordon and a drain, as its Event says (a polling
    watcher on a loaded machine may first see it in a later phase)."""
    selector = f"involvedObject.kind=Node,involvedObject.name={node},reason=TransitionStarted"
    events = await request(api, "GET", "/api/v1/events", query={"fieldSelector": selector})
    return any("cordoned, draining" in e.get("message", "") for e in events.get("items") or [])


def cordoned(obj: dict[str, Any]) -> bool:
    return (obj.get("spec") or {}).get("unschedulable") is True


@dataclass
class Watcher:
    """Polls the pool's nodes (then their pods, read after them) every `interval` seconds."""

    api: client.ApiClient
    nodes: list[str]
    selector: str  # a label selector listing the nodes
    pods_of: dict[str, list[str]] = field(default_factory=dict)  # node -> pod keys
    interval: float = 0.2
    most: int = 0  # the most nodes seen in transition at once
    released_with_pods: list[tuple[str, str]] = field(default_factory=list)
    released_at: dict[str, int] = field(default_factory=dict)  # node -> the sample it was seen
    samples: int = 0
    phases: dict[str, list[str]] = field(default_factory=dict)

    async def sample(self, released: str) -> None:
        # One LIST: every node as of one resourceVersion (GETs one by one could see a node
        # finish and the next start as if both were in transition).
        listed = await request(self.api, "GET", node_path(), query={"labelSelector": self.selector})
        objs = [o for o in listed.get("items", []) if o["metadata"]["name"] in self.nodes]
        busy = 0
        newly: list[str] = []
        for obj in objs:
            name = obj["metadata"]["name"]
            r = rollout_of(obj)
            if r is not None or cordoned(obj):
                busy += 1
            if r is not None:
                seen = self.phases.setdefault(name, [])
                if not seen or seen[-1] != r.phase:
                    seen.append(r.phase)
            config = config_of(obj)
            if config is not None and config.mode == released and name not in self.released_at:
                self.released_at[name] = self.samples
                newly.append(name)
        for name in newly:  # pods read after the node: one still running outlived the release
            for key in self.pods_of.get(name, []):
                obj = await pod(self.api, key)
                if obj is not None and (obj.get("status") or {}).get("phase") not in ENDED:
                    self.released_with_pods.append((name, key))
        self.most = max(self.most, busy)
        self.samples += 1

    @contextlib.asynccontextmanager
    async def running(self, released: str) -> AsyncIterator[Watcher]:
        async def loop() -> None:
            while True:
                await self.sample(released)
                await asyncio.sleep(self.interval)

        task = asyncio.create_task(loop())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


# A finalizer of the test's own: a pod carrying it stays Terminating after its deletion (an
# eviction, its DaemonSet taking it off the node) until the test lets it go, as a pod whose
# container takes long to stop does. The rollout reads such a pod as still on the node.
HOLD_FINALIZER = "test.vgpu.volcano.sh/hold"


async def hold(api: client.ApiClient, key: str) -> None:
    """Keep the pod `key` (namespace/name) until `let_go`."""
    await _edit_finalizers(api, key, lambda names: [*names, HOLD_FINALIZER], missing_ok=False)


async def let_go(api: client.ApiClient, key: str) -> None:
    """Take the test's finalizer off the pod: a pod already deleted then goes."""
    await _edit_finalizers(api, key, lambda names: [n for n in names if n != HOLD_FINALIZER])


async def _edit_finalizers(
    api: client.ApiClient,
    key: str,
    change: Callable[[list[str]], list[str]],
    *,
    missing_ok: bool = True,
) -> None:
    """One merge PATCH carrying the resourceVersion read (kwok writes the pod's status
    meanwhile: a conflict reads again)."""
    namespace, _, name = key.partition("/")
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    for _ in range(10):
        obj = await pod(api, key)
        if obj is None:
            assert missing_ok, f"{key} is gone"
            return
        meta = obj["metadata"]
        names = list(meta.get("finalizers") or [])
        wanted = change(names)
        if wanted == names:
            return
        body = {"metadata": {"finalizers": wanted, "resourceVersion": meta["resourceVersion"]}}
        try:
            await request(
                api, "PATCH", path, body=body, content_type=MERGE_PATCH, field_manager=None
            )
            return
        except Conflict:
            continue
        except NotFound:
            assert missing_ok, f"{key} is gone"
            return
    raise AssertionError(f"{key}: finalizers not written after 10 conflicts")


def in_transition(obj: Mapping[str, Any]) -> bool:
    annotations = obj["metadata"].get("annotations") or {}
    return contract.ANN_ROLLOUT in annotations or bool((obj.get("spec") or {}).get("unschedulable"))


@dataclass
class TransitionCount:
    """Every committed state of the selected nodes, from a WATCH (the apiserver sends each
    change in resourceVersion order, none skipped), so the most nodes in transition at once is
    exact: polling could miss a moment when one node's start landed before another's end."""

    api: client.ApiClient
    selector: str  # a label selector listing the nodes
    # what is counted (default: a node in transition, from its cordon or record to its end)
    counts: Callable[[Mapping[str, Any]], bool] = in_transition
    now: int = 0
    most: int = 0
    _busy: set[str] = field(default_factory=set)

    def _see(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        name = obj["metadata"]["name"]
        if not deleted and self.counts(obj):
            self._busy.add(name)
        else:
            self._busy.discard(name)
        self.now = len(self._busy)
        self.most = max(self.most, self.now)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[TransitionCount]:
        async with watching_nodes(self.api, self.selector, self._see, self._busy.clear):
            yield self


@contextlib.asynccontextmanager
async def watching_nodes(
    api: client.ApiClient,
    selector: str,
    see: Callable[[Mapping[str, Any], bool], None],
    relisted: Callable[[], None],
) -> AsyncIterator[None]:
    """Every committed state of the nodes `selector` lists, handed to `see(obj, deleted)` from
    a list-then-watch (`relisted()` before each listing is seen again), until the block ends;
    the block starts once the first listing has been seen."""
    options = WatchOptions(label_selector=selector, kind="test-nodes")
    listed = asyncio.Event()

    async def loop() -> None:
        async for update in list_watch(api, node_path(), options):
            if isinstance(update, Listing):
                relisted()
                for obj in update.items:
                    see(obj, False)
                listed.set()
            else:
                see(update.obj, update.type == "DELETED")

    task = asyncio.create_task(loop())
    try:
        await asyncio.wait_for(listed.wait(), timeout=30)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@dataclass
class GateWatch:
    """The rollout gate as the apiserver commits it, for the nodes `selector` lists and the pods
    placed on them with the test's finalizer (`place`, `placed`). Every release must go through
    the gate here.

    Nodes come from a watch (every committed state, in order): `most` is the exact most nodes in
    transition at once, and each release (the `vgpu.volcano.sh/config` annotation written with a
    new configuration; its removal is no release) is checked on the very state that carries it:
    the node cordoned with its transition record, and no pod placed on it that the test has not
    let go. Such a pod was still on the node when the release was committed: its finalizer
    keeps it until the test lets it go.

    Placed pods come from a second watch. When one is deleted (the drain's eviction) the test
    reads its node afresh, records a violation if the node was released meanwhile, and only
    then lets the pod go, so that the drain can end."""

    api: client.ApiClient
    selector: str  # a label selector listing the nodes
    namespace: str  # where the placed pods are
    most: int = 0  # the most nodes in transition at once
    now: int = 0
    releases: dict[str, list[str]] = field(default_factory=dict)  # node -> configs released
    violations: list[str] = field(default_factory=list)
    evicted: set[str] = field(default_factory=set)  # placed pods the drain deleted
    gone: set[str] = field(default_factory=set)  # placed pods that left the API
    _placed: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # pod -> node, config
    _let_go: set[str] = field(default_factory=set)
    _config: dict[str, str | None] = field(default_factory=dict)  # node -> its config text
    _busy: set[str] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def place(self, name: str, node: str, limits: Mapping[str, str], **options: Any) -> str:
        """A held GPU pod (`gpu_pod`) bound to `node`; returns its key."""
        key = await gpu_pod(
            self.api, self.namespace, name, node, limits=limits, held=True, **options
        )
        await self.placed(key, node)
        return key

    async def placed(self, key: str, node: str) -> None:
        """Follow the pod `key`, already on `node` and carrying the test's finalizer."""
        self._placed[key] = (node, await self._config_text(node))

    def placed_keys(self) -> set[str]:
        return set(self._placed)

    def moving(self) -> set[str]:
        """The nodes in transition, as the watch has them now."""
        return set(self._busy)

    async def until(self, check: Callable[[], bool], timeout: float = 120.0) -> None:
        """Until `check()` holds on the nodes' states as the watch has them."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not check():
            self._changed.clear()
            left = deadline - asyncio.get_running_loop().time()
            assert left > 0, f"not within {timeout}s: {check}"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    async def _config_text(self, node: str) -> str | None:
        obj = await request(self.api, "GET", node_path(node))
        return (obj["metadata"].get("annotations") or {}).get(contract.ANN_CONFIG) or None

    def _see_node(self, obj: Mapping[str, Any], deleted: bool) -> None:
        name = obj["metadata"]["name"]
        if not deleted and in_transition(obj):
            self._busy.add(name)
        else:
            self._busy.discard(name)
        self.now = len(self._busy)
        self.most = max(self.most, self.now)
        text = (obj["metadata"].get("annotations") or {}).get(contract.ANN_CONFIG) or None
        if not deleted:
            if name in self._config and text is not None and text != self._config[name]:
                self._released(name, obj, text)
            self._config[name] = text
        self._changed.set()

    def _released(self, node: str, obj: Mapping[str, Any], text: str) -> None:
        self.releases.setdefault(node, []).append(text)
        if not cordoned(dict(obj)) or rollout_of(dict(obj)) is None:
            self.violations.append(f"{node}: released without its cordon and transition record")
        for key, (on, _) in self._placed.items():
            if on == node and key not in self._let_go:
                self.violations.append(f"{node}: released while {key} was still on it")

    def _see_pod(self, obj: Mapping[str, Any], deleted: bool) -> None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if key not in self._placed:
            return
        if deleted:
            self.gone.add(key)
        if meta.get("deletionTimestamp") and key not in self.evicted:
            self.evicted.add(key)
            task = asyncio.create_task(self._let_go_after_check(key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _let_go_after_check(self, key: str) -> None:
        node, before = self._placed[key]
        try:
            now = await self._config_text(node)
            if now is not None and now != before:
                self.violations.append(f"{node}: released before {key} was gone")
            self._let_go.add(key)  # before the write: a release may follow it at once
            await let_go(self.api, key)
        except Exception as exc:  # reported with the test's assertions
            self.violations.append(f"{key}: letting it go failed: {exc!r}")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[GateWatch]:
        pods = asyncio.Event()

        async def follow_pods() -> None:
            path = f"/api/v1/namespaces/{self.namespace}/pods"
            async for update in list_watch(self.api, path, WatchOptions(kind="test-pods")):
                if isinstance(update, Listing):
                    for obj in update.items:
                        self._see_pod(obj, False)
                    pods.set()
                else:
                    self._see_pod(update.obj, update.type == "DELETED")

        follower = asyncio.create_task(follow_pods())
        try:
            await asyncio.wait_for(pods.wait(), timeout=30)
            async with watching_nodes(self.api, self.selector, self._see_node, self._busy.clear):
                yield self
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
            await asyncio.gather(*self._tasks, return_exceptions=True)
            for key in set(self._placed) - self._let_go:  # the namespace can then go
                self._let_go.add(key)
                await let_go(self.api, key)

"""The pod index without an apiserver: listings and watch events handed to its informer as
`kubeapi.list_watch` yields them (the real list-then-watch: tests/cluster/test_pod_index.py);
and the unschedulable pod warnings it feeds."""

from __future__ import annotations

from typing import Any

from tests.kit.volcano_fixtures import healthy
from vgpu_operator import kubeapi
from vgpu_operator.controller import metrics
from vgpu_operator.controller.informer import ADDED, DELETED, MODIFIED, Change
from vgpu_operator.controller.pods import PodIndex
from vgpu_operator.controller.unschedulable import UnschedulableWarnings
from vgpu_operator.core.rollout.gpu_pods import gpu_resources
from vgpu_operator.models.config import OperatorConfig

Obj = dict[str, Any]


def pod(
    name: str,
    rv: str,
    *,
    namespace: str = "team-a",
    node: str | None = None,
    limits: dict[str, str] | None = None,
    scheduler: str = "volcano",
) -> Obj:
    spec: Obj = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "resources": {"limits": limits or {}}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": rv,
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


GPU = {"volcano.sh/vgpu-number": "1"}


class Recorded:
    def __init__(self) -> None:
        self.changes: list[tuple[str, str]] = []

    async def __call__(self, change: Change[Obj]) -> None:
        self.changes.append((change.type, change.name))


def index() -> tuple[PodIndex, Recorded]:
    seen = Recorded()
    return PodIndex(None, gpu_resources(OperatorConfig()), seen), seen


async def listed(idx: PodIndex, *pods: Obj, rv: str = "100") -> None:
    """A listing, reduced page by page as `kubeapi.list_all` does with the index's options."""
    reduce = idx.informer.options.reduce
    assert reduce is not None
    items = [r for r in map(reduce, pods) if r is not None]
    await idx.informer._listed(kubeapi.Listing(items, rv))


async def event(idx: PodIndex, kind: str, obj: Obj) -> None:
    await idx.informer._event(kubeapi.WatchEvent(kind, obj))


def names(pods: list[Obj]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


async def test_it_keeps_gpu_pods_only_keyed_by_namespace_and_name_and_per_node() -> None:
    idx, seen = index()
    await listed(
        idx,
        pod("train", "1", node="n1", limits=GPU),
        pod("train", "2", namespace="team-b", node="n2", limits={"nvidia.com/gpu": "1"}),
        pod("web", "3", node="n1", limits={"cpu": "1"}),
        pod("queued", "4", limits={"nvidia.com/mig-1g.10gb": "1"}),
    )
    assert sorted(idx.informer.items) == ["team-a/queued", "team-a/train", "team-b/train"]
    assert names(idx.pods_on("n1")) == ["train"] and names(idx.pods_on("n2")) == ["train"]
    assert names(idx.unbound()) == ["queued"] and idx.nodes() == {"n1", "n2"}
    assert idx.pods_on("") == [] and idx.pods_on("n9") == []
    assert sorted(seen.changes) == [
        (ADDED, "team-a/queued"),
        (ADDED, "team-a/train"),
        (ADDED, "team-b/train"),
    ]
    assert idx.synced.is_set() and len(idx) == 3
    # what is kept is compact: no spec beyond what is read
    kept = idx.get("team-a/train")
    assert kept is not None and set(kept["spec"]) == {
        "nodeName",
        "schedulerName",
        "containers",
        "initContainers",
    }


async def test_it_follows_a_pod_from_pending_to_bound_to_finished() -> None:
    idx, seen = index()
    await listed(idx)
    await event(idx, ADDED, pod("web", "5", limits={"cpu": "1"}))  # not kept, not delivered
    await event(idx, ADDED, pod("train", "6", limits=GPU))
    assert names(idx.unbound()) == ["train"]
    await event(idx, MODIFIED, pod("train", "7", node="n1", limits=GPU))
    assert idx.unbound() == [] and names(idx.pods_on("n1")) == ["train"]
    # finished: it leaves the field selector, and the watch says DELETED (previous content)
    await event(idx, DELETED, pod("train", "8", node="n1", limits=GPU))
    assert idx.pods_on("n1") == [] and idx.nodes() == set() and len(idx) == 0
    await event(idx, DELETED, pod("web", "9", limits={"cpu": "1"}))  # never kept: nothing
    assert seen.changes == [
        (ADDED, "team-a/train"),
        (MODIFIED, "team-a/train"),
        (DELETED, "team-a/train"),
    ]


async def test_a_listing_again_delivers_what_changed_while_not_watching() -> None:
    idx, seen = index()
    await listed(idx, pod("a", "1", node="n1", limits=GPU), pod("b", "2", node="n1", limits=GPU))
    seen.changes.clear()
    await listed(
        idx,
        pod("a", "1", node="n1", limits=GPU),  # unchanged: not delivered
        pod("c", "5", node="n2", limits=GPU),  # new
        rv="200",
    )
    assert seen.changes == [(DELETED, "team-a/b"), (ADDED, "team-a/c")]
    assert names(idx.pods_on("n1")) == ["a"] and names(idx.pods_on("n2")) == ["c"]
    assert idx.informer.resource_version == "200" and idx.informer.lists == 2


async def test_a_kept_object_that_no_longer_parses_is_delivered_as_deleted() -> None:
    """The generic informer path: `parse` returning None for something held."""
    idx, seen = index()
    await listed(idx, pod("a", "1", node="n1", limits=GPU))
    await event(idx, MODIFIED, pod("a", "2", node="n1", limits={"cpu": "1"}))
    assert len(idx) == 0 and idx.pods_on("n1") == []
    assert seen.changes[-1] == (DELETED, "team-a/a")


async def test_the_watch_asks_the_apiserver_for_unfinished_pods_only() -> None:
    idx, _ = index()
    opts = idx.informer.options
    assert idx.informer.path == "/api/v1/pods"
    assert opts.field_selector == "status.phase!=Succeeded,status.phase!=Failed"
    assert opts.kind == "pods" and opts.reduce is not None


# --- the warnings ---------------------------------------------------------------------------


class Posted:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def __call__(self, ref: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((ref["metadata"]["name"], type_, reason, ref["metadata"]["uid"]))


def warnings(fresh: bool = True) -> tuple[UnschedulableWarnings, Posted, list[bool]]:
    posted = Posted()
    state = [fresh]
    return UnschedulableWarnings(posted, fresh=lambda: state[0]), posted, state


def change(kind: str, obj: Obj) -> Change[Obj]:
    return Change(kind, f"team-a/{obj['metadata']['name']}", obj, None, obj)


def counted(cause: str) -> float:
    return float(metrics.UNSCHEDULABLE_WARNINGS.labels(cause=cause)._value.get())


async def test_one_event_per_pod_and_cause_not_per_pass() -> None:
    w, posted, _ = warnings()
    too_many = pod("big", "1", limits={"volcano.sh/vgpu-number": "9"}, scheduler="other")
    before = counted("not-volcano")
    await w.pod_changed(change(ADDED, too_many))  # no snapshot yet: nothing to judge with
    assert posted.events == []
    for _ in range(3):  # three passes
        w.snapshot_taken(healthy(), [too_many])
    await w.pod_changed(change(MODIFIED, too_many))
    assert posted.events == [
        ("big", "Warning", "VGPUNotScheduledByVolcano", "uid-team-a-big"),
        ("big", "Warning", "VGPUNumberTooLarge", "uid-team-a-big"),
    ]
    assert counted("not-volcano") == before + 1
    fits = pod("small", "2", limits=GPU)
    await w.pod_changed(change(ADDED, fits))
    w.snapshot_taken(healthy(), [too_many, fits])
    assert len(posted.events) == 2  # a pod that fits gets none


async def test_a_pod_is_checked_on_its_event_only_while_the_snapshot_holds() -> None:
    w, posted, fresh = warnings(fresh=False)
    w.snapshot_taken(healthy(), [])
    p = pod("big", "1", limits={"volcano.sh/vgpu-number": "9"})
    await w.pod_changed(change(ADDED, p))
    assert posted.events == []  # a pass is due: it checks the pod with what it reads
    w.snapshot_taken(healthy(), [p])
    assert [e[2] for e in posted.events] == ["VGPUNumberTooLarge"]
    fresh[0] = True
    q = pod("bigger", "2", limits={"volcano.sh/vgpu-number": "10"})
    await w.pod_changed(change(ADDED, q))
    assert [e[0] for e in posted.events] == ["big", "bigger"]


async def test_a_pod_bound_or_gone_is_forgotten() -> None:
    w, posted, _ = warnings()
    p = pod("big", "1", limits={"volcano.sh/vgpu-number": "9"})
    w.snapshot_taken(healthy(), [p])
    assert len(posted.events) == 1
    await w.pod_changed(change(DELETED, p))
    assert w._posted == {}
    # the same name again is another pod (another uid): it gets its own Event
    again = pod("big", "3", limits={"volcano.sh/vgpu-number": "9"})
    again["metadata"]["uid"] = "uid-2"
    await w.pod_changed(change(ADDED, again))
    assert [e[3] for e in posted.events] == ["uid-team-a-big", "uid-2"]
    await w.pod_changed(change(MODIFIED, {**again, "spec": {**again["spec"], "nodeName": "n"}}))
    assert w._posted == {}

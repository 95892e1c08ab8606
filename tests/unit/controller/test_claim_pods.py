"""The never-fit warnings of claim pods, wired without an apiserver: the claim index keeps the
requests of the claims not yet allocated (and drops them once allocated or gone), says when one
came, and the warnings check the pending pods holding it against the last pass's DRA offer: one
Event per pod and cause, none for a pod whose claim fits or is not read yet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.kit.drakit import stored_device_classes
from tests.kit.volcano_fixtures import gpu_node
from vgpu_devcluster import dra_driver
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator import kubeapi
from vgpu_operator.controller.claims import ClaimIndex
from vgpu_operator.controller.informer import ADDED, DELETED, MODIFIED, Change
from vgpu_operator.controller.pods import PodIndex
from vgpu_operator.controller.snapshot import compact_claim
from vgpu_operator.controller.unschedulable import UnschedulableWarnings
from vgpu_operator.core.dra.observed import DraApi
from vgpu_operator.core.rollout.gpu_pods import gpu_resources
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig, load_config
from vgpu_operator.models.node import NodeConfig

Obj = dict[str, Any]


def claim(name: str, rv: str, device_class: str, *, allocated: bool = False) -> Obj:
    """A ResourceClaim made from a pod's template, as resource.k8s.io/v1 serves it
    (kubernetes/api@v0.35.4:resource/v1/types.go)."""
    results = [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "a30-0", "device": "gpu-0"}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a", "resourceVersion": rv},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}
        },
        "status": {"allocation": {"devices": {"results": results}}} if allocated else {},
    }


def claim_pod(name: str, generated: str | None) -> Obj:
    """A pending pod of a ResourceClaimTemplate; `generated`: its claim, once made."""
    status: Obj = {"phase": "Pending"}
    if generated:
        status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": generated}]
    return {
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": {
            "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
        },
        "status": status,
    }


def snapshot(tmp_path: Path) -> ClusterSnapshot:
    """Two A30 nodes in a dra pool, whole GPUs published."""
    config = NodeConfig(mode="dra", policy="pool", generation=1)
    slices = []
    for node in ("a30-0", "a30-1"):
        state = fs.init_state(tmp_path / f"{node}.json", "A30", 2, node=node)
        slices += dra_driver.resource_slices(node, state, node_uid=f"uid-{node}")
    return ClusterSnapshot(
        config=load_config("dra: {}\n"),
        nodes=[gpu_node(n, "A30", 2, released=config, tainted=False) for n in ("a30-0", "a30-1")],
        dra_api=DraApi(
            served=("resource.k8s.io/v1",),
            device_classes=tuple(stored_device_classes()),
            resource_slices=tuple(slices),
        ),
    )


class Posted:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []  # (pod, reason)

    def __call__(self, ref: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((ref["metadata"]["name"], reason))


async def test_the_claim_index_keeps_the_requests_of_unallocated_claims_only() -> None:
    heard: list[str] = []

    async def on_ask(key: str) -> None:
        heard.append(key)

    idx = ClaimIndex(None, on_ask=on_ask)
    reduce = idx.informer.options.reduce
    assert reduce is not None
    listed = [
        reduce(claim("a", "1", "mig.nvidia.com")),
        reduce(claim("b", "2", "x", allocated=True)),
    ]
    await idx.informer._listed(kubeapi.Listing([o for o in listed if o is not None], "10"))
    mig = {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}
    }
    assert dict(idx.asks()) == {"team-a/a": mig}
    assert heard == ["team-a/a"]
    drivers = idx.drivers()
    assert drivers is not None and dict(drivers) == {
        "team-a/a": frozenset(),
        "team-a/b": frozenset({"gpu.nvidia.com"}),
    }
    # the same requests again (a status write) ask for nothing; allocated, they are dropped
    await idx.informer._event(kubeapi.WatchEvent(MODIFIED, {**claim("a", "3", "mig.nvidia.com")}))
    assert heard == ["team-a/a"]
    await idx.informer._event(
        kubeapi.WatchEvent(MODIFIED, claim("a", "4", "mig.nvidia.com", allocated=True))
    )
    assert dict(idx.asks()) == {}
    await idx.informer._event(kubeapi.WatchEvent(ADDED, claim("c", "5", "gpu.nvidia.com")))
    await idx.informer._event(kubeapi.WatchEvent(DELETED, claim("c", "6", "gpu.nvidia.com")))
    assert dict(idx.asks()) == {} and heard == ["team-a/a", "team-a/c"]
    # what a listing page keeps of an unallocated claim: its identity, no driver, its requests
    assert compact_claim(claim("d", "7", "gpu.nvidia.com")) == {
        "metadata": {"name": "d", "namespace": "team-a", "resourceVersion": "7"},
        "status": {"allocation": {"devices": {"results": []}}},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
    }


async def test_a_pending_claim_pod_is_warned_once_its_claim_is_read(tmp_path: Path) -> None:
    claims = ClaimIndex(None)
    posted = Posted()
    warnings = UnschedulableWarnings(posted, claims=claims.asks)
    never = claim_pod("never", "never-gpu")
    fits = claim_pod("fits", "fits-gpu")
    early = claim_pod("early", None)  # its claim not made yet
    warnings.snapshot_taken(snapshot(tmp_path), [never, fits, early])
    assert posted.events == []  # no claim read yet: nothing is certain
    for obj in (
        claim("never-gpu", "1", "mig.nvidia.com"),
        claim("fits-gpu", "2", "gpu.nvidia.com"),
    ):
        await claims.informer._event(kubeapi.WatchEvent(ADDED, obj))
    for key in ("team-a/never-gpu", "team-a/fits-gpu"):
        await warnings.claim_changed(key, [never, fits, early])
    assert posted.events == [("never", "NoMatchingDRADevice")]
    # the pod's own event and the next pass post nothing more
    await warnings.pod_changed(Change(MODIFIED, "team-a/never", never, never, never))
    warnings.snapshot_taken(snapshot(tmp_path), [never, fits, early])
    assert posted.events == [("never", "NoMatchingDRADevice")]
    # a claim asking a class that does not exist
    await claims.informer._event(
        kubeapi.WatchEvent(ADDED, claim("early-gpu", "3", "tpu.example.com"))
    )
    named = claim_pod("early", "early-gpu")
    await warnings.pod_changed(Change(MODIFIED, "team-a/early", named, early, named))
    assert posted.events[-1] == ("early", "DeviceClassMissing")


async def test_the_pod_index_keeps_pending_claim_pods_with_what_the_check_reads() -> None:
    """A pod holding a claim is kept from its creation on, before its claim is made (the drain
    counts it once bound), with its claims and their names; a pod holding neither a GPU resource
    nor a claim is not kept."""
    pods = PodIndex(None, gpu_resources(OperatorConfig()))
    reduce = pods.informer.options.reduce
    assert reduce is not None
    plain = {
        "metadata": {"name": "web", "namespace": "team-a", "resourceVersion": "1"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]},
        "status": {"phase": "Pending"},
    }
    early = claim_pod("early", None)
    early["metadata"]["resourceVersion"] = "2"
    listed = [o for o in map(reduce, [plain, early]) if o is not None]
    await pods.informer._listed(kubeapi.Listing(listed, "10"))
    [kept] = pods.unbound()
    assert kept["metadata"]["name"] == "early"
    assert kept["spec"]["resourceClaims"] == early["spec"]["resourceClaims"]
    named = claim_pod("early", "early-gpu")
    named["metadata"]["resourceVersion"] = "3"
    await pods.informer._event(kubeapi.WatchEvent(MODIFIED, named))
    [kept] = pods.unbound()
    assert kept["status"]["resourceClaimStatuses"] == [
        {"name": "gpu", "resourceClaimName": "early-gpu"}
    ]

"""Which of a node's pods the drain sees as GPU consumers, without an apiserver: the claim index
(controller.claims) says which driver allocated each ResourceClaim, the pod index
(controller.pods) judges a node's pods against it when they are read, and takes the names
NVIDIA's device plugin's configs rename resources to from each configuration pass, listing
the pods again when a name widens what counts."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from vgpu_operator import kubeapi
from vgpu_operator.controller.claims import ClaimIndex
from vgpu_operator.controller.informer import MODIFIED
from vgpu_operator.controller.pods import PodIndex
from vgpu_operator.controller.snapshot import compact_claim
from vgpu_operator.core.rollout.gpu_pods import gpu_resources
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig, load_config

Obj = dict[str, Any]


def pod(name: str, rv: str, *, limits: dict[str, str] | None = None, claim: str = "") -> Obj:
    """A pod on node-1; `claim`: it holds that ResourceClaim, made from a template."""
    spec: Obj = {
        "nodeName": "node-1",
        "containers": [{"name": "main", "resources": {"limits": limits or {"cpu": "1"}}}],
    }
    status: Obj = {"phase": "Running"}
    if claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim}]
    meta = {"name": name, "namespace": "team-a", "resourceVersion": rv}
    return {"metadata": meta, "spec": spec, "status": status}


def claim(name: str, rv: str, *drivers: str) -> Obj:
    """A ResourceClaim as resource.k8s.io/v1 serves it (kubernetes/api@v0.34.0:
    resource/v1/types.go), with managedFields and a spec the index does not keep."""
    results = [
        {"request": "gpu", "driver": d, "pool": "node-1", "device": "gpu-0"} for d in drivers
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "resourceVersion": rv,
            "managedFields": [{"manager": "kube-scheduler"}],
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}},
        "status": {"allocation": {"devices": {"results": results}}} if drivers else {},
    }


async def list_pods(idx: PodIndex, *pods: Obj) -> None:
    reduce = idx.informer.options.reduce
    assert reduce is not None
    items = [r for r in map(reduce, pods) if r is not None]
    await idx.informer._listed(kubeapi.Listing(items, "100"))


async def list_claims(idx: ClaimIndex, *claims: Obj) -> None:
    reduce = idx.informer.options.reduce
    assert reduce is not None
    items = [r for r in map(reduce, claims) if r is not None]
    await idx.informer._listed(kubeapi.Listing(items, "100"))


def names(pods: list[Obj]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


async def test_a_claim_counts_by_the_driver_that_allocated_it_when_the_node_is_read() -> None:
    pods = PodIndex(None, gpu_resources(OperatorConfig()))
    claims = ClaimIndex(None)
    await list_pods(
        pods,
        pod("train", "1", limits={"nvidia.com/gpu": "1"}),
        pod("infer", "2", claim="infer-gpu"),
        pod("router", "3", claim="router-nic"),
        pod("fresh", "4", claim="fresh-gpu"),  # its claim not in the claim index yet
        pod("web", "5"),
    )
    # every claim holder is kept: the claim watch may lag the pod watch
    assert names(pods.pods_on("node-1")) == ["fresh", "infer", "router", "train"]
    assert claims.drivers() is None  # not synced: every claim counts
    assert names(pods.consumers_on("node-1", claims.drivers())) == [
        "fresh",
        "infer",
        "router",
        "train",
    ]
    await list_claims(
        claims, claim("infer-gpu", "7", "gpu.nvidia.com"), claim("router-nic", "8", "sriov.x.io")
    )
    assert claims.drivers() == {
        "team-a/infer-gpu": {"gpu.nvidia.com"},
        "team-a/router-nic": {"sriov.x.io"},
    }
    assert names(pods.consumers_on("node-1", claims.drivers())) == ["fresh", "infer", "train"]
    # a claim deallocated and allocated again elsewhere, as its watch event says
    moved = compact_claim(claim("infer-gpu", "9", "sriov.x.io"))
    await claims.informer._event(kubeapi.WatchEvent(MODIFIED, moved))
    assert names(pods.consumers_on("node-1", claims.drivers())) == ["fresh", "train"]
    assert pods.consumers_on("node-2", claims.drivers()) == []


def test_a_compact_claim_keeps_its_identity_and_drivers_only() -> None:
    kept = compact_claim(claim("c", "3", "gpu.nvidia.com", "nic.x.io"))
    assert kept == {
        "metadata": {"name": "c", "namespace": "team-a", "resourceVersion": "3"},
        "status": {
            "allocation": {
                "devices": {"results": [{"driver": "gpu.nvidia.com"}, {"driver": "nic.x.io"}]}
            }
        },
    }


def test_the_claim_watch_backs_off_long_when_the_api_is_not_served() -> None:
    """Before Kubernetes 1.34 (no resource.k8s.io/v1) or without the right to list claims, the
    watch fails on and on: at most every ten minutes, and every claim counts meanwhile."""
    opts = ClaimIndex(None).informer.options
    assert opts.backoff == (5.0, 600.0) and opts.kind == "resourceclaims"
    assert ClaimIndex(None).informer.path == "/apis/resource.k8s.io/v1/resourceclaims"


async def settle() -> None:
    """Let the tasks started so far run until they wait."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_names_that_widen_what_counts_list_the_pods_again() -> None:
    idx = PodIndex(None, gpu_resources(OperatorConfig()))
    runs: list[int] = []

    async def watch() -> None:  # the informer's list-then-watch, standing still
        runs.append(len(runs))
        await asyncio.Event().wait()

    idx.informer.run = watch  # type: ignore[method-assign]
    task = asyncio.create_task(idx.run())
    try:
        await settle()
        assert runs == [0]
        accel = pod("accel", "1", limits={"acme.com/accel": "1"})
        await list_pods(idx, accel)
        assert idx.pods_on("node-1") == []  # not a GPU resource yet
        # a name the nvidia.com/ domain already covers: nothing to list again
        assert not idx.use(idx.resources.with_names(["nvidia.com/gpu.shared"]))
        assert "nvidia.com/gpu.shared" in idx.resources.names
        assert idx.use(idx.resources.with_names(["acme.com/accel"]))
        await settle()
        assert runs == [0, 1] and idx.relists == 1
        await list_pods(idx, accel)  # the new listing: the pod it left out is kept now
        assert names(idx.pods_on("node-1")) == ["accel"]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_the_pod_index_ends_with_its_informer() -> None:
    idx = PodIndex(None, gpu_resources(OperatorConfig()))

    async def broken() -> None:
        raise RuntimeError("watch ended")

    idx.informer.run = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="watch ended"):
        await idx.run()


async def test_each_configuration_pass_adds_the_plugin_configs_names(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = load_config(
        "nvidiaDevicePluginConfig: {namespace: gpu-operator, name: time-slicing-config}"
    )
    idx = PodIndex(None, gpu_resources(config))
    text = "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
    text += "    - {name: gpu, replicas: 4}\n"
    cm = {
        "metadata": {"namespace": "gpu-operator", "name": "time-slicing-config"},
        "data": {"any": text, "broken": "version: v0"},
    }
    with caplog.at_level(logging.WARNING, logger="vgpu_operator.pods"):
        idx.snapshot_taken(ClusterSnapshot(config=config, configmaps=[cm]))
        idx.snapshot_taken(ClusterSnapshot(config=config, configmaps=[cm]))
    assert "nvidia.com/gpu.shared" in idx.resources.names and idx.relists == 0
    # a problem is logged once, not on every pass
    assert [r.getMessage() for r in caplog.records] == [
        "NVIDIA device plugin config gpu-operator/time-slicing-config: broken: unknown "
        "version 'v0' (the plugin reads v1)"
    ]
    # the ConfigMap edited or gone: names stay (a pod given the resource still holds its GPU)
    idx.snapshot_taken(ClusterSnapshot(config=config))
    assert "nvidia.com/gpu.shared" in idx.resources.names

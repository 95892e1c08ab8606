"""`read_snapshot` with the controller's watches as sources, on the wire: the pods of the
components are listed per workload (namespace and label selector), the configured plugins are
read by name, and nothing is listed across the cluster. `doctor` (no sources) lists, the
ResourceClaims too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.kit.volcano_fixtures import deployment, healthy_daemonset, pod
from tests.kit.wire import Wire, error, serve
from vgpu_operator.controller.snapshot import (
    compact_daemonset,
    read_claims,
    read_only_configmap_refs,
    read_snapshot,
    watched_objects,
)
from vgpu_operator.models.config import OperatorConfig, load_config


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    async for w in serve():
        yield w


def items(*objs: dict[str, Any]) -> web.Response:
    return web.json_response({"metadata": {"resourceVersion": "9"}, "items": list(objs)})


def nvidia_daemonset() -> dict[str, Any]:
    labels = {"app": "nvidia-device-plugin-daemonset"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "p", "image": "nvcr.io/nvidia/k8s-device-plugin"}]
                },
            },
        },
    }


def other_daemonset() -> dict[str, Any]:
    ds = nvidia_daemonset()
    ds["metadata"] = {"name": "kube-proxy", "namespace": "kube-system"}
    ds["spec"]["selector"]["matchLabels"] = {"k8s-app": "kube-proxy"}
    ds["spec"]["template"]["metadata"]["labels"] = {"k8s-app": "kube-proxy"}
    ds["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.k8s.io/kube-proxy"
    return ds


def route_everything(wire: Wire, queries: list[tuple[str, dict[str, str]]]) -> None:
    plugin = healthy_daemonset()
    plugin["metadata"]["managedFields"] = [{"manager": "kubectl"}]

    async def lister(request: web.Request) -> web.Response:
        queries.append((request.path, dict(request.query)))
        selector = request.query.get("labelSelector", "")
        if selector == "app=volcano-scheduler":
            return items(pod("volcano-system", "volcano-scheduler-0", labels={"app": "x"}))
        if selector == "name=volcano-device-plugin":
            return items(pod("kube-system", "volcano-device-plugin-n1", node="n1"))
        return items(pod(request.match_info.get("ns", "x"), "nvidia-plugin-n1", node="n1"))

    async def dep(_: web.Request) -> web.Response:
        return web.json_response(deployment())

    async def ds(_: web.Request) -> web.Response:
        return web.json_response(plugin)

    wire.on("GET", "/apis/apps/v1/namespaces/volcano-system/deployments/volcano-scheduler", dep)
    wire.on("GET", "/apis/apps/v1/namespaces/kube-system/daemonsets/volcano-device-plugin", ds)
    for ns in ("volcano-system", "kube-system", "gpu-operator"):
        wire.on("GET", f"/api/v1/namespaces/{ns}/pods", lister)
    # everything else (the other ConfigMaps, the Ascend plugin): 404, absent


async def test_a_controller_pass_lists_no_pod_or_daemonset_across_the_cluster(wire: Wire) -> None:
    queries: list[tuple[str, dict[str, str]]] = []
    route_everything(wire, queries)
    gpu_pod = pod("team-a", "train-0", node="n1", limits={"volcano.sh/vgpu-number": "1"})
    watched = [compact_daemonset(nvidia_daemonset()), compact_daemonset(other_daemonset())]
    async with wire.client() as api:
        snap = await read_snapshot(
            api, OperatorConfig(), nodes=[], gpu_pods=[gpu_pod], daemonsets=watched
        )
    paths = [r.path for r in wire.requests]
    assert "/api/v1/pods" not in paths and "/apis/apps/v1/daemonsets" not in paths
    selector = {"fieldSelector": "status.phase!=Succeeded", "limit": "500"}
    assert sorted(queries) == [
        (
            "/api/v1/namespaces/gpu-operator/pods",
            {"labelSelector": "app=nvidia-device-plugin-daemonset", **selector},
        ),
        (
            "/api/v1/namespaces/kube-system/pods",
            {"labelSelector": "name=volcano-device-plugin", **selector},
        ),
        (
            "/api/v1/namespaces/volcano-system/pods",
            {"labelSelector": "app=volcano-scheduler", **selector},
        ),
    ]
    assert sorted(p["metadata"]["name"] for p in snap.pods) == [
        "nvidia-plugin-n1",
        "train-0",
        "volcano-device-plugin-n1",
        "volcano-scheduler-0",
    ]
    # the configured plugin comes from its GET (compact), the others from the watch
    assert [d["metadata"]["name"] for d in snap.daemonsets] == [
        "volcano-device-plugin",
        "nvidia-device-plugin-daemonset",
        "kube-proxy",
    ]
    assert "managedFields" not in snap.daemonsets[0]["metadata"]
    assert snap.plugin is not None and snap.plugin.name == "volcano-device-plugin"


async def test_doctor_lists_pods_daemonsets_and_resource_claims(wire: Wire) -> None:
    listed: list[str] = []
    allocated = {"allocation": {"devices": {"results": [{"driver": "gpu.nvidia.com"}]}}}
    gpu_claim = {"metadata": {"name": "c", "namespace": "team-a"}, "status": allocated}

    async def lister(request: web.Request) -> web.Response:
        listed.append(request.path)
        return items(gpu_claim) if "resourceclaims" in request.path else items()

    wire.on("GET", "/api/v1/pods", lister)
    wire.on("GET", "/apis/apps/v1/daemonsets", lister)
    wire.on("GET", "/apis/resource.k8s.io/v1/resourceclaims", lister)
    async with wire.client() as api:
        snap = await read_snapshot(api, OperatorConfig(), nodes=[])
    assert sorted(listed) == [
        "/api/v1/pods",
        "/apis/apps/v1/daemonsets",
        "/apis/resource.k8s.io/v1/resourceclaims",
    ]
    assert snap.claims == {"team-a/c": {"gpu.nvidia.com"}}


async def test_claims_that_cannot_be_listed_leave_every_claim_counting(wire: Wire) -> None:
    """No resource.k8s.io/v1 (before Kubernetes 1.34: 404) or no right to list (403)."""

    async def forbidden(_: web.Request) -> web.Response:
        return error(403, "resourceclaims.resource.k8s.io is forbidden")

    wire.on("GET", "/apis/resource.k8s.io/v1/resourceclaims", forbidden)
    async with wire.client() as api:
        assert await read_claims(api) is None
        snap = await read_snapshot(api, OperatorConfig(), nodes=[], gpu_pods=[], daemonsets=[])
    assert snap.claims is None  # the controller keeps its own (controller.claims)


async def test_nvidias_plugin_config_is_read_by_name(wire: Wire) -> None:
    cm = {"metadata": {"namespace": "gpu-operator", "name": "time-slicing-config"}, "data": {}}
    path = "/api/v1/namespaces/gpu-operator/configmaps/time-slicing-config"

    async def get(_: web.Request) -> web.Response:
        return web.json_response(cm)

    wire.on("GET", path, get)
    config = load_config(
        "nvidiaDevicePluginConfig: {namespace: gpu-operator, name: time-slicing-config}"
    )
    assert ("ConfigMap", "gpu-operator", "time-slicing-config") in watched_objects(config)
    async with wire.client() as api:
        snap = await read_snapshot(api, config, nodes=[], gpu_pods=[], daemonsets=[])
    assert snap.configmap("gpu-operator", "time-slicing-config") is not None
    assert path in [r.path for r in wire.requests]
    assert read_only_configmap_refs(OperatorConfig()) == []


def test_a_compact_daemonset_keeps_spec_and_metadata_but_not_status() -> None:
    ds = healthy_daemonset()
    ds["metadata"]["resourceVersion"] = "5"
    ds["metadata"]["managedFields"] = [{"manager": "helm"}]
    ds["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": "{...}",
        "deprecated.daemonset.template.generation": "3",
    }
    ds["status"] = {"numberReady": 2}
    compact = compact_daemonset(ds)
    assert compact["spec"] == ds["spec"] and "status" not in compact
    assert compact["metadata"]["annotations"] == {"deprecated.daemonset.template.generation": "3"}
    assert compact["metadata"]["resourceVersion"] == "5"
    assert "managedFields" not in compact["metadata"]


def test_the_continue_token_comes_from_a_typed_lists_head_only() -> None:
    """A typed list's head (kind, apiVersion, metadata) before `,"items":` gives the token; a
    head in another order (a custom resource's list, keys sorted) or none gives None, and the
    decoded page gives it instead (`_page`)."""
    from vgpu_operator.controller.snapshot import _page, continue_token

    typed = (
        b'{"kind":"PodList","apiVersion":"v1",'
        b'"metadata":{"resourceVersion":"9","continue":"eyJ2"},"items":[{"a":1}]}'
    )
    assert continue_token(typed) == "eyJ2"
    last = b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[]}'
    assert continue_token(last) is None
    custom = b'{"apiVersion":"x/v1","items":[{"a":1}],"kind":"XList","metadata":{"continue":"c"}}'
    assert continue_token(custom) is None
    assert _page(custom, None) == ([{"a": 1}], "c")
    assert _page(typed, lambda o: {"kept": o["a"]}) == ([{"kept": 1}], "eyJ2")

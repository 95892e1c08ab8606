"""The DRA driver double against the real control plane: the apiserver stores its DeviceClasses
and ResourceSlices as built, the controller manager makes each pod's claim from its
ResourceClaimTemplate, and the real kube-scheduler allocates the claim from the double's devices
and binds the pod to the one kwok node whose slice has a matching device, never to a node
without one."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, NodeFactory, eventually
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.dra_driver import API_VERSION, DRIVER, Host, devices
from vgpu_devcluster.dra_publish import (
    install_device_classes,
    node_slices,
    publish,
    remove_device_classes,
    withdraw,
)
from vgpu_devcluster.fakesmi_mig import MigArgs, run_mig
from vgpu_operator.kubeapi import NotFound, request

RESOURCE = f"/apis/{API_VERSION}"


def template(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]
                }
            }
        },
    }


def pod(name: str, claim_template: str, nodes: list[str]) -> dict[str, Any]:
    """A pod with one claim from `claim_template`, allowed only onto `nodes`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": claim_template}],
            "tolerations": [{"operator": "Exists"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": nodes,
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
        },
    }


@pytest.fixture
async def device_classes(api: client.ApiClient) -> AsyncIterator[list[dict[str, Any]]]:
    stored = await install_device_classes(api)
    yield stored
    await remove_device_classes(api)


async def read_pod(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return await request(api, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}")


async def allocation(api: client.ApiClient, namespace: str, pod_name: str) -> list[dict[str, Any]]:
    """The device results of the claim the controller manager made for the pod."""
    status = (await read_pod(api, namespace, pod_name)).get("status") or {}
    names = [s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []]
    assert len(names) == 1 and names[0], status
    claim = await request(
        api, "GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{names[0]}"
    )
    return list(((claim.get("status") or {}).get("allocation") or {})["devices"]["results"])


async def test_the_scheduler_allocates_the_doubles_devices_and_binds_only_where_they_are(
    api: client.ApiClient,
    cluster: ClusterUnderTest,
    make_nodes: NodeFactory,
    namespace: str,
    device_classes: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    # kwok nodes without NVIDIA's device plugin capacity: DRA is the only owner of their GPUs
    whole, mig, bare = await make_nodes(None, 3, prefix="dra")
    whole_state = fs.init_state(tmp_path / "whole.json", "A100-SXM4-80GB", 2, node=whole)
    mig_state = fs.init_state(tmp_path / "mig.json", "A100-SXM4-40GB", 1, node=mig, mig=True)
    create = MigArgs("cgi")
    create.cgi, create.default_ci = ["19", "19"], True
    assert run_mig(mig_state, mig_state["gpus"], create).rc == 0

    try:
        stored = {n: await publish(api, n, s) for n, s in ((whole, whole_state), (mig, mig_state))}
        # the apiserver keeps every device as the double built it, owned by its Node
        for node, state in ((whole, whole_state), (mig, mig_state)):
            spec = stored[node]["spec"]
            assert spec["devices"] == devices(state)
            assert (spec["driver"], spec["nodeName"], spec["pool"]) == (
                DRIVER,
                node,
                {"name": node, "generation": 1, "resourceSliceCount": 1},
            )
            assert stored[node]["metadata"]["name"].startswith(f"00000-{DRIVER}-")
            assert stored[node]["metadata"]["ownerReferences"][0]["name"] == node
        # publishing the same devices again changes nothing
        again = await publish(api, whole, whole_state)
        assert again["metadata"]["resourceVersion"] == stored[whole]["metadata"]["resourceVersion"]
        # a changed device is updated in place: same slice, same generation
        host = Host(pcie_roots={0: "pci0000:00"})
        moved = await publish(api, whole, whole_state, host)
        assert moved["metadata"]["name"] == stored[whole]["metadata"]["name"]
        assert moved["spec"]["pool"]["generation"] == 1
        assert moved["spec"]["devices"] == devices(whole_state, host)
        assert await node_slices(api, bare) == []
        classes = {c["metadata"]["name"] for c in device_classes}
        assert classes == {"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"}
        if cluster.local is not None:
            # DRAExtendedResource is alpha and off in Kubernetes 1.35: the field is dropped
            gpu_class = next(c for c in device_classes if c["metadata"]["name"] == "gpu.nvidia.com")
            assert "extendedResourceName" not in gpu_class["spec"]

        ns = f"/apis/{API_VERSION}/namespaces/{namespace}/resourceclaimtemplates"
        for name, device_class in (("whole", "gpu.nvidia.com"), ("mig", "mig.nvidia.com")):
            await request(api, "POST", ns, body=template(name, device_class), field_manager=None)
        pods = f"/api/v1/namespaces/{namespace}/pods"
        ours = [whole, mig, bare]
        await request(api, "POST", pods, body=pod("gpu", "whole", ours), field_manager=None)
        await request(api, "POST", pods, body=pod("mig", "mig", ours), field_manager=None)
        # a whole GPU asked for on the one node without slices: never scheduled
        await request(api, "POST", pods, body=pod("stranded", "whole", [bare]), field_manager=None)

        async def bound() -> bool:
            placed = [
                ((await read_pod(api, namespace, p)).get("spec") or {}).get("nodeName")
                for p in ("gpu", "mig")
            ]
            return all(placed)

        await eventually(bound, timeout=30)
        assert (await read_pod(api, namespace, "gpu"))["spec"]["nodeName"] == whole
        assert (await read_pod(api, namespace, "mig"))["spec"]["nodeName"] == mig

        (got,) = await allocation(api, namespace, "gpu")
        assert (got["driver"], got["pool"], got["request"]) == (DRIVER, whole, "gpu")
        assert got["device"] in {"gpu-0", "gpu-1"}
        (got,) = await allocation(api, namespace, "mig")
        assert (got["driver"], got["pool"]) == (DRIVER, mig)
        assert got["device"] in {d["name"] for d in devices(mig_state)}
        assert got["device"].startswith("gpu-0-mig-1g5gb-19-")

        async def refused() -> bool:
            status = (await read_pod(api, namespace, "stranded")).get("status") or {}
            cond = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
            return bool(cond) and cond[0].get("reason") == "Unschedulable"

        await eventually(refused, timeout=30)
        stranded = await read_pod(api, namespace, "stranded")
        assert not stranded["spec"].get("nodeName")
        scheduled = next(c for c in stranded["status"]["conditions"] if c["type"] == "PodScheduled")
        assert "cannot allocate all claims" in scheduled["message"]
    finally:
        for node in (whole, mig):
            with contextlib.suppress(NotFound):
                await withdraw(api, node)
    assert await node_slices(api, whole) == [] and await node_slices(api, mig) == []

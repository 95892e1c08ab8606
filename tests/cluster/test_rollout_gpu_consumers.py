"""Every kind of GPU consumer is drained before its node is released, against the real apiserver:
one busy A100 node (kwok, its agent a subprocess over the fake nvidia-smi) runs one pod for each
resource name a GPU may back (`models.gpu_resources`) and one pod whose ResourceClaim the real
kube-scheduler allocated from the DRA driver double's `gpu.nvidia.com` devices; a static-MIG
policy then adopts the node, which switches its GPU into MIG mode and so must drain it.

`GateWatch` holds each of those pods after its eviction until it has checked that the node was
not released meanwhile, and checks the release, as committed, against every pod not yet let go:
each pod was evicted and gone before the release. A pod holding no GPU stays."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.agentkit import Agents, agent_kubeconfig_path, agents, get_node, inventory
from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually, unique
from tests.cluster.rolloutkit import (
    HOLD_FINALIZER,
    GateWatch,
    config_of,
    cordoned,
    pod,
    rollout_of,
    wait_running,
)
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.dra_driver import API_VERSION, DRIVER
from vgpu_devcluster.dra_publish import (
    install_device_classes,
    publish,
    remove_device_classes,
    withdraw,
)
from vgpu_operator import contract
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.controller.volcano import VolcanoOptions
from vgpu_operator.kubeapi import NotFound, request
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import OperatorConfig

__all__ = ["agent_kubeconfig_path", "agents"]  # fixtures

# The names of a vGPU as this cluster's HAMi/Volcano were told them (the operator config's
# `resourceNames`): no GPU word in them, so only the configuration makes them GPU resources.
RENAMED_VGPU = {
    "count": "acme.example/vcuda",
    "memory": "acme.example/vcuda-memory",
    "memoryPercentage": "acme.example/vcuda-memory-share",
    "cores": "acme.example/vcuda-cores",
}

# One pod per name, asking that name alone.
GPU_RESOURCES = {
    # NVIDIA/k8s-device-plugin@v0.17.0: a whole GPU, a MIG device (strategy mixed), a shared GPU
    # (time-slicing and MPS `renameByDefault`: api/config/v1/consts.go
    # DefaultSharedResourceNameSuffix), and a `rename` of a shared resource, qualified with the
    # plugin's domain (api/config/v1/resources.go `NewResourceName`)
    "nvidia.com/gpu": "1",
    "nvidia.com/mig-1g.10gb": "1",
    "nvidia.com/gpu.shared": "1",
    "nvidia.com/shared-a100": "1",
    # HAMi's own (Project-HAMi/HAMi@v2.6.0:charts/hami/values.yaml resourceMem,
    # resourceCores, resourceMemPercentage)
    "nvidia.com/gpumem": "10240",
    "nvidia.com/gpucores": "30",
    "nvidia.com/gpumem-percentage": "50",
    # Volcano's vGPU names (volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/
    # device_info.go `NewGPUDevices`, and the operator's default memory-percentage name) and
    # its legacy GPU sharing (models/volcano.py LEGACY_GPU_MEMORY, LEGACY_GPU_NUMBER)
    "volcano.sh/vgpu-number": "1",
    "volcano.sh/vgpu-memory": "10240",
    "volcano.sh/vgpu-memory-percentage": "50",
    "volcano.sh/vgpu-cores": "30",
    "volcano.sh/gpu-memory": "10240",
    "volcano.sh/gpu-number": "1",
    # HAMi's Ascend device plugin (what devtools' simulated Ascend nodes advertise)
    "huawei.com/Ascend910B3": "1",
    # another device plugin's renamed GPU resource
    "example.com/shared-gpu": "1",
    # the operator config's names
    **dict.fromkeys(RENAMED_VGPU.values(), "1"),
}


def claim_template(name: str) -> dict[str, Any]:
    """One device of the `gpu.nvidia.com` DeviceClass (NVIDIA's chart's, installed by
    `dra_publish.install_device_classes`)."""
    wanted = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [wanted]}}},
    }


def claim_pod(name: str, template: str, node: str) -> dict[str, Any]:
    """A pod with one claim from `template`, allowed only onto `node`, held by the test."""
    match = {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "finalizers": [HOLD_FINALIZER]},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "tolerations": [{"operator": "Exists"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [match]}]
                    }
                }
            },
        },
    }


def cpu_pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "web", "image": "busybox", "resources": {"limits": {"cpu": "100m"}}}
            ],
        },
    }


@pytest.fixture
def renamed_operator(installed: Credentials) -> Iterator[OperatorThread]:
    """The controller with the renamed vGPU names; no configuration reconciler (a static-MIG
    node waits for no device plugin pass, and no Volcano ConfigMap is written with these
    names for the tests after this one)."""
    config = OperatorConfig.model_validate({"resourceNames": RENAMED_VGPU})
    running = OperatorThread(
        installed,
        options=ReconcilerOptions(resync_seconds=3600),
        config=config,
        volcano=VolcanoOptions(enabled=False),
    ).start()
    yield running
    running.stop()


@contextlib.asynccontextmanager
async def dra_devices(api: client.ApiClient, node: str, state: Path) -> AsyncIterator[None]:
    """The DeviceClasses, and the node's devices published as the kubelet plugin would."""
    await install_device_classes(api)
    try:
        await publish(api, node, fs.load(state))
        yield
    finally:
        with contextlib.suppress(NotFound):
            await withdraw(api, node)
        await remove_device_classes(api)


async def claim_drivers(api: client.ApiClient, key: str) -> list[str]:
    """The drivers of the devices allocated to the pod's claim."""
    obj = await pod(api, key)
    assert obj is not None, key
    namespace = obj["metadata"]["namespace"]
    [status] = obj["status"]["resourceClaimStatuses"]
    path = (
        f"/apis/{API_VERSION}/namespaces/{namespace}/resourceclaims/{status['resourceClaimName']}"
    )
    claim = await request(api, "GET", path)
    results = claim["status"]["allocation"]["devices"]["results"]
    return [r["driver"] for r in results]


async def test_a_pod_of_each_gpu_resource_and_a_dra_claim_is_evicted_before_the_release(
    api: client.ApiClient,
    cluster: ClusterUnderTest,
    namespace: str,
    policies: PolicyFactory,
    renamed_operator: OperatorThread,
    agents: Agents,
) -> None:
    pool = unique("consumers")
    node = await agents.node("A100-SXM4-80GB", 1, labels={"test/pool": pool})
    agents.start(node)

    async def reported() -> bool:
        annotations = (await get_node(api, node.name))["metadata"].get("annotations") or {}
        return contract.ANN_INVENTORY in annotations

    await eventually(reported, timeout=60)
    assert not (await inventory(api, node.name)).gpus[0].mig_current  # MIG off: it must switch

    audit = cluster.local.audit_offset() if cluster.local is not None else None
    gate = GateWatch(api, f"test/pool={pool}", namespace)
    async with dra_devices(api, node.name, node.gpus.state), gate.running():
        keys = [
            await gate.place(f"uses-{i}", node.name, {name: amount})
            for i, (name, amount) in enumerate(GPU_RESOURCES.items())
        ]
        templates = f"/apis/{API_VERSION}/namespaces/{namespace}/resourceclaimtemplates"
        await request(api, "POST", templates, body=claim_template("gpu"), field_manager=None)
        pods = f"/api/v1/namespaces/{namespace}/pods"
        body = claim_pod("claims-gpu", "gpu", node.name)
        await request(api, "POST", pods, body=body, field_manager=None)
        await request(api, "POST", pods, body=cpu_pod("web", node.name), field_manager=None)
        claimed = f"{namespace}/claims-gpu"
        await wait_running(api, [*keys, claimed, f"{namespace}/web"])  # the scheduler bound it
        await gate.placed(claimed, node.name)
        assert await claim_drivers(api, claimed) == [DRIVER]  # gpu.nvidia.com

        spec = {
            "nodeSelector": {"matchLabels": {"test/pool": pool}},
            "mode": "mig",
            "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]},
            "rollout": {"maxUnavailable": 1, "drain": {"timeoutSeconds": 60}},
        }
        await policies("consumers", spec)

        async def settled() -> bool:
            obj = await get_node(api, node.name)
            labels = obj["metadata"].get("labels") or {}
            return (
                config_of(obj) is not None
                and rollout_of(obj) is None
                and not cordoned(obj)
                and labels.get(contract.LABEL_STATE) == "success"
            )

        await eventually(settled, timeout=120)

    assert gate.violations == [], gate.violations
    assert len(gate.releases.get(node.name, [])) == 1, gate.releases
    everything = {*keys, claimed}
    assert gate.evicted == gate.gone == everything, everything - gate.gone
    web = await pod(api, f"{namespace}/web")
    assert web is not None and web["status"]["phase"] == "Running", "a CPU pod is not drained"
    assert (await inventory(api, node.name)).gpus[0].mig_current  # the agent applied it
    if audit is not None and cluster.local is not None:  # each through the Eviction API
        refs = [
            (e.get("objectRef") or {}, e)
            for e in cluster.local.audit_events(offset=audit)
            if e.get("verb") == "create" and (e.get("responseStatus") or {}).get("code") == 201
        ]
        evictions = {
            f"{ref.get('namespace')}/{ref.get('name')}"
            for ref, e in refs
            if ref.get("subresource") == "eviction"
        }
        assert everything <= evictions, everything - evictions
        assert f"{namespace}/web" not in evictions

"""Simulated GPU nodes: Node objects that kwok keeps Ready, labelled as GPU Feature Discovery would.

A node shows its hardware as a real one does, which is what the operator takes as evidence before it
writes (core.nodes.node_hardware.gpu_evidence): an NVIDIA node GFD's `nvidia.com/gpu.present`,
`gpu.count` and `gpu.product` labels and the device plugin's `nvidia.com/gpu` capacity; an Ascend
node the chip label of Ascend's device plugin, the `accelerator` label HAMi's guide has users set,
and the capacity HAMi's Ascend plugin registers (`huawei.com/Ascend910B3`: the resource names of
Project-HAMi/ascend-device-plugin v1.4.0 ascend-device-configmap.yaml, in data/upstream).

`gpu_node_manifest` is pure; `create_gpu_nodes` writes them and waits until they are Ready (kwok
answers for the kubelet and the controller manager lifts the not-ready taint).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_operator import contract
from vgpu_operator.kubeapi import node_path, request

KWOK_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class GpuModel:
    nvml_name: str  # what NVML (nvidia-smi) reports
    memory_mib: int
    mig_capable: bool

    @property
    def product_label(self) -> str:
        """`nvidia.com/gpu.product` as GFD writes it (spaces become dashes)."""
        return self.nvml_name.replace(" ", "-")


GPU_MODELS: dict[str, GpuModel] = {
    "A30": GpuModel("NVIDIA A30", 24576, True),
    "A100-SXM4-40GB": GpuModel("NVIDIA A100-SXM4-40GB", 40960, True),
    "A100-SXM4-80GB": GpuModel("NVIDIA A100-SXM4-80GB", 81920, True),
    "A100-80GB-PCIe": GpuModel("NVIDIA A100 80GB PCIe", 81920, True),
    "H100-80GB-HBM3": GpuModel("NVIDIA H100 80GB HBM3", 81559, True),
    "H100-NVL": GpuModel("NVIDIA H100 NVL", 95830, True),
    "H200": GpuModel("NVIDIA H200", 143771, True),
    "GH200-144G": GpuModel("NVIDIA GH200 144G HBM3e", 146831, True),
    "RTX-4090": GpuModel("NVIDIA GeForce RTX 4090", 24564, False),
}


@dataclass(frozen=True)
class AscendModel:
    chip: str  # `node.kubernetes.io/npu.chip.name`
    resource: str  # the extended resource HAMi's Ascend plugin registers


ASCEND_MODELS: dict[str, AscendModel] = {
    "Ascend910B3": AscendModel("910B3", "huawei.com/Ascend910B3"),
    "Ascend310P3": AscendModel("310P3", "huawei.com/Ascend310P"),
}


@dataclass(frozen=True)
class NodeSpec:
    name: str
    model: str | None = None  # a key of GPU_MODELS or ASCEND_MODELS; None for a CPU-only node
    gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    # False: NVIDIA's device plugin is not deployed there (no `nvidia.com/gpu` capacity), as on
    # a node the GPU Operator keeps it off (`nvidia.com/gpu.deploy.device-plugin=false`): a node
    # whose GPUs NVIDIA's DRA driver alone hands out
    nvidia_device_plugin: bool = True


def gpu_node_manifest(spec: NodeSpec) -> dict[str, Any]:
    labels: dict[str, str] = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
    }
    capacity: dict[str, str] = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if spec.model in ASCEND_MODELS:
        npu = ASCEND_MODELS[spec.model]
        labels.update(
            {
                contract.ASCEND_CHIP_LABEL: npu.chip,
                "accelerator": "huawei-Ascend910"
                if npu.chip.startswith("910")
                else "huawei-Ascend310P",
            }
        )
        capacity[npu.resource] = str(spec.gpus)
    elif spec.model is not None:
        model = GPU_MODELS[spec.model]
        labels.update(
            {
                contract.GFD_PRODUCT: model.product_label,
                contract.GFD_COUNT: str(spec.gpus),
                contract.GFD_MEMORY: str(model.memory_mib),
                contract.GFD_MIG_CAPABLE: "true" if model.mig_capable else "false",
                contract.GFD_PRESENT: "true",
            }
        )
        if spec.nvidia_device_plugin:
            capacity[contract.NVIDIA_GPU_RESOURCE] = str(spec.gpus)
    labels.update(spec.labels)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": labels,
            "annotations": {
                KWOK_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                **spec.annotations,
            },
        },
        "spec": {"taints": [dict(t) for t in spec.taints]} if spec.taints else {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
            },
        },
    }


def is_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


async def create_gpu_nodes(
    api: Any, specs: Iterable[NodeSpec], *, wait_ready: bool = True, timeout: float = 120.0
) -> list[str]:
    """Create the nodes (`api` is a kubernetes_asyncio ApiClient) and wait until all are Ready."""
    specs = list(specs)
    sem = asyncio.Semaphore(32)

    async def create(spec: NodeSpec) -> None:
        async with sem:
            await request(
                api, "POST", node_path(), body=gpu_node_manifest(spec), field_manager=None
            )

    await asyncio.gather(*(create(s) for s in specs))
    names = [s.name for s in specs]
    if wait_ready:
        await wait_nodes_ready(api, names, timeout=timeout)
    return names


async def wait_nodes_ready(api: Any, names: Iterable[str], *, timeout: float = 120.0) -> None:
    """Wait until every named node is Ready and has lost the not-ready taint."""
    pending = set(names)
    deadline = time.monotonic() + timeout
    while pending:
        body = await request(api, "GET", node_path())
        for item in body.get("items", []):
            name = item["metadata"]["name"]
            taints = (item.get("spec") or {}).get("taints") or []
            not_ready = any(t.get("key", "").startswith("node.kubernetes.io/") for t in taints)
            if name in pending and is_ready(item) and not not_ready:
                pending.discard(name)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes not Ready after {timeout}s: {sorted(pending)[:10]}")
        await asyncio.sleep(0.5)

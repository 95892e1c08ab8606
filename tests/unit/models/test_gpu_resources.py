"""One definition of a GPU consumer (models.gpu_resources): the drain, the pod index, `plan` and
the agent's in-use check all read it."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_operator.agent import allocations
from vgpu_operator.core.rollout import gpu_pods
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.gpu_resources import gpu_backed, gpu_consumer


def pod(resources: dict[str, str], *, claims: bool = False, init: bool = False) -> dict[str, Any]:
    container = {"name": "c", "resources": {"limits": resources}}
    spec: dict[str, Any] = {"initContainers" if init else "containers": [container]}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize(
    "resource",
    [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",  # NVIDIA's time-slicing renameByDefault
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/gpumem",  # HAMi's own names
        "nvidia.com/gpucores",
        "nvidia.com/gpumem-percentage",
        "volcano.sh/vgpu-number",
        "volcano.sh/vgpu-memory",
        "volcano.sh/gpu-memory",  # legacy GPU sharing
        "volcano.sh/gpu-number",
        "hami.io/vgpu",
        "huawei.com/Ascend910B3",
        "example.com/shared-gpu",  # a renamed resource that says so
    ],
)
def test_every_gpu_resource_makes_a_gpu_consumer(resource: str) -> None:
    assert gpu_backed(resource)
    assert gpu_consumer(pod({resource: "1"}))
    assert gpu_consumer(pod({resource: "1"}, init=True))
    assert not gpu_consumer(pod({resource: "0"}))


@pytest.mark.parametrize(
    "resource", ["cpu", "memory", "hugepages-2Mi", "example.com/fpga", "amd.com/xilinx"]
)
def test_other_resources_do_not(resource: str) -> None:
    assert not gpu_backed(resource)
    assert not gpu_consumer(pod({resource: "1"}))


def test_a_configured_name_counts_and_a_resource_claim_counts() -> None:
    assert gpu_backed("acme.com/accel", {"acme.com/accel"})
    assert gpu_consumer(pod({"cpu": "1"}, claims=True))  # its driver is on the claim


def test_the_pod_index_plan_and_agent_read_the_same_definition() -> None:
    resources = gpu_pods.gpu_resources(OperatorConfig())
    shared = pod({"nvidia.com/gpu.shared": "1"})
    assert gpu_pods.holds_gpu(shared, resources)
    assert gpu_pods.holds_gpu(pod({"cpu": "1"}, claims=True), resources)
    assert not gpu_pods.holds_gpu(pod({"cpu": "1"}), resources)
    assert allocations.gpu_backed is gpu_backed
    # the compact pod the index keeps still says it holds a claim
    kept = gpu_pods.compact_pod(pod({"cpu": "1"}, claims=True))
    assert gpu_pods.holds_gpu(kept, resources)

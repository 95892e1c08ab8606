"""One definition of a GPU consumer (models.gpu_resources): the drain, the pod index, `plan` and
the agent's in-use check all read it; a ResourceClaim counts when a listed DRA driver allocated
it, or when that cannot be told."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_operator.agent import allocations
from vgpu_operator.core.rollout import gpu_pods
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.gpu_resources import (
    DEFAULT_DRA_DRIVERS,
    claim_drivers,
    claims_gpu,
    gpu_backed,
    gpu_consumer,
    pod_claims,
)


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
    assert gpu_consumer(pod({"cpu": "1"}, claims=True))  # no claims at hand: it counts


def claim(name: str, *drivers: str, namespace: str = "ns") -> dict[str, Any]:
    """A ResourceClaim as resource.k8s.io/v1 serves it (kubernetes/api@v0.34.0:
    resource/v1/types.go), allocated to one device per driver (none: not allocated)."""
    results = [
        {"request": "gpu", "driver": d, "pool": "node-1", "device": f"dev-{i}"}
        for i, d in enumerate(drivers)
    ]
    status = {"allocation": {"devices": {"results": results}}} if drivers else {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": status,
    }


def claiming(
    *entries: dict[str, Any], statuses: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A pod on node-1 holding `entries` (spec.resourceClaims), with its claim statuses."""
    p = pod({"cpu": "1"})
    p["spec"]["nodeName"] = "node-1"
    p["spec"]["resourceClaims"] = list(entries)
    if statuses is not None:
        p["status"] = {"resourceClaimStatuses": statuses}
    return p


TEMPLATE = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
DIRECT = {"name": "shared", "resourceClaimName": "team-gpu"}


def test_which_claims_a_pod_holds() -> None:
    # a claim named in the spec, and one made from a template, named by the pod's status
    made = claiming(TEMPLATE, DIRECT, statuses=[{"name": "gpu", "resourceClaimName": "p-gpu-x7"}])
    assert pod_claims(made) == ["ns/p-gpu-x7", "ns/team-gpu"]
    # the template's claim not in the status yet: unknown
    assert pod_claims(claiming(TEMPLATE)) == [None]
    # in the status without a name: no claim was needed, the entry is ignored
    assert pod_claims(claiming(TEMPLATE, statuses=[{"name": "gpu"}])) == []
    assert pod_claims(pod({"cpu": "1"})) == []


def test_the_drivers_of_a_claim_are_those_of_its_allocation() -> None:
    assert claim_drivers(claim("c", "gpu.nvidia.com", "nic.example.com")) == {
        "gpu.nvidia.com",
        "nic.example.com",
    }
    assert claim_drivers(claim("c")) == frozenset()  # not allocated


def test_a_claim_counts_when_a_listed_driver_allocated_it_or_when_it_cannot_be_told() -> None:
    made = claiming(TEMPLATE, statuses=[{"name": "gpu", "resourceClaimName": "p-gpu-x7"}])
    index = {"ns/p-gpu-x7": claim_drivers(claim("p-gpu-x7", "gpu.nvidia.com"))}
    assert claims_gpu(made, DEFAULT_DRA_DRIVERS, index)
    other = {"ns/p-gpu-x7": claim_drivers(claim("p-gpu-x7", "nic.example.com"))}
    assert not claims_gpu(made, DEFAULT_DRA_DRIVERS, other)
    assert claims_gpu(made, ["nic.example.com"], other)  # a driver the config lists
    # the safe side: no claim index, a claim not in it, a claim not allocated (a lagging
    # watch), a template's claim not named yet
    assert claims_gpu(made, DEFAULT_DRA_DRIVERS, None)
    assert claims_gpu(made, DEFAULT_DRA_DRIVERS, {})
    assert claims_gpu(made, DEFAULT_DRA_DRIVERS, {"ns/p-gpu-x7": frozenset()})
    assert claims_gpu(claiming(TEMPLATE), DEFAULT_DRA_DRIVERS, other)
    # one GPU claim among others is enough; a claim needing none makes no consumer
    both = claiming(DIRECT, TEMPLATE, statuses=[{"name": "gpu", "resourceClaimName": "p-gpu-x7"}])
    assert claims_gpu(
        both, DEFAULT_DRA_DRIVERS, {**other, "ns/team-gpu": frozenset({"gpu.nvidia.com"})}
    )
    assert not claims_gpu(claiming(TEMPLATE, statuses=[{"name": "gpu"}]), DEFAULT_DRA_DRIVERS, None)


def test_a_gpu_resource_counts_whatever_the_claims_say() -> None:
    p = claiming(DIRECT)
    p["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    assert gpu_consumer(p, claims={"ns/team-gpu": frozenset({"nic.example.com"})})
    assert not gpu_consumer(claiming(DIRECT), claims={"ns/team-gpu": frozenset({"x.example.com"})})
    assert not gpu_consumer(claiming(DIRECT), drivers=(), claims={"ns/team-gpu": frozenset({"d"})})


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

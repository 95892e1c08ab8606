"""Claim pods that can never be scheduled on the DRA pools (core.dra.unschedulable), against the
DeviceClasses of NVIDIA's DRA driver chart and the slices its double publishes
(vgpu_devcluster.dra_driver, kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1): a claim that fits
says nothing; a missing DeviceClass, a selector on attributes no published device has, a class
no device is of, and a count no node holds are named with the fix; selectors beyond the simple
forms, requests of another driver's devices and DRA nodes whose devices are not known yet are
not judged; the driver's name is the configured one; what the claim index keeps of a claim; and
which extended resources the DRA nodes serve (Kubernetes 1.36+)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.kit.drakit import stored_device_classes
from vgpu_devcluster import dra_driver
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.core.dra import driver
from vgpu_operator.core.dra.selectors import Term, parse
from vgpu_operator.core.dra.unschedulable import (
    REASONS,
    DraOffer,
    claim_ask,
    claim_causes,
    claim_keys,
    offer,
    serves_extended,
)

A30 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A30"'


def published(tmp_path: Path) -> list[dict[str, Any]]:
    """The slices of two A30 nodes (2 whole GPUs each) and an H100 node."""
    slices = []
    for node, model in (("a30-0", "A30"), ("a30-1", "A30"), ("h100-0", "H100 80GB HBM3")):
        state = fs.init_state(tmp_path / f"{node}.json", model, 2, node=node)
        slices += dra_driver.resource_slices(node, state, node_uid=f"uid-{node}")
    return slices


@pytest.fixture
def dra(tmp_path: Path) -> DraOffer:
    """The A30 nodes in a dra pool, the H100 node outside it (1.35: no extended resources)."""
    return offer(stored_device_classes(), published(tmp_path), ["a30-0", "a30-1"])


def claim(
    device_class: str = "gpu.nvidia.com", *selectors: str, count: int | None = None
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if count is not None:
        exactly["count"] = count
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def pod(generated: str | None = "infer-0-gpu-x1") -> dict[str, Any]:
    """A pending pod whose claim comes from a template (its generated claim in its status)."""
    return {
        "metadata": {"name": "infer-0", "namespace": "team-a", "uid": "u1"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]},
        "status": {
            "phase": "Pending",
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": generated}]
            if generated
            else [],
        },
    }


def causes(dra: DraOffer, spec: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c.id, c.message) for c in claim_causes(pod(), {"team-a/infer-0-gpu-x1": spec}, dra)]


def test_the_double_publishes_the_devices_of_the_dra_nodes_only(dra: DraOffer) -> None:
    assert sorted((d.node, d.name) for d in dra.devices) == [
        ("a30-0", "gpu-0"),
        ("a30-0", "gpu-1"),
        ("a30-1", "gpu-0"),
        ("a30-1", "gpu-1"),
    ]
    [device] = [d for d in dra.devices if (d.node, d.name) == ("a30-0", "gpu-0")]
    assert device.attributes["gpu.nvidia.com/productName"] == "NVIDIA A30"
    assert device.attributes["gpu.nvidia.com/type"] == "gpu"


def test_a_claim_that_fits_says_nothing(dra: DraOffer) -> None:
    assert causes(dra, claim()) == []
    assert causes(dra, claim("gpu.nvidia.com", A30)) == []
    assert causes(dra, claim("gpu.nvidia.com", A30, count=2)) == []  # two per node


def test_a_missing_device_class_is_named(dra: DraOffer) -> None:
    [(cause, message)] = causes(dra, claim("gpu.example.com"))
    assert (cause, REASONS[cause]) == ("dra-device-class-missing", "DeviceClassMissing")
    assert message.startswith(
        "request gpu of ResourceClaim team-a/infer-0-gpu-x1 (the pod's claim gpu) asks for "
        "DeviceClass gpu.example.com, which does not exist (DeviceClasses: gpu.nvidia.com, "
        "mig.nvidia.com, vfio.gpu.nvidia.com)"
    )
    assert "Fix: install the driver" in message


def test_a_product_no_dra_node_publishes_is_named(dra: DraOffer) -> None:
    h100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
    [(cause, message)] = causes(dra, claim("gpu.nvidia.com", h100))
    assert (cause, REASONS[cause]) == ("dra-no-matching-device", "NoMatchingDRADevice")
    # the H100 node publishes it, but is no DRA node
    assert "no device published by a DRA node passes" in message
    assert f"`{h100}`" in message and "(DRA nodes: a30-0, a30-1)" in message
    assert "kubectl get resourceslices -o yaml" in message


def test_a_class_of_devices_nobody_publishes_is_named(dra: DraOffer) -> None:
    """mig.nvidia.com selects MIG devices; every A30 runs with MIG off (whole GPUs)."""
    [(cause, message)] = causes(dra, claim("mig.nvidia.com"))
    assert cause == "dra-no-matching-device"
    assert "device.attributes['gpu.nvidia.com'].type == 'mig'" in message


def test_more_devices_than_a_node_publishes_is_named(dra: DraOffer) -> None:
    [(cause, message)] = causes(dra, claim("gpu.nvidia.com", A30, count=3))
    assert cause == "dra-no-matching-device"
    assert "it asks for 3 devices and no DRA node publishes more than 2 passing" in message


def test_an_attribute_the_devices_do_not_have_matches_none(dra: DraOffer) -> None:
    """The double publishes no addressingMode (NVML reports none on these GPUs): the expression
    fails at run time on every device."""
    hmm = 'device.attributes["gpu.nvidia.com"].addressingMode == "HMM"'
    [(cause, _)] = causes(dra, claim("gpu.nvidia.com", hmm))
    assert cause == "dra-no-matching-device"


def test_a_qualified_attribute_is_read_by_its_domain(dra: DraOffer) -> None:
    bus = dra_driver.pci_bus_id(fs.bus_id(0))
    here = f"device.attributes['resource.kubernetes.io'].pciBusID == '{bus}'"
    assert causes(dra, claim("gpu.nvidia.com", here)) == []
    there = "device.attributes['resource.kubernetes.io'].pciBusID == '0000:ff:00.0'"
    assert [c for c, _ in causes(dra, claim("gpu.nvidia.com", there))] == ["dra-no-matching-device"]


@pytest.mark.parametrize(
    "expression",
    [
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0',
        'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("580.0.0"))',
        f'{A30} || device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"',
        f"!({A30})",
    ],
)
def test_other_selectors_are_not_evaluated(dra: DraOffer, expression: str) -> None:
    assert parse(expression) is None
    assert causes(dra, claim("gpu.nvidia.com", expression)) == []


def test_the_simple_forms_parse() -> None:
    assert parse(f"device.driver == 'gpu.nvidia.com' && {A30}") == [
        Term(None, True, "gpu.nvidia.com"),
        Term("gpu.nvidia.com/productName", True, "NVIDIA A30"),
    ]
    assert parse("device.attributes['x.io'].cores != 4 && device.attributes['x.io'].on == true")
    assert parse("device.attributes['x.io'].cores != 4") == [Term("x.io/cores", False, 4)]


def test_a_claim_not_generated_yet_or_not_read_is_not_checked(dra: DraOffer) -> None:
    spec = {"team-a/infer-0-gpu-x1": claim("gpu.example.com")}
    assert claim_causes(pod(generated=None), spec, dra) == []
    assert claim_causes(pod(), {}, dra) == []


def test_a_claim_of_another_drivers_devices_is_not_judged(dra: DraOffer) -> None:
    """Only the configured driver's slices are read: a class selecting another driver's devices
    may well fit (a NIC of its own driver, say)."""
    nic = {
        "metadata": {"name": "nic.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'nic.example.com'"}}]},
    }
    other = dataclasses.replace(dra, classes={**dra.classes, "nic.example.com": nic})
    assert causes(other, claim("nic.example.com")) == []
    # a selector naming no driver at all, on the driver's own attribute domain, is the driver's
    unpinned = {
        "metadata": {"name": "any-a30"},
        "spec": {"selectors": [{"cel": {"expression": A30.replace("A30", "L4")}}]},
    }
    mine = offer([*dra.classes.values(), unpinned], [], dra.dra_nodes)
    assert [c for c, _ in causes(mine, claim("any-a30"))] == []  # no node's devices known
    known = dataclasses.replace(mine, unknown=())
    assert [c for c, _ in causes(known, claim("any-a30"))] == ["dra-no-matching-device"]


def test_a_dra_node_not_known_yet_leaves_the_devices_unjudged(tmp_path: Path) -> None:
    """A DRA node that has published no slice yet, or is on its way into a pool, may hold what
    a claim asks; a missing class is certain all the same."""
    slices = published(tmp_path)
    late = offer(stored_device_classes(), slices, ["a30-0", "a30-1", "a30-2"])
    assert late.unknown == ("a30-2",)  # no slice of its own yet
    assert causes(late, claim("mig.nvidia.com")) == []
    moving = offer(stored_device_classes(), slices, ["a30-0", "a30-1"], unsettled=["a30-1"])
    assert moving.unknown == ("a30-1",)
    assert causes(moving, claim("mig.nvidia.com")) == []
    assert [c for c, _ in causes(moving, claim("gpu.example.com"))] == ["dra-device-class-missing"]


def test_the_configured_driver_name_is_the_one_matched(tmp_path: Path) -> None:
    """A driver installed under another name: its slices and the chart's classes (under their
    chart names) select its devices; the default driver's slices are not its."""
    renamed = []
    for s in published(tmp_path):
        spec = {**s["spec"], "driver": "gpu.example.com"}
        renamed.append({**s, "spec": spec})
    classes = [
        {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": cel}}]}}
        for name, cel in driver.device_classes("gpu.example.com").items()
    ]
    mine = offer(classes, renamed, ["a30-0", "a30-1"], driver="gpu.example.com")
    assert {d.driver for d in mine.devices} == {"gpu.example.com"}
    a30 = "device.attributes['gpu.example.com'].productName == 'NVIDIA A30'"
    assert causes(mine, claim("gpu.nvidia.com", a30, count=2)) == []
    [(cause, message)] = causes(mine, claim("mig.nvidia.com"))
    assert cause == "dra-no-matching-device"
    assert "device.attributes['gpu.example.com'].type == 'mig'" in message
    # the default driver's slices are not read as the configured driver's devices
    theirs = offer(classes, published(tmp_path), ["a30-0", "a30-1"], driver="gpu.example.com")
    assert theirs.devices == () and theirs.unknown == ("a30-0", "a30-1")


def test_the_claim_index_keeps_the_requests_of_a_claim_not_yet_allocated() -> None:
    spec = claim("gpu.nvidia.com", A30, count=2)
    spec["devices"]["requests"][0]["exactly"]["adminAccess"] = False  # not read
    pending = {"metadata": {"name": "c"}, "spec": spec, "status": {}}
    assert claim_ask(pending) == claim("gpu.nvidia.com", A30, count=2)
    allocated = {
        **pending,
        "status": {"allocation": {"devices": {"results": [{"driver": "gpu.nvidia.com"}]}}},
    }
    assert claim_ask(allocated) is None
    chooser = {"devices": {"requests": [{"name": "gpu", "firstAvailable": [{"name": "a"}]}]}}
    assert claim_ask({"spec": chooser}) is None  # nothing the checks read


def test_a_pod_names_the_claims_that_exist_by_now() -> None:
    p = pod()
    p["spec"]["resourceClaims"].append({"name": "shared", "resourceClaimName": "team-gpus"})
    assert claim_keys(p) == ["team-a/infer-0-gpu-x1", "team-a/team-gpus"]
    assert claim_keys(pod(generated=None)) == []


def asks(**limits: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}}


def test_extended_resources_are_served_by_the_dra_nodes_from_1_36(tmp_path: Path) -> None:
    """The chart's gpu.nvidia.com class maps nvidia.com/gpu (kept by a 1.36 apiserver): a pod
    asking at most as many as one DRA node publishes may be served there."""
    on_1_36 = offer(stored_device_classes(36), published(tmp_path), ["a30-0", "a30-1"])
    gpu = {"nvidia.com/gpu"}
    assert serves_extended(asks(**{"nvidia.com/gpu": "2"}), gpu, on_1_36)
    assert not serves_extended(asks(**{"nvidia.com/gpu": "3"}), gpu, on_1_36)  # 2 per node
    # a name no class maps, or a pod asking none of the names
    vgpu = {"nvidia.com/gpu", "volcano.sh/vgpu-memory"}
    both = asks(**{"nvidia.com/gpu": "1", "volcano.sh/vgpu-memory": "1000"})
    assert not serves_extended(both, vgpu, on_1_36)
    assert not serves_extended(asks(cpu="1"), gpu, on_1_36)
    # 1.35: the field is dropped, nothing is mapped
    on_1_35 = offer(stored_device_classes(), published(tmp_path), ["a30-0", "a30-1"])
    assert not serves_extended(asks(**{"nvidia.com/gpu": "1"}), gpu, on_1_35)
    # a DRA node not known yet may hold any count
    late = offer(stored_device_classes(36), published(tmp_path), ["a30-0", "a30-2"])
    assert serves_extended(asks(**{"nvidia.com/gpu": "8"}), gpu, late)

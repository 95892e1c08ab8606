"""The feature gates of the dra pools (core.dra.gates): each reading says on or off only from
evidence (the API served, a slice that kept shared counters, the gates a component starts
with), and not observable otherwise, with what was looked at."""

from __future__ import annotations

from typing import Any

from vgpu_operator.core.dra import gates

DRIVER = "gpu.nvidia.com"


def slice_(driver: str = DRIVER, counters: bool = False, on_device: bool = False) -> dict[str, Any]:
    device: dict[str, Any] = {"name": "gpu-0"}
    spec: dict[str, Any] = {"driver": driver, "nodeName": "n0", "devices": [device]}
    if counters:
        spec["sharedCounters"] = [{"name": "gpu-0-counter-set", "counters": {}}]
    if on_device:
        device["consumesCounters"] = [{"counterSet": "gpu-0-counter-set", "counters": {}}]
    return {"metadata": {"name": "n0-gpu.nvidia.com-abcde"}, "spec": spec}


def test_dra_is_proven_on_by_the_served_api_and_off_without_it() -> None:
    assert gates.dynamic_resource_allocation(["resource.k8s.io/v1"]).state == "on"
    off = gates.dynamic_resource_allocation(["resource.k8s.io/v1beta1"])
    assert off.state == "off" and "does not serve resource.k8s.io/v1" in off.why


def test_partitionable_devices_in_the_apiserver_is_proven_only_by_kept_counters() -> None:
    assert gates.partitionable_devices_apiserver([slice_(counters=True)], DRIVER).state == "on"
    assert gates.partitionable_devices_apiserver([slice_(on_device=True)], DRIVER).state == "on"
    unseen = gates.partitionable_devices_apiserver([slice_()], DRIVER)
    assert unseen.state == "not observable"  # off, or no driver publishing counters: unknown
    other = gates.partitionable_devices_apiserver([slice_("x.example.com", True)], DRIVER)
    assert other.state == "not observable"


def test_vc_schedulers_gate_is_read_from_the_gates_it_starts_with() -> None:
    assert gates.partitionable_devices_volcano({"DRAPartitionableDevices": True}).state == "on"
    off = gates.partitionable_devices_volcano({"DRAPartitionableDevices": False})
    assert off.state == "off" and "DRAPartitionableDevices=false" in off.why
    assert gates.partitionable_devices_volcano({}).state == "not observable"
    assert gates.partitionable_devices_volcano(None).why == "vc-scheduler was not found"


def test_dynamic_mig_is_the_plugins_own_setting_else_a_slice_else_only_what_is_said() -> None:
    assert gates.dynamic_mig([], DRIVER, {"DynamicMIG": False}, said=True).state == "off"
    assert gates.dynamic_mig([], DRIVER, {"DynamicMIG": True}, said=False).state == "on"
    assert gates.dynamic_mig([slice_(counters=True)], DRIVER, {}, said=False).state == "on"
    said = gates.dynamic_mig([slice_()], DRIVER, None, said=True)
    assert said.state == "not observable" and "dra.dynamicMIG: true" in said.why

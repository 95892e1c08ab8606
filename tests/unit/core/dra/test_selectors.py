"""What a DeviceClass says through its simple CEL selectors (core.dra.selectors): which driver's
devices it selects, and which extended resource it maps onto them (`extendedResourceName`,
kept by the apiserver from Kubernetes 1.36), for the configured driver's name whatever it is."""

from __future__ import annotations

from typing import Any

from vgpu_devcluster import dra_driver
from vgpu_operator.core.dra import driver
from vgpu_operator.core.dra.selectors import (
    Term,
    class_driver,
    extended_resources,
    matches,
    parse,
    pinned_to,
)


def device_class(name: str, *expressions: str, extended: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if extended is not None:
        spec["extendedResourceName"] = extended
    return {"metadata": {"name": name}, "spec": spec}


def test_the_chart_classes_map_nvidia_gpu_onto_whole_gpus() -> None:
    """As the driver's chart writes them for resource.k8s.io/v1 (the double's copy)."""
    assert extended_resources(dra_driver.device_classes(), "gpu.nvidia.com") == {
        "nvidia.com/gpu": ("gpu.nvidia.com",)
    }
    # another driver's name: the chart's classes select gpu.nvidia.com's devices, not its own
    assert extended_resources(dra_driver.device_classes(), "gpu.example.com") == {}


def test_classes_of_another_driver_name_are_that_drivers() -> None:
    classes = [
        device_class(name, cel, extended="nvidia.com/gpu" if name == "gpu.nvidia.com" else None)
        for name, cel in driver.device_classes("gpu.example.com").items()
    ]
    assert [class_driver(c, "gpu.example.com") for c in classes] == [True, True, True]
    assert not any(class_driver(c, "gpu.nvidia.com") for c in classes)
    assert extended_resources(classes, "gpu.example.com") == {"nvidia.com/gpu": ("gpu.nvidia.com",)}


def test_a_class_is_a_drivers_by_its_driver_or_its_attribute_domain() -> None:
    by_domain = device_class("l4", "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L4'")
    assert class_driver(by_domain, "gpu.nvidia.com")
    assert not class_driver(device_class("all"), "gpu.nvidia.com")  # selects every device
    unread = device_class("big", "device.capacity['gpu.nvidia.com'].memory.compareTo(x) >= 0")
    assert not class_driver(unread, "gpu.nvidia.com")
    negated = [Term(None, False, "gpu.nvidia.com")]
    assert pinned_to(negated, ["gpu.nvidia.com"]) is None
    # two classes may map the same name (the scheduler picks one: kubernetes/api@v0.36.0)
    twice = [
        device_class("a", "device.driver == 'gpu.nvidia.com'", extended="example.com/gpu"),
        device_class("b", "device.driver == 'gpu.nvidia.com'", extended="example.com/gpu"),
        device_class("c", "device.driver == 'nic.example.com'", extended="example.com/nic"),
    ]
    assert extended_resources(twice, "gpu.nvidia.com") == {"example.com/gpu": ("a", "b")}


def test_a_device_passes_the_terms_it_has_the_attributes_of() -> None:
    terms = parse(
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type != 'mig'"
    )
    assert terms is not None
    assert matches("gpu.nvidia.com", {"gpu.nvidia.com/type": "gpu"}, terms)
    assert not matches("gpu.nvidia.com", {"gpu.nvidia.com/type": "mig"}, terms)
    assert not matches("gpu.nvidia.com", {}, terms)  # no such attribute: a runtime error
    assert not matches("nic.example.com", {"gpu.nvidia.com/type": "gpu"}, terms)

"""The DRA prerequisites: each check on the cluster the DRA driver double builds (no finding),
then with one thing broken at a time (the finding naming it and its fix); a device plugin counts
as a second owner while kubelet shows its resources allocatable, not by what it left behind; the
driver's name and kubelet plugin are the configured ones."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.kit.drakit import stored_device_classes
from vgpu_devcluster import dra_driver
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.core.dra import driver
from vgpu_operator.core.dra.prerequisites import DraCluster, check
from vgpu_operator.core.rules import base
from vgpu_operator.models.findings import Finding, ObjectRef
from vgpu_operator.models.volcano import REGISTER_ANNOTATION

SERVED = ("v1", "apps/v1", "resource.k8s.io/v1", "resource.k8s.io/v1beta2")
DS_REF = ObjectRef(
    kind="DaemonSet", name=driver.PLUGIN_DAEMONSET, namespace=driver.PLUGIN_NAMESPACE
)


def node(
    name: str,
    registered: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    *,
    gone: bool = False,
) -> dict[str, Any]:
    """A node with the extended resources a device plugin `registered`, as kubelet shows them
    (capacity and allocatable); `gone`: the plugin has disconnected since, so kubelet shows them
    allocatable 0 and keeps the capacity (kubernetes/kubernetes@v1.35.4:
    pkg/kubelet/cm/devicemanager/manager.go `PluginDisconnected`, `GetCapacity`)."""
    capacity = {"cpu": "64", **(registered or {})}
    allocatable = {k: ("0" if gone and k in (registered or {}) else v) for k, v in capacity.items()}
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "status": {"capacity": capacity, "allocatable": allocatable},
    }


def plugin_pod(
    name: str, on: str, phase: str = "Running", ready: bool = True, **meta: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": driver.PLUGIN_NAMESPACE, **meta},
        "spec": {"nodeName": on},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


DAEMONSET = {"metadata": {"name": driver.PLUGIN_DAEMONSET, "namespace": driver.PLUGIN_NAMESPACE}}


def slices(tmp_path: Path, name: str, gpus: int = 2, generation: int = 1) -> list[dict[str, Any]]:
    """What the double publishes for a node with `gpus` A100s."""
    state = fs.init_state(tmp_path / f"{name}.json", "A100-SXM4-80GB", gpus, node=name)
    return dra_driver.resource_slices(name, state, node_uid=f"uid-{name}", generation=generation)


@pytest.fixture
def healthy(tmp_path: Path) -> DraCluster:
    """Two DRA nodes with their slices and a Ready plugin pod each, the chart's classes, a third
    node outside DRA with NVIDIA's device plugin and no DRA plugin."""
    return DraCluster(
        served=SERVED,
        device_classes=stored_device_classes(),
        resource_slices=[*slices(tmp_path, "dra-0"), *slices(tmp_path, "dra-1")],
        dra_nodes={"dra-0", "dra-1"},
        nodes=[node("dra-0"), node("dra-1"), node("plain", {"nvidia.com/gpu": "8"})],
        plugin_pods=[plugin_pod("p0", "dra-0"), plugin_pod("p1", "dra-1")],
        plugin_daemonset=DAEMONSET,
    )


def ids(found: list[Finding]) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(f.id, f.severity, tuple(str(o) for o in f.objects)) for f in found]


def test_the_doubles_cluster_meets_every_prerequisite(healthy: DraCluster) -> None:
    assert check(healthy) == []


def test_the_findings_are_the_rules_finding_type() -> None:
    assert base.Finding is Finding and base.ObjectRef is ObjectRef


def test_api_not_served_is_the_only_finding(healthy: DraCluster) -> None:
    c = dataclasses.replace(
        healthy, served=["v1", "resource.k8s.io/v1beta1"], device_classes=[], resource_slices=[]
    )
    assert check(c) == [
        Finding(
            id="dra-api-not-served",
            severity="error",
            objects=(),
            message="the apiserver does not serve resource.k8s.io/v1 (only "
            "resource.k8s.io/v1beta1 is served): the driver's DeviceClasses, ResourceSlices and "
            "the pods' ResourceClaims need DRA's GA API, in Kubernetes 1.34 and later",
            fix="upgrade the control plane to Kubernetes 1.34 or later; on 1.34+ the API was "
            "turned off: drop `resource.k8s.io/v1=false` (or `api/ga=false`) from "
            "kube-apiserver's --runtime-config",
        )
    ]
    (none,) = check(dataclasses.replace(healthy, served=["v1"]))
    assert "(no version of it is served)" in none.message
    betas = ["resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"]
    (two,) = check(dataclasses.replace(healthy, served=betas))
    assert "(only resource.k8s.io/v1beta1, resource.k8s.io/v1beta2 are served)" in two.message


def test_a_missing_device_class(healthy: DraCluster) -> None:
    kept = [dc for dc in healthy.device_classes if dc["metadata"]["name"] == "vfio.gpu.nvidia.com"]
    found = check(dataclasses.replace(healthy, device_classes=kept))
    assert ids(found) == [
        ("dra-deviceclass", "error", ("DeviceClass gpu.nvidia.com",)),
        ("dra-deviceclass", "error", ("DeviceClass mig.nvidia.com",)),
    ]
    assert found[0].message == (
        "DeviceClass gpu.nvidia.com is missing: pods whose claims ask for it stay Pending "
        "(the scheduler cannot allocate a claim of an unknown class)"
    )
    assert "--set gpuResourcesEnabledOverride=true" in found[0].fix
    assert "gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com" in found[0].fix
    (vfio,) = check(dataclasses.replace(healthy, device_classes=healthy.device_classes[:2]))
    assert (vfio.severity, vfio.objects) == (
        "warning",
        (ObjectRef(kind="DeviceClass", name="vfio.gpu.nvidia.com"),),
    )
    assert vfio.message.startswith("DeviceClass vfio.gpu.nvidia.com is missing: passthrough")


def test_a_device_class_that_selects_other_devices(healthy: DraCluster) -> None:
    classes = [dict(dc) for dc in healthy.device_classes]
    classes[1] = {
        "metadata": {"name": "mig.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
    }
    (found,) = check(dataclasses.replace(healthy, device_classes=classes))
    assert (found.id, found.severity) == ("dra-deviceclass", "warning")
    assert found.message.startswith(
        "DeviceClass mig.nvidia.com selects `device.driver == 'gpu.nvidia.com'` where the "
        "driver's chart selects `device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'mig'`"
    )
    # the same selector written over several lines is the same selector
    spaced = [dict(dc) for dc in healthy.device_classes]
    spaced[0] = {
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {
            "selectors": [{"cel": {"expression": driver.selector("gpu").replace(" && ", "\n&& ")}}]
        },
    }
    assert check(dataclasses.replace(healthy, device_classes=spaced)) == []


def test_a_dra_node_without_a_slice(healthy: DraCluster, tmp_path: Path) -> None:
    other_driver = slices(tmp_path, "dra-1")
    other_driver[0]["spec"]["driver"] = "compute-domain.nvidia.com"
    c = dataclasses.replace(healthy, resource_slices=[*slices(tmp_path, "dra-0"), *other_driver])
    (found,) = check(c)
    assert found == Finding(
        id="dra-node-slices",
        severity="error",
        objects=(ObjectRef(kind="Node", name="dra-1"),),
        message="DRA node dra-1 has no ResourceSlice of driver gpu.nvidia.com: no claim can be "
        "allocated there (its kubelet plugin has not published the node's GPUs)",
        fix="make the kubelet plugin run on dra-1 (see dra-plugin-placement) and check its log "
        "(`kubectl logs -n dra-driver-nvidia-gpu <plugin pod on dra-1>`): it publishes the "
        "slice once it has found the GPUs",
    )


def test_a_slice_without_devices_and_only_the_newest_generation_counts(
    healthy: DraCluster, tmp_path: Path
) -> None:
    old = slices(tmp_path, "dra-1", generation=1)
    new = slices(tmp_path, "dra-1", gpus=0, generation=2)
    c = dataclasses.replace(healthy, resource_slices=[*slices(tmp_path, "dra-0"), *old, *new])
    (found,) = check(c)
    assert (found.id, found.severity, found.objects) == (
        "dra-node-slices",
        "warning",
        (ObjectRef(kind="Node", name="dra-1"),),
    )
    assert "lists no device" in found.message


def test_the_plugin_not_installed(healthy: DraCluster) -> None:
    c = dataclasses.replace(healthy, plugin_pods=[], plugin_daemonset=None)
    assert ids(check(c)) == [
        (
            "dra-plugin-placement",
            "error",
            (f"DaemonSet {driver.PLUGIN_NAMESPACE}/{driver.PLUGIN_DAEMONSET}",),
        ),
    ]
    (found,) = check(c)
    assert "is not installed" in found.message and "(2 DRA nodes)" in found.message
    assert found.fix.startswith("install NVIDIA's DRA driver chart")
    # nothing to say when no node is meant for DRA
    assert check(dataclasses.replace(c, dra_nodes=set(), resource_slices=[])) == []


def test_the_plugin_missing_or_not_serving_on_a_dra_node(healthy: DraCluster) -> None:
    no_pod = dataclasses.replace(healthy, plugin_pods=[plugin_pod("p0", "dra-0")])
    (found,) = check(no_pod)
    assert (found.id, found.severity, found.objects) == (
        "dra-plugin-placement",
        "error",
        (DS_REF, ObjectRef(kind="Node", name="dra-1")),
    )
    assert found.message == (
        "the kubelet plugin of driver gpu.nvidia.com does not run on DRA node dra-1: the "
        "DaemonSet has no pod there; kubelet cannot prepare the claims allocated there and the "
        "node's slice is not kept current"
    )
    assert found.fix.startswith("let the DaemonSet's placement admit dra-1: the chart's")
    assert "feature.node.kubernetes.io/pci-10de.present=true" in found.fix

    for pod, state in (
        (plugin_pod("p1", "dra-1", phase="Pending"), "Pending"),
        (plugin_pod("p1", "dra-1", ready=False), "not Ready"),
        (plugin_pod("p1", "dra-1", deletionTimestamp="2026-01-01T00:00:00Z"), "terminating"),
    ):
        c = dataclasses.replace(healthy, plugin_pods=[plugin_pod("p0", "dra-0"), pod])
        (found,) = check(c)
        assert f"its pod is not serving (Pod dra-driver-nvidia-gpu/p1 is {state})" in found.message


def test_the_plugin_on_a_node_outside_dra(healthy: DraCluster) -> None:
    c = dataclasses.replace(
        healthy,
        nodes=[*healthy.nodes, node("extra")],
        plugin_pods=[*healthy.plugin_pods, plugin_pod("px", "extra")],
    )
    (found,) = check(c)
    assert (found.id, found.severity, found.objects) == (
        "dra-plugin-placement",
        "warning",
        (DS_REF, ObjectRef(kind="Node", name="extra")),
    )
    assert "runs on extra, which is not a DRA node" in found.message


def test_nvidia_device_plugin_on_a_dra_node_is_a_second_owner(healthy: DraCluster) -> None:
    nodes = [node("dra-0", {"nvidia.com/gpu": "2"}), node("dra-1", {"nvidia.com/gpu": "0"})]
    (found,) = check(dataclasses.replace(healthy, nodes=nodes))
    assert found == Finding(
        id="dra-second-owner",
        severity="error",
        objects=(ObjectRef(kind="Node", name="dra-0"),),
        message="dra-0's GPUs have two owners: NVIDIA's device plugin registers nvidia.com/gpu: 2 "
        "and driver gpu.nvidia.com publishes them (2 devices); kubelet and the DRA scheduler "
        "each hand out the same GPU",
        fix="keep NVIDIA's device plugin off dra-0 (its DaemonSet's placement, or the GPU "
        "Operator's node label `nvidia.com/gpu.deploy.device-plugin=false`); the DRA driver's "
        "chart assumes it is not there (`gpuResourcesEnabledOverride`)",
    )
    mig = [node("dra-0", {"nvidia.com/mig-1g.10gb": "7"}), node("dra-1")]
    (found,) = check(dataclasses.replace(healthy, nodes=mig))
    assert "registers nvidia.com/mig-1g.10gb: 7" in found.message


# What HAMi's plugin writes when it registers a node's GPU: its register annotation, and through
# kubelet its resources (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0: pkg/rm/rm.go
# `AddGPUResource` of util.ResourceName, ResourceCores, ResourceMem; their default names in
# doc/config.md).
HAMI = {REGISTER_ANNOTATION: "GPU-1,10,81920,NVIDIA-A100,true,hami-core:"}
HAMI_RESOURCES = {
    "volcano.sh/vgpu-number": "10",
    "volcano.sh/vgpu-cores": "100",
    "volcano.sh/vgpu-memory": "81920",
}


def test_hami_registration_on_a_dra_node_is_a_second_owner(healthy: DraCluster) -> None:
    registered = node("dra-1", HAMI_RESOURCES, HAMI)
    (found,) = check(dataclasses.replace(healthy, nodes=[node("dra-0"), registered]))
    assert (found.id, found.severity, found.objects) == (
        "dra-second-owner",
        "error",
        (ObjectRef(kind="Node", name="dra-1"),),
    )
    assert found.message.startswith(
        "dra-1's GPUs have two owners: HAMi's device plugin has registered them "
        "(volcano.sh/node-vgpu-register, volcano.sh/vgpu-number: 10) and driver gpu.nvidia.com "
        "publishes them (2 devices)"
    )
    assert "vgpu.volcano.sh/device-plugin" in found.fix


def test_what_a_plugin_that_left_leaves_behind_is_no_second_owner(healthy: DraCluster) -> None:
    """HAMi's register annotation stays on the Node after its plugin has gone, and kubelet keeps
    a gone plugin's capacity for a while: neither registers anything."""
    stale = [
        node("dra-0", HAMI_RESOURCES, HAMI, gone=True),
        node("dra-1", annotations=HAMI),  # the annotation written by hand, nothing registered
    ]
    assert check(dataclasses.replace(healthy, nodes=stale)) == []
    nvidia_gone = [node("dra-0", {"nvidia.com/gpu": "2"}, gone=True), node("dra-1")]
    assert check(dataclasses.replace(healthy, nodes=nvidia_gone)) == []
    # a renamed vGPU count (the operator config's resourceNames.count) is HAMi's all the same
    renamed = {"example.com/vgpu": "10"}
    c = dataclasses.replace(
        healthy,
        nodes=[node("dra-0"), node("dra-1", renamed, HAMI)],
        vgpu_count_names=("volcano.sh/vgpu-number", "example.com/vgpu"),
    )
    (found,) = check(c)
    assert "example.com/vgpu: 10" in found.message


def test_nvidia_gpu_mapped_onto_the_drivers_devices_keeps_the_plugin_a_second_owner(
    healthy: DraCluster,
) -> None:
    """From 1.36 the chart's gpu.nvidia.com class maps nvidia.com/gpu onto the driver's devices:
    where NVIDIA's device plugin still registers nvidia.com/gpu, a pod asking it gets the
    plugin's GPUs there, and claims get the same GPUs: still two owners, and the message says
    why the mapping changes nothing."""
    nodes = [node("dra-0", {"nvidia.com/gpu": "2"}), node("dra-1")]
    on_1_36 = dataclasses.replace(healthy, nodes=nodes, device_classes=stored_device_classes(36))
    (found,) = check(on_1_36)
    assert (found.id, found.objects) == (
        "dra-second-owner",
        (ObjectRef(kind="Node", name="dra-0"),),
    )
    assert found.message.endswith(
        "each hand out the same GPU (DeviceClass gpu.nvidia.com maps nvidia.com/gpu onto the "
        "driver's devices, yet a pod asking nvidia.com/gpu gets the device plugin's GPUs on a "
        "node whose allocatable has it (KEP-5004))"
    )


def test_the_configured_driver_and_kubelet_plugin_are_the_ones_checked(
    healthy: DraCluster, tmp_path: Path
) -> None:
    """A driver installed under another name, its plugin in a DaemonSet of another name: the
    chart's DeviceClasses must select its devices, and its slices are the ones read."""
    renamed_slices = []
    for s in healthy.resource_slices:
        renamed_slices.append({**s, "spec": {**s["spec"], "driver": "gpu.example.com"}})
    classes = [
        {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": cel}}]}}
        for name, cel in driver.device_classes("gpu.example.com").items()
    ]
    mine = dataclasses.replace(
        healthy,
        device_classes=classes,
        resource_slices=renamed_slices,
        driver="gpu.example.com",
        plugin_ref=("gpu-system", "example-plugin"),
    )
    assert check(mine) == []
    # the chart's own classes select gpu.nvidia.com's devices, not this driver's
    (wrong, *_) = check(dataclasses.replace(mine, device_classes=healthy.device_classes))
    assert wrong.id == "dra-deviceclass"
    assert "where the driver's chart selects `device.driver == 'gpu.example.com'" in wrong.message
    # gpu.nvidia.com's slices are not this driver's; its plugin's DaemonSet is the configured one
    missing = check(
        dataclasses.replace(
            mine, resource_slices=healthy.resource_slices, plugin_pods=[], plugin_daemonset=None
        )
    )
    assert [(f.id, str(f.objects[0])) for f in missing] == [
        ("dra-node-slices", "Node dra-0"),
        ("dra-node-slices", "Node dra-1"),
        ("dra-plugin-placement", "DaemonSet gpu-system/example-plugin"),
    ]
    assert "no ResourceSlice of driver gpu.example.com" in missing[0].message
    assert "--namespace gpu-system" in missing[2].fix


def test_slices_published_for_a_node_outside_dra_with_the_device_plugin(
    healthy: DraCluster, tmp_path: Path
) -> None:
    """`plain` has NVIDIA's device plugin; slices of the driver for it make it a second owner
    even though it is not meant for DRA (a plugin pod was there: its slices outlive it)."""
    c = dataclasses.replace(
        healthy, resource_slices=[*healthy.resource_slices, *slices(tmp_path, "plain", gpus=8)]
    )
    (found,) = check(c)
    assert (found.id, found.objects) == (
        "dra-second-owner",
        (ObjectRef(kind="Node", name="plain"),),
    )
    assert "nvidia.com/gpu: 8 and driver gpu.nvidia.com publishes them (8 devices)" in found.message


def test_errors_come_first(healthy: DraCluster) -> None:
    c = dataclasses.replace(
        healthy,
        device_classes=healthy.device_classes[:2],  # vfio missing: a warning
        nodes=[node("dra-0", {"nvidia.com/gpu": "2"}), node("dra-1")],  # an error
    )
    assert [(f.id, f.severity) for f in check(c)] == [
        ("dra-second-owner", "error"),
        ("dra-deviceclass", "warning"),
    ]

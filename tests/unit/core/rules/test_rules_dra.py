"""The DRA pools' rules (core.rules.dra) over a snapshot: the driver double's cluster
(vgpu_devcluster.dra_driver: the chart's DeviceClasses, one slice per node, a Ready kubelet plugin
pod on each DRA node) gives no finding; each prerequisite the API can show, broken once, is named
by its rule with the fix; the feature gates are reported as proven or not observable."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.kit.drakit import SELECTOR, kubelet_plugin_daemonset
from tests.kit.volcano_fixtures import deployment, gpu_node, pod
from vgpu_devcluster import dra_driver
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator import contract
from vgpu_operator.core.dra.observed import DraApi
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import load_config
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import MigSpec

NS = "dra-driver-nvidia-gpu"
SERVED = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2")
DRA_RULES = (
    "dra-api-not-served",
    "dra-deviceclass",
    "dra-node-slices",
    "dra-plugin-placement",
    "dra-second-owner",
    "dra-feature-gates",
)
WHOLE = NodeConfig(mode="dra", policy="pool", generation=1)


def slices(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    state = fs.init_state(tmp_path / f"{name}.json", "A100-SXM4-80GB", 2, node=name)
    return dra_driver.resource_slices(name, state, node_uid=f"uid-{name}")


def plugin_pod(on: str) -> dict[str, Any]:
    p = pod(NS, f"kubelet-plugin-{on}", node=on, labels=dict(SELECTOR))
    p["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return p


def dra_node(name: str, config: NodeConfig = WHOLE) -> dict[str, Any]:
    """A node of a dra pool: NVIDIA's device plugin is off there (no nvidia.com/gpu capacity)."""
    raw = gpu_node(name, "A100-SXM4-80GB", 2, released=config, tainted=False)
    for part in ("capacity", "allocatable"):
        raw["status"][part].pop(contract.NVIDIA_GPU_RESOURCE, None)
    return raw


@pytest.fixture
def cluster(tmp_path: Path) -> ClusterSnapshot:
    return ClusterSnapshot(
        config=load_config("dra: {}\n"),
        deployments=[deployment("v1.15.1")],
        daemonsets=[kubelet_plugin_daemonset()],
        nodes=[dra_node("dra-0"), dra_node("dra-1")],
        pods=[plugin_pod("dra-0"), plugin_pod("dra-1")],
        dra_api=DraApi(
            served=SERVED,
            device_classes=tuple(dra_driver.device_classes()),
            resource_slices=(*slices(tmp_path, "dra-0"), *slices(tmp_path, "dra-1")),
        ),
    )


def found(s: ClusterSnapshot) -> list[tuple[str, str, str]]:
    return [
        (f.id, f.severity, " ".join(str(o) for o in f.objects))
        for f in run_rules(s, only=DRA_RULES).findings
        if f.severity != "info"
    ]


def with_api(s: ClusterSnapshot, **changes: Any) -> ClusterSnapshot:
    assert s.dra_api is not None
    return dataclasses.replace(s, dra_api=dataclasses.replace(s.dra_api, **changes))


def test_the_doubles_dra_pool_meets_every_prerequisite(cluster: ClusterSnapshot) -> None:
    assert found(cluster) == []


def test_an_apiserver_without_resource_v1_is_the_one_finding(cluster: ClusterSnapshot) -> None:
    s = with_api(
        cluster, served=("resource.k8s.io/v1beta1",), device_classes=(), resource_slices=()
    )
    assert found(s) == [
        ("dra-api-not-served", "error", ""),
        ("dra-feature-gates", "error", "FeatureGate kube-apiserver/DynamicResourceAllocation"),
    ]


def test_a_missing_device_class_is_named(cluster: ClusterSnapshot) -> None:
    assert cluster.dra_api is not None
    classes = tuple(
        c for c in cluster.dra_api.device_classes if c["metadata"]["name"] != "mig.nvidia.com"
    )
    assert found(with_api(cluster, device_classes=classes)) == [
        ("dra-deviceclass", "error", "DeviceClass mig.nvidia.com")
    ]


def test_a_dra_node_without_a_slice_is_named(cluster: ClusterSnapshot) -> None:
    assert cluster.dra_api is not None
    kept = tuple(s for s in cluster.dra_api.resource_slices if s["spec"]["nodeName"] != "dra-1")
    assert found(with_api(cluster, resource_slices=kept)) == [
        ("dra-node-slices", "error", "Node dra-1")
    ]


def test_the_kubelet_plugin_missing_on_a_dra_node_is_named(cluster: ClusterSnapshot) -> None:
    s = dataclasses.replace(cluster, pods=[plugin_pod("dra-0")])
    assert found(s) == [
        (
            "dra-plugin-placement",
            "error",
            f"DaemonSet {NS}/dra-driver-nvidia-gpu-kubelet-plugin Node dra-1",
        )
    ]


def test_nvidias_device_plugin_still_registering_on_a_dra_node_is_a_second_owner(
    cluster: ClusterSnapshot,
) -> None:
    nodes = [dict(n) for n in cluster.nodes]
    registered = {"nvidia.com/gpu": "2"}  # as kubelet shows a registered plugin's resource
    nodes[0] = {
        **nodes[0],
        "status": {**nodes[0]["status"], "capacity": registered, "allocatable": registered},
    }
    assert found(dataclasses.replace(cluster, nodes=nodes)) == [
        ("dra-second-owner", "error", "Node dra-0")
    ]


def test_the_configured_driver_name_is_the_one_checked(cluster: ClusterSnapshot) -> None:
    """`dra.driver` names another driver: the double's slices and the chart's classes are
    gpu.nvidia.com's, so none of its own is there."""
    s = dataclasses.replace(cluster, config=load_config("dra: {driver: gpu.example.com}\n"))
    assert found(s) == [
        ("dra-node-slices", "error", "Node dra-0"),
        ("dra-node-slices", "error", "Node dra-1"),
        ("dra-deviceclass", "warning", "DeviceClass gpu.nvidia.com"),
        ("dra-deviceclass", "warning", "DeviceClass mig.nvidia.com"),
        ("dra-deviceclass", "warning", "DeviceClass vfio.gpu.nvidia.com"),
    ]


def test_a_node_in_transition_is_not_checked_and_nothing_without_a_dra_section(
    cluster: ClusterSnapshot,
) -> None:
    moving = dra_node("dra-1")
    moving["metadata"]["annotations"][contract.ANN_ROLLOUT] = "{}"
    s = dataclasses.replace(cluster, pods=[plugin_pod("dra-0")], nodes=[dra_node("dra-0"), moving])
    assert found(s) == []  # its plugin is paused on purpose while it moves
    assert (
        run_rules(dataclasses.replace(cluster, config=load_config("")), only=DRA_RULES).findings
        == []
    )
    assert run_rules(dataclasses.replace(cluster, dra_api=None), only=DRA_RULES).findings == []


def gate_findings(s: ClusterSnapshot) -> dict[str, tuple[str, str]]:
    return {
        str(f.objects[0]).removeprefix("FeatureGate "): (f.severity, f.message)
        for f in run_rules(s, only=["dra-feature-gates"]).findings
    }


def test_the_gates_of_whole_gpu_pools_are_proven_by_the_api(cluster: ClusterSnapshot) -> None:
    [(gate, (severity, message))] = gate_findings(cluster).items()
    assert gate == "kube-apiserver/DynamicResourceAllocation" and severity == "info"
    assert ": on (the apiserver serves resource.k8s.io/v1)" in message


def test_the_gates_of_dynamic_mig_are_proven_or_said_not_observable(
    cluster: ClusterSnapshot,
) -> None:
    dynamic = NodeConfig(mode="dra", policy="pool", mig=MigSpec(partitioning="dynamic"))
    s = dataclasses.replace(cluster, nodes=[dra_node("dra-0", dynamic), dra_node("dra-1")])
    gates = gate_findings(s)
    assert gates["kube-apiserver/DRAPartitionableDevices"][1].endswith(
        "not observable (no ResourceSlice of gpu.nvidia.com carries shared counters, which would "
        "prove it (the driver publishes them only under its DynamicMIG gate))"
    )
    assert "not observable" in gates["vc-scheduler/DRAPartitionableDevices"][1]
    assert "not observable" in gates["gpu.nvidia.com kubelet plugin/DynamicMIG"][1]
    assert "dra.dynamicMIG: false" in gates["gpu.nvidia.com kubelet plugin/DynamicMIG"][1]
    # vc-scheduler's flag proves it, either way; a slice with counters proves the apiserver's
    dep = deployment("v1.15.1")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["args"] = [
        *container.get("args", []),
        "--feature-gates=DRAPartitionableDevices=false",
    ]
    assert s.dra_api is not None
    counted = dict(s.dra_api.resource_slices[0])
    counted["spec"] = {**counted["spec"], "sharedCounters": [{"name": "gpu-0-counters"}]}
    s = dataclasses.replace(s, deployments=[dep])
    s = with_api(s, resource_slices=(counted, *s.dra_api.resource_slices[1:]))
    gates = gate_findings(s)
    assert gates["vc-scheduler/DRAPartitionableDevices"][0] == "error"
    assert (
        ": off (vc-scheduler runs with --feature-gates"
        in gates["vc-scheduler/DRAPartitionableDevices"][1]
    )
    assert ": on (ResourceSlice" in gates["kube-apiserver/DRAPartitionableDevices"][1]
    assert ": on (its ResourceSlices" in gates["gpu.nvidia.com kubelet plugin/DynamicMIG"][1]

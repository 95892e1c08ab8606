"""Legacy GPU sharing (seed 003) and Ascend MindCluster vNPU (seed 004)."""

from __future__ import annotations

from typing import Any

from tests.kit.volcano_fixtures import (
    edit,
    findings,
    gpu_node,
    healthy,
    obj,
    pod,
    replace,
    scheduler_cm,
    text,
)
from vgpu_operator.core.rules.base import Finding, ObjectRef
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot

SCHED = ObjectRef(kind="ConfigMap", name="volcano-scheduler-configmap", namespace="volcano-system")
MC = ObjectRef(kind="DaemonSet", name="ascend-device-plugin-daemonset", namespace="kube-system")


def with_conf(conf: str, snap: ClusterSnapshot | None = None) -> ClusterSnapshot:
    return edit(
        snap or healthy(),
        "configmaps",
        "volcano-scheduler-configmap",
        lambda c: c.update(data=scheduler_cm(conf)["data"]),
    )


def test_gpu_sharing_seed_is_reported_with_migration_guidance() -> None:
    got = findings(with_conf(text("seed003_gpu_sharing.conf")), "legacy-gpu-sharing")
    assert got == [
        Finding(
            id="legacy-gpu-sharing",
            severity="warning",
            objects=(SCHED,),
            message="deviceshare.GPUSharingEnable is on: GPU sharing is deprecated since "
            "Volcano v1.9",
            fix="migrate to vGPU (request volcano.sh/vgpu-number (and volcano.sh/vgpu-memory in "
            "MiB) instead; drain the legacy pods before switching a node, because the vGPU "
            "accounting does not see GPUs they hold (volcano #4573: such GPUs can be allocated "
            "twice)), then set deviceshare.GPUSharingEnable: false",
        )
    ]
    old = findings(with_conf(text("seed003_legacy_predicates.conf")), "legacy-gpu-sharing")
    assert [f.message for f in old] == [
        "predicates has predicate.GPUSharingEnable: true, the Volcano ≤ v1.8.2 form of GPU "
        "sharing (deprecated since v1.9)"
    ]
    assert findings(healthy(), "legacy-gpu-sharing") == []


def test_pods_requesting_gpu_memory_are_reported() -> None:
    gpu_pod1 = pod("default", "gpu-pod1", limits={"volcano.sh/gpu-memory": "1024"})
    got = findings(replace(healthy(), pods=[*healthy().pods, gpu_pod1]), "legacy-gpu-sharing")
    assert [(f.objects, f.message) for f in got] == [
        (
            (ObjectRef(kind="Pod", name="gpu-pod1", namespace="default"),),
            "the pod requests volcano.sh/gpu-memory (legacy GPU sharing, deprecated since Volcano "
            "v1.9)",
        )
    ]
    assert got[0].fix.startswith("Request volcano.sh/vgpu-number")


def mindcluster(conf: str, preset: str = "false") -> ClusterSnapshot:
    ds = obj("mindcluster_plugin_daemonset.yaml")
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("-presetVirtualDevice=false")] = f"-presetVirtualDevice={preset}"
    snap = with_conf(conf)
    return replace(snap, daemonsets=[*snap.daemonsets, ds])


def test_mindcluster_seed_is_consistent() -> None:
    assert findings(mindcluster(text("seed004_mindcluster.conf")), "ascend-mindcluster") == []


def test_mindcluster_without_init_params() -> None:
    conf = text("seed004_mindcluster.conf").split("configurations:")[0]
    got = findings(mindcluster(conf), "ascend-mindcluster")
    assert got == [
        Finding(
            id="ascend-mindcluster",
            severity="error",
            objects=(SCHED,),
            message="AscendMindClusterVNPUEnable is on but the init-params configuration does "
            'not set presetVirtualDevice: "false": 310P chips are not virtualized dynamically',
            fix='add presetVirtualDevice: "false" to the arguments of the `init-params` entry '
            "under configurations",
        )
    ]


def test_mindcluster_plugin_still_presets_virtual_devices() -> None:
    got = findings(
        mindcluster(text("seed004_mindcluster.conf"), preset="true"), "ascend-mindcluster"
    )
    assert [(f.severity, f.objects, f.message) for f in got] == [
        (
            "error",
            (SCHED, MC),
            "the scheduler virtualizes 310P chips dynamically but the device "
            "plugin runs with -presetVirtualDevice=true",
        )
    ]


def test_plugin_dynamic_but_scheduler_not() -> None:
    got = findings(mindcluster(text("seed000_scheduler.conf")), "ascend-mindcluster")
    assert [(f.severity, f.objects) for f in got] == [("warning", (SCHED, MC))]
    assert "nothing creates the virtual devices" in got[0].message


def test_hami_and_mindcluster_on_the_same_chips() -> None:
    conf = text("seed004_mindcluster.conf").replace(
        "deviceshare.AscendMindClusterVNPUEnable: true",
        "deviceshare.AscendMindClusterVNPUEnable: true\n"
        "      deviceshare.AscendHAMiVNPUEnable: true",
    )
    snap = mindcluster(conf)
    npu = gpu_node("npu-1", "RTX-4090", 0)
    npu["metadata"]["labels"].update({"ascend": "on", "accelerator": "huawei-Ascend310P"})
    hami = obj("ascend_hami_plugin_daemonset.yaml")
    snap = replace(snap, nodes=[*snap.nodes, npu], daemonsets=[*snap.daemonsets, hami])
    got = findings(snap, "ascend-mindcluster")
    assert [(f.severity, f.message) for f in got] == [
        (
            "error",
            "HAMi mode and MindCluster mode are both on and both device plugins serve the "
            "same chips on npu-1",
        )
    ]

    def apart(d: dict[str, Any]) -> None:
        d["spec"]["template"]["spec"]["nodeSelector"] = {"ascend": "hami-only"}

    separate = edit(snap, "daemonsets", "hami-ascend-device-plugin", apart)
    assert [f.severity for f in findings(separate, "ascend-mindcluster")] == ["info"]

"""Version rules (handshake, hard-coded allocatable names) and node rules (registration, MIG
geometry coverage, memory entries)."""

from __future__ import annotations

import json
from typing import Any

from tests.kit.volcano_fixtures import (
    deployment,
    edit,
    findings,
    gpu_node,
    healthy,
    register,
    replace,
    seed002,
)
from vgpu_operator.core.rules.base import Finding, ObjectRef
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.volcano import HANDSHAKE_ANNOTATION, REGISTER_ANNOTATION
from vgpu_operator.models.volcano_views import Version

SCHED = ObjectRef(kind="Deployment", name="volcano-scheduler", namespace="volcano-system")
DS = ObjectRef(kind="DaemonSet", name="volcano-device-plugin", namespace="kube-system")


def node(name: str) -> ObjectRef:
    return ObjectRef(kind="Node", name=name)


def plugin_image(tag: str) -> Any:
    def change(d: dict[str, Any]) -> None:
        d["spec"]["template"]["spec"]["containers"][0]["image"] = (
            f"docker.io/projecthami/volcano-vgpu-device-plugin:{tag}"
        )

    return change


def test_a_handshake_free_plugin_with_a_scheduler_that_wants_the_handshake() -> None:
    snap = edit(healthy(), "daemonsets", "volcano-device-plugin", plugin_image("v1.13.0"))
    got = findings(snap, "version-handshake")
    assert got == [
        Finding(
            id="version-handshake",
            severity="error",
            objects=(SCHED, DS),
            message="plugin v1.13.0 no longer writes volcano.sh/node-vgpu-handshake, but Volcano "
            "v1.15.0 ignores every node without it: no node gets any vGPU device, and nothing "
            "says so",
            fix="upgrade Volcano to v1.14.3+/v1.15.1+ or use plugin v1.12.0",
        )
    ]
    newer = replace(snap, deployments=[deployment("v1.15.1")])
    assert findings(newer, "version-handshake") == []
    assert findings(healthy(), "version-handshake") == []


def test_a_node_without_the_handshake_is_ignored_by_old_schedulers() -> None:
    snap = edit(
        healthy(),
        "nodes",
        "gpu-a",
        lambda n: n["metadata"]["annotations"].pop(HANDSHAKE_ANNOTATION),
    )
    got = findings(snap, "version-handshake")
    assert [(f.objects, f.message) for f in got] == [
        (
            (node("gpu-a"),),
            "Volcano v1.15.0 ignores gpu-a: it has no "
            "volcano.sh/node-vgpu-handshake (no plugin of v1.12.0 or earlier reports there)",
        )
    ]


def test_five_field_records_and_unknown_tags() -> None:
    old = edit(healthy(), "daemonsets", "volcano-device-plugin", plugin_image("v1.9.4"))
    assert [f.message for f in findings(old, "version-handshake")] == [
        "plugin v1.9.4 writes 5-field register records; Volcano v1.15.0 rejects them "
        "('wrong Node GPU info')"
    ]
    latest = edit(healthy(), "daemonsets", "volcano-device-plugin", plugin_image("latest"))
    assert [(f.severity, f.message) for f in findings(latest, "version-handshake")] == [
        (
            "info",
            "no version in the image tag of "
            "docker.io/projecthami/volcano-vgpu-device-plugin:latest: version checks are skipped",
        )
    ]


def test_newer_volcano_only_sees_the_default_names() -> None:
    snap = seed002(fixed=True, scheduler_version="v1.15.1")
    got = findings(snap, "scheduler-default-resource-names")
    assert got == [
        Finding(
            id="scheduler-default-resource-names",
            severity="error",
            objects=(SCHED,),
            message="the scheduler's ConfigMap names nvidia.com/gpu (not volcano.sh/vgpu-number), "
            "but Volcano v1.15.1 only sees nodes whose allocatable has volcano.sh/vgpu-number, "
            "volcano.sh/vgpu-cores, volcano.sh/vgpu-memory",
            fix="use the default volcano.sh/vgpu-* names (the operator renders them)",
            fixable_by_operator=True,
        ),
        Finding(
            id="scheduler-default-resource-names",
            severity="error",
            objects=(node("dev-app-2-150-master-1"),),
            message="Volcano v1.15.1 ignores dev-app-2-150-master-1: its allocatable lacks "
            "volcano.sh/vgpu-number",
            fix="make sure the device plugin runs there and registers the default names",
        ),
    ]
    assert findings(seed002(fixed=True), "scheduler-default-resource-names") == []  # v1.13
    assert (
        findings(
            replace(healthy(), deployments=[deployment("v1.15.1")]),
            "scheduler-default-resource-names",
        )
        == []
    )


def test_a_managed_node_the_plugin_never_registered() -> None:
    snap = edit(
        healthy(), "nodes", "gpu-a", lambda n: n["metadata"]["annotations"].pop(REGISTER_ANNOTATION)
    )
    got = findings(snap, "node-registration")
    assert got == [
        Finding(
            id="node-registration",
            severity="error",
            objects=(node("gpu-a"),),
            message="gpu-a has no volcano.sh/node-vgpu-register: the device plugin has not "
            "registered its GPUs, so the scheduler gives it no vGPU device",
            fix="check that a device plugin pod runs on the node (see plugin-placement) and its "
            "log",
        )
    ]
    assert findings(healthy(), "node-registration") == []


def test_registered_mode_disagrees_with_the_node_config_entry() -> None:
    def to_hami(c: dict[str, Any]) -> None:
        doc = json.loads(c["data"]["config.json"])
        doc["nodeconfig"][2]["operatingmode"] = "hami-core"
        c["data"]["config.json"] = json.dumps(doc)

    snap = edit(healthy(), "configmaps", "volcano-vgpu-node-config", to_hami)
    got = findings(snap, "node-registration")
    assert got == [
        Finding(
            id="node-registration",
            severity="error",
            objects=(node("gpu-b"),),
            message="gpu-b is registered in mode mig but its node-config entry says hami-core: "
            "the plugin pod read config.json before the entry changed (pods pinned to the other "
            "mode are rejected there)",
            fix="restart the device plugin pod on gpu-b",
            fixable_by_operator=True,
        )
    ]


def test_a_mig_model_the_scheduler_cannot_match() -> None:
    def drop_a100_40(c: dict[str, Any]) -> None:
        c["data"]["device-config.yaml"] = c["data"]["device-config.yaml"].replace(
            '"A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB", "A100-SXM4-40GB"', '"A800"'
        )

    snap = edit(healthy(), "configmaps", "volcano-vgpu-device-config", drop_a100_40)
    got = findings(snap, "mig-geometry-coverage")
    assert got == [
        Finding(
            id="mig-geometry-coverage",
            severity="error",
            objects=(
                node("gpu-b"),
                ObjectRef(
                    kind="ConfigMap", name="volcano-vgpu-device-config", namespace="kube-system"
                ),
            ),
            # the GPU named once (not 'NVIDIA-NVIDIA A100-SXM4-40GB')
            message="no knownMigGeometries model in kube-system/volcano-vgpu-device-config "
            "matches the NVIDIA A100-SXM4-40GB GPUs of gpu-b: the scheduler treats the node as "
            "hami-core ('mig type not found', vvdp #102) while its plugin runs MIG",
            fix="the operator appends the entry",
            fixable_by_operator=True,
        )
    ]
    assert findings(healthy(), "mig-geometry-coverage") == []


def test_a_mig_model_nothing_knows_needs_a_catalog_entry() -> None:
    nvl = gpu_node("gpu-n", "H200", 1, released=NodeConfig(mode="mig"))
    nvl["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-B200"
    got = findings(replace(healthy(), nodes=[*healthy().nodes, nvl]), "mig-geometry-coverage")
    assert [(f.message, f.fix, f.fixable_by_operator) for f in got] == [
        (
            "no knownMigGeometries model in kube-system/volcano-vgpu-device-config matches the "
            "NVIDIA-B200 GPUs of gpu-n (model taken from the GFD label 'NVIDIA-B200'; "
            "the real NVML name may differ): the scheduler treats the node as hami-core ('mig type "
            "not found', vvdp #102) while its plugin runs MIG",
            "add an entry whose models include a substring of 'NVIDIA-B200' to "
            "migGeometries.catalog in the operator config",
            False,
        )
    ]


def test_seed002_node_registers_too_many_memory_entries() -> None:
    got = [f for f in findings(seed002(fixed=True), "gpu-memory-factor") if f.severity != "info"]
    assert got == [
        Finding(
            id="gpu-memory-factor",
            severity="warning",
            objects=(node("dev-app-2-150-master-1"),),
            message="dev-app-2-150-master-1 registers 196512 memory entries with gpuMemoryFactor "
            "1 (the plugin warns above 60000; users then see volcano.sh/vgpu-memory: 0)",
            fix="set gpuMemoryFactor to at least 4 in the operator config (memory requests are "
            "then in units of 4 MiB)",
        )
    ]
    # a consistent cluster: only the unit, said always (a note)
    [unit] = findings(healthy(), "gpu-memory-factor")
    assert (unit.severity, unit.message) == (
        "info",
        "volcano.sh/vgpu-memory: a request of N means N x 1 MiB (gpuMemoryFactor 1, from "
        "ConfigMap kube-system/volcano-vgpu-device-config)",
    )
    assert unit.fix == "none: volcano.sh/vgpu-memory requests are in MiB"


def test_the_factor_the_plugin_applies_is_counted() -> None:
    snap = seed002(fixed=True)
    doubled = [
        register(
            n,
            None,
            snap.configmaps[1]["data"]["device-config.yaml"],
            version=Version(1, 11, 0),
            args=("--resource-name=nvidia.com/gpu", "--gpu-memory-factor=4"),
        )
        for n in [gpu_node("dev-app-2-150-master-1", "RTX-4090", 8)]
    ]

    def factor4(d: dict[str, Any]) -> None:
        d["spec"]["template"]["spec"]["containers"][0]["args"].append("--gpu-memory-factor=4")

    snap = edit(replace(snap, nodes=doubled), "daemonsets", "volcano-device-plugin", factor4)
    [said] = findings(snap, "gpu-memory-factor")  # no warning: only the unit, said
    assert said.severity == "info"
    assert said.message == (
        "volcano.sh/vgpu-memory: a request of N means N x 4 MiB (gpuMemoryFactor 4, from "
        "--gpu-memory-factor of DaemonSet volcano-system/volcano-device-plugin): a pod written "
        "for 3000 MiB asks for 3000 x 4 = 12000 MiB"
    )


def test_a_model_the_agent_reports_is_covered_by_the_operator() -> None:
    from vgpu_operator import contract
    from vgpu_operator.models.inventory import GpuInfo, Inventory, ProfileInfo

    inv = Inventory(
        gpus=[
            GpuInfo(
                index=0,
                uuid="GPU-nvl",
                name="NVIDIA H100 NVL",
                bus_id="0:0",
                memory_mib=95830,
                mig_capable=True,
                mig_current=True,
                mig_pending=True,
                profiles=[
                    ProfileInfo(id=19, name="1g.12gb", slices=1, memory_mib=11264, count=7, size=1)
                ],
                # the driver's listing: the H100 NVL has no catalog row to cover it from
                # (models.gpu_catalog_unconfirmed), only its agent's report
                profiles_source="driver",
            )
        ]
    )
    nvl = gpu_node("gpu-n", "H200", 1, released=NodeConfig(mode="mig"))
    nvl["metadata"]["annotations"][contract.ANN_INVENTORY] = inv.to_annotation()
    got = findings(replace(healthy(), nodes=[*healthy().nodes, nvl]), "mig-geometry-coverage")
    assert [(f.objects[0].name, f.fix, f.fixable_by_operator) for f in got] == [
        ("gpu-n", "the operator appends the entry", True)
    ]
    assert "matches the NVIDIA H100 NVL GPUs of gpu-n" in got[0].message
    assert "NVIDIA-NVIDIA" not in got[0].message


def test_mig_coverage_when_the_scheduler_runs_on_its_fallback() -> None:
    def elsewhere(c: dict[str, Any]) -> None:
        c["data"]["volcano-scheduler.conf"] = c["data"]["volcano-scheduler.conf"].replace(
            "deviceshare.VGPUEnable: true",
            "deviceshare.VGPUEnable: true\n      deviceshare.KnownGeometriesCMName: missing",
        )

    snap = edit(healthy(), "configmaps", "volcano-scheduler-configmap", elsewhere)
    got = findings(snap, "mig-geometry-coverage")
    assert [(f.message, f.fix, f.fixable_by_operator) for f in got] == [
        (
            "no knownMigGeometries model in the built-in defaults matches the "
            "NVIDIA A100-SXM4-40GB GPUs of gpu-b: the scheduler treats the node as hami-core "
            "('mig type not found', vvdp #102) while its plugin runs MIG",
            "point the scheduler at kube-system/volcano-vgpu-device-config, which covers the model "
            "(see device-config-location)",
            True,
        )
    ]

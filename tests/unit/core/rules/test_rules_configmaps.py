"""Where each component reads the device config, and rendered drift (vnpus: test_rules_vnpus)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from tests.kit.volcano_fixtures import (
    configmap,
    edit,
    findings,
    healthy,
    rendered_manifest,
    replace,
    scheduler_cm,
    seed002,
    text,
)
from vgpu_operator.core.rules.base import Finding, ObjectRef
from vgpu_operator.models.config import load_config

SCHED = ObjectRef(kind="ConfigMap", name="volcano-scheduler-configmap", namespace="volcano-system")


def cm(ns: str, name: str) -> ObjectRef:
    return ObjectRef(kind="ConfigMap", name=name, namespace=ns)


def test_seed002_before_the_fix_the_scheduler_reads_a_configmap_that_is_not_there() -> None:
    got = findings(seed002(fixed=False), "device-config-location")
    assert got == [
        Finding(
            id="device-config-location",
            severity="error",
            objects=(SCHED, cm("kube-system", "volcano-vgpu-device-config")),
            message="the scheduler loads the device config from "
            "kube-system/volcano-vgpu-device-config, which does not exist; it then runs on "
            "built-in defaults for the life of the process: no knownMigGeometries (every MIG "
            "node is treated as hami-core) and no memory-percentage resource",
            fix="point deviceshare.KnownGeometriesCMName/Namespace at the ConfigMap the plugin "
            "reads (volcano-vgpu-device-config in kube-system then volcano-system) and restart "
            "the scheduler",
            fixable_by_operator=True,
        )
    ]
    assert findings(seed002(fixed=True), "device-config-location") == []
    assert findings(healthy(), "device-config-location") == []


def test_pointing_the_scheduler_at_hami_scheduler_device_loses_nvidia() -> None:
    snap = healthy()
    snap = replace(
        snap,
        configmaps=[
            *[c for c in snap.configmaps if c["metadata"]["name"] != "volcano-scheduler-configmap"],
            scheduler_cm(
                text("seed004_hami_ascend.conf").replace(
                    "deviceshare.AscendHAMiVNPUEnable: true",
                    "deviceshare.AscendHAMiVNPUEnable: true\n      deviceshare.VGPUEnable: true",
                )
            ),
            configmap(
                "kube-system",
                "hami-scheduler-device",
                {"device-config.yaml": text("hami_scheduler_device.yaml")},
            ),
        ],
    )
    got = findings(snap, "device-config-location")
    assert [(f.severity, f.objects, f.message) for f in got] == [
        (
            "error",
            (SCHED, cm("kube-system", "hami-scheduler-device")),
            "the scheduler loads kube-system/hami-scheduler-device, which has no nvidia: section: "
            "its resource names are empty, so no pod is seen as a vGPU pod (with Ascend, the "
            "nvidia: and vnpus: sections must be in one ConfigMap)",
        )
    ]
    assert got[0].fixable_by_operator


def test_two_copies_and_a_scheduler_reading_the_other_one() -> None:
    snap = healthy()
    other = rendered_manifest().replace("deviceSplitCount: 10", "deviceSplitCount: 4")
    snap = replace(
        snap,
        configmaps=[
            *snap.configmaps,
            configmap(
                "volcano-system", "volcano-vgpu-device-config", {"device-config.yaml": other}
            ),
        ],
    )
    snap = edit(
        snap,
        "configmaps",
        "volcano-scheduler-configmap",
        lambda c: c.update(data=scheduler_cm(text("seed002_scheduler.conf"))["data"]),
    )
    got = findings(snap, "device-config-location")
    assert [(f.severity, f.message) for f in got] == [
        (
            "error",
            "the scheduler reads volcano-system/volcano-vgpu-device-config but the plugin "
            "reads kube-system/volcano-vgpu-device-config and their nvidia: sections differ in "
            "deviceSplitCount: the scheduler and the plugin disagree (e.g. on resource names: pods "
            "fail with UnexpectedAdmissionError)",
        ),
        (
            "warning",
            "volcano-vgpu-device-config exists in kube-system and volcano-system; the "
            "plugin reads only kube-system, so edits to the volcano-system copy do nothing for it "
            "(the copies differ in deviceSplitCount)",
        ),
    ]
    assert got[0].fix == (
        "set deviceshare.KnownGeometriesCMNamespace: kube-system and "
        "KnownGeometriesCMName: volcano-vgpu-device-config, then restart the "
        "scheduler"
    )


def test_an_operator_config_the_plugin_cannot_read() -> None:
    cfg = load_config(
        "deviceConfig: {namespace: gpu, name: my-device-config, key: device-config.yaml}"
    )
    got = findings(replace(healthy(), config=cfg), "device-config-location")
    assert got[0] == Finding(
        id="device-config-location",
        severity="error",
        objects=(cm("gpu", "my-device-config"),),
        message="the operator renders gpu/my-device-config, but the device plugin only reads "
        "volcano-vgpu-device-config in kube-system then volcano-system (the name is fixed in "
        "the plugin)",
        fix="set deviceConfig in the operator config to kube-system/volcano-vgpu-device-config",
    )


def test_drift_in_the_rendered_device_config() -> None:
    snap = edit(
        healthy(),
        "configmaps",
        "volcano-vgpu-device-config",
        lambda c: c["data"].update(
            {
                "device-config.yaml": c["data"]["device-config.yaml"].replace(
                    "resourceCountName: volcano.sh/vgpu-number", "resourceCountName: nvidia.com/gpu"
                )
            }
        ),
    )
    got = findings(snap, "device-config-rendered")
    assert got == [
        Finding(
            id="device-config-rendered",
            severity="warning",
            objects=(cm("kube-system", "volcano-vgpu-device-config"),),
            message="differs from the operator config in: resourceCountName",
            fix="let the operator render it (enforce mode), or change the operator config",
            fixable_by_operator=True,
        )
    ]
    assert findings(healthy(), "device-config-rendered") == []


def test_drift_in_a_node_config_entry() -> None:
    def flip(c: dict[str, Any]) -> None:
        doc = json.loads(c["data"]["config.json"])
        doc["nodeconfig"][2]["operatingmode"] = "hami-core"
        c["data"]["config.json"] = json.dumps(doc)

    snap = edit(healthy(), "configmaps", "volcano-vgpu-node-config", flip)
    got = findings(snap, "node-config-rendered")
    assert got == [
        Finding(
            id="node-config-rendered",
            severity="warning",
            objects=(
                cm("kube-system", "volcano-vgpu-node-config"),
                ObjectRef(kind="Node", name="gpu-b"),
            ),
            message="the config.json entry for gpu-b does not match its released configuration "
            "(vgpu.volcano.sh/config)",
            fix="let the operator render it (enforce mode); the node's plugin pod must then "
            "restart",
            fixable_by_operator=True,
        )
    ]
    assert findings(healthy(), "node-config-rendered") == []


def test_unmanaged_clusters_have_no_rendered_drift() -> None:
    snap = seed002(fixed=True)
    assert findings(snap, "device-config-rendered") == []
    assert findings(snap, "node-config-rendered") == []
    assert yaml.safe_load(text("seed002_device_config.yaml"))["nvidia"]["resourceCountName"] == (
        "nvidia.com/gpu"
    )

"""Device plugin rules: flags by version (seed 002's v1.11.0 args), placement, mount, and a
competing NVIDIA plugin."""

from __future__ import annotations

from typing import Any

from tests.unit.volcano.volcano_fixtures import (
    edit,
    findings,
    healthy,
    pod,
    replace,
    seed002,
)
from vgpu_operator.core.rules import Finding, ObjectRef

DS = ObjectRef(kind="DaemonSet", name="volcano-device-plugin", namespace="kube-system")
SEED_DS = ObjectRef(kind="DaemonSet", name="volcano-device-plugin", namespace="volcano-system")


def container(ds: dict[str, Any]) -> dict[str, Any]:
    return ds["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def test_seed002_plugin_registers_nvidia_com_gpu_the_scheduler_does_not_count() -> None:
    got = findings(seed002(fixed=False), "plugin-resource-name-flags")
    assert got == [
        Finding(
            id="plugin-resource-name-flags",
            severity="error",
            objects=(SEED_DS,),
            message="plugin v1.11.0 registers nvidia.com/gpu (--resource-name given), but the "
            "scheduler counts volcano.sh/vgpu-number (from kube-system/volcano-vgpu-device-config"
            ", built-in default): pods requesting either are bound without device annotations "
            "and fail with UnexpectedAdmissionError (device request not found)",
            fix="make them agree (seed 002 §5.1: three places): pass "
            "--resource-name=volcano.sh/vgpu-number and keep resourceCountName of the "
            "scheduler's ConfigMap the same, or, if nvidia.com/gpu is intended, point the "
            "scheduler at a ConfigMap whose resourceCountName is nvidia.com/gpu",
            fixable_by_operator=True,
        )
    ]
    # §2.2's namespace argument: the scheduler reads the same names; the three places agree
    assert findings(seed002(fixed=True), "plugin-resource-name-flags") == []
    # v1.12 takes its names from the ConfigMap: no flags to check
    assert findings(healthy(), "plugin-resource-name-flags") == []


def test_split_count_flag_of_v1_11_overrides_the_configmap() -> None:
    snap = edit(
        seed002(fixed=True),
        "configmaps",
        "volcano-vgpu-device-config",
        lambda c: c["data"].update(
            {
                "device-config.yaml": c["data"]["device-config.yaml"].replace(
                    "deviceSplitCount: 10", "deviceSplitCount: 5"
                )
            }
        ),
    )
    got = findings(snap, "plugin-config-flags-override")
    assert got == [
        Finding(
            id="plugin-config-flags-override",
            severity="warning",
            objects=(SEED_DS,),
            message="--device-split-count is given 10, which overrides deviceSplitCount=5 of the "
            "ConfigMap on every node without its own node-config value",
            fix="set --device-split-count to the ConfigMap's value",
            fixable_by_operator=True,
        )
    ]
    assert findings(seed002(fixed=True), "plugin-config-flags-override") == []


def test_explicit_flags_on_v1_12_are_reported() -> None:
    snap = edit(
        healthy(),
        "daemonsets",
        "volcano-device-plugin",
        lambda d: container(d).update(args=["--device-split-count=4", "--gpu-memory-factor=1"]),
    )
    got = findings(snap, "plugin-config-flags-override")
    assert [(f.severity, f.message, f.fix, f.fixable_by_operator) for f in got] == [
        (
            "warning",
            "--device-split-count is given 4, which overrides deviceSplitCount=10 of "
            "the ConfigMap on every node without its own node-config value",
            "remove --device-split-count from the plugin's args",
            False,
        ),
        (
            "info",
            "--gpu-memory-factor=1 is given explicitly: later edits of gpuMemoryFactor in "
            "the ConfigMap will be ignored by the plugin",
            "remove --gpu-memory-factor from the plugin's args",
            False,
        ),
    ]
    assert findings(healthy(), "plugin-config-flags-override") == []


def test_names_outside_volcano_sh_are_prefixed_by_v1_12() -> None:
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
    got = findings(snap, "plugin-resource-name-prefix")
    assert got == [
        Finding(
            id="plugin-resource-name-prefix",
            severity="error",
            objects=(
                DS,
                ObjectRef(
                    kind="ConfigMap", name="volcano-vgpu-device-config", namespace="kube-system"
                ),
            ),
            message="resourceCountName is nvidia.com/gpu: the plugin registers it as "
            "volcano.sh/nvidia.com/gpu, not the name pods request and the scheduler counts",
            fix="use a volcano.sh/ name (the defaults volcano.sh/vgpu-* are safest)",
        )
    ]
    # v1.11 registers flag names as given (seed 002 ran nvidia.com/gpu that way)
    assert findings(seed002(fixed=True), "plugin-resource-name-prefix") == []
    assert findings(healthy(), "plugin-resource-name-prefix") == []


def test_the_plugin_must_tolerate_the_policy_taint() -> None:
    snap = edit(
        healthy(),
        "daemonsets",
        "volcano-device-plugin",
        lambda d: d["spec"]["template"]["spec"]["tolerations"].pop(),
    )
    got = findings(snap, "plugin-placement")
    assert got[0] == Finding(
        id="plugin-placement",
        severity="error",
        objects=(DS, ObjectRef(kind="Node", name="gpu-a")),
        message="the vGPU device plugin does not tolerate volcano.sh/vgpu=hami:NoSchedule (set "
        "by the policy) on gpu-a, so it never runs there",
        fix="add a toleration for volcano.sh/vgpu to the DaemonSet",
    )
    assert [f.objects[1].name for f in got] == ["gpu-a", "gpu-b"]
    assert findings(healthy(), "plugin-placement") == []


def test_the_plugin_must_select_every_managed_node() -> None:
    snap = edit(
        healthy(),
        "daemonsets",
        "volcano-device-plugin",
        lambda d: d["spec"]["template"]["spec"].update(nodeSelector={"gpu": "on"}),
    )
    got = findings(snap, "plugin-placement")
    assert [f.message for f in got] == [
        "the vGPU device plugin cannot run on gpu-a: its nodeSelector needs gpu=on",
        "the vGPU device plugin cannot run on gpu-b: its nodeSelector needs gpu=on",
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "vgpu.volcano.sh/mode",
                                "operator": "In",
                                "values": ["hami-core"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    snap = edit(
        healthy(),
        "daemonsets",
        "volcano-device-plugin",
        lambda d: d["spec"]["template"]["spec"].update(affinity=affinity),
    )
    assert [f.message for f in findings(snap, "plugin-placement")] == [
        "the vGPU device plugin cannot run on gpu-b: its required node affinity matches none "
        "of the node's labels"
    ]


def test_a_missing_plugin_daemonset() -> None:
    got = findings(replace(healthy(), daemonsets=[]), "plugin-placement")
    assert [(f.severity, f.message) for f in got] == [
        (
            "error",
            "the vGPU device plugin DaemonSet was not found, but 2 node(s) need it (gpu-a, gpu-b)",
        )
    ]


def test_without_the_node_config_mount_every_node_is_hami_core() -> None:
    # Helm with nodeConfig.enabled=false mounts the device config at /config instead.
    def helm_without_node_config(d: dict[str, Any]) -> None:
        d["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] = (
            "volcano-vgpu-device-config"
        )

    snap = edit(healthy(), "daemonsets", "volcano-device-plugin", helm_without_node_config)
    got = findings(snap, "plugin-node-config-mounted")
    assert got == [
        Finding(
            id="plugin-node-config-mounted",
            severity="error",
            objects=(DS,),
            message="/config holds ConfigMap volcano-vgpu-device-config: the plugin reads no "
            "/config/config.json, so every node runs hami-core and per-node split counts and "
            "filters are ignored (MIG nodes are not MIG to it)",
            fix="mount ConfigMap volcano-vgpu-node-config at /config in container "
            "volcano-device-plugin (Helm: nodeConfig.enabled=true)",
        )
    ]
    assert findings(healthy(), "plugin-node-config-mounted") == []
    assert findings(seed002(fixed=True), "plugin-node-config-mounted") == []


def test_nvidia_device_plugin_still_on_a_vgpu_node() -> None:
    # Seed 002 §1.2.2: the pod that had to be deleted by hand.
    nv = pod(
        "kube-system",
        "nvidia-device-plugin-daemonset-vx6fk",
        node="gpu-a",
        labels={"app": "nvidia-device-plugin-daemonset"},
        image="nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
    )
    got = findings(replace(healthy(), pods=[*healthy().pods, nv]), "nvidia-device-plugin-conflict")
    assert got == [
        Finding(
            id="nvidia-device-plugin-conflict",
            severity="error",
            objects=(
                ObjectRef(
                    kind="Pod", name="nvidia-device-plugin-daemonset-vx6fk", namespace="kube-system"
                ),
                ObjectRef(kind="Node", name="gpu-a"),
            ),
            message="NVIDIA's device plugin pod nvidia-device-plugin-daemonset-vx6fk runs on "
            "vGPU node gpu-a: two plugins advertise the same GPUs (after a restart "
            "nvidia.com/gpu reappears with the physical count, HAMi #829)",
            fix="set disableNvidiaDevicePlugin: true on the node's policy (GPU Operator), or "
            "exclude vgpu.volcano.sh/mode nodes from that DaemonSet",
        )
    ]
    elsewhere = dict(nv, spec={**nv["spec"], "nodeName": "cpu-1"})
    assert (
        findings(
            replace(healthy(), pods=[*healthy().pods, elsewhere]), "nvidia-device-plugin-conflict"
        )
        == []
    )

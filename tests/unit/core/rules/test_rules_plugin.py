"""Device plugin rules: flags by version (seed 002's v1.11.0 args), placement, mount, and a
competing NVIDIA plugin."""

from __future__ import annotations

from typing import Any

from tests.kit.volcano_fixtures import (
    edit,
    findings,
    gpu_node,
    healthy,
    pod,
    replace,
    seed002,
)
from vgpu_operator.core.rules.base import Finding, ObjectRef
from vgpu_operator.core.volcano.placement import placements
from vgpu_operator.models.config import load_config
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import MigLayout, MigSpec

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
            fix="make them agree (the plugin's flag, the scheduler's ConfigMap and the pod's "
            "request must name the same resource): pass "
            "--resource-name=volcano.sh/vgpu-number and keep resourceCountName of the "
            "scheduler's ConfigMap the same, or, if nvidia.com/gpu is intended, point the "
            "scheduler at a ConfigMap whose resourceCountName is nvidia.com/gpu",
            fixable_by_operator=True,
        )
    ]
    # with the scheduler's `deviceshare.KnownGeometriesCMNamespace: volcano-system` (the seed's
    # fix) it reads the same names; the three places agree
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


PLACE = "vgpu.volcano.sh/device-plugin"
SHIPPED_TOLERATIONS = [
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
    {"key": "volcano.sh/gpu-memory", "operator": "Exists", "effect": "NoSchedule"},
]


def shipped(ds: dict[str, Any]) -> None:
    """The DaemonSet as HAMi ships it (v1.12.0): no nodeSelector, two tolerations."""
    spec = ds["spec"]["template"]["spec"]
    spec.pop("nodeSelector", None)
    spec["tolerations"] = [dict(t) for t in SHIPPED_TOLERATIONS]


def test_the_shipped_plugin_gets_the_exact_placement_patch() -> None:
    # one patch the operator can apply, not one error per node
    snap = edit(healthy(), "daemonsets", "volcano-device-plugin", shipped)
    got = findings(snap, "plugin-placement")
    patch = (
        '{"spec":{"template":{"spec":{"nodeSelector":{"vgpu.volcano.sh/device-plugin":"hami"},'
        '"tolerations":[{"key":"CriticalAddonsOnly","operator":"Exists"},{"effect":"NoSchedule",'
        '"key":"volcano.sh/gpu-memory","operator":"Exists"},{"effect":"NoSchedule",'
        '"key":"volcano.sh/vgpu","operator":"Equal","value":"hami"}]}}}}'
    )
    assert got == [
        Finding(
            id="plugin-placement",
            severity="error",
            objects=(DS,),
            message="the vGPU device plugin does not run exactly on the 2 node(s) labelled "
            f"{PLACE}=hami: not on gpu-a (it does not tolerate volcano.sh/vgpu=hami:NoSchedule); "
            "gpu-b (it does not tolerate volcano.sh/vgpu=hami:NoSchedule)",
            fix="kubectl -n kube-system patch daemonset volcano-device-plugin --type=strategic "
            f"-p '{patch}' (enforce mode applies it; it restarts the plugin pods, so it counts "
            "as a restart under restarts.minIntervalSeconds)",
            fixable_by_operator=True,
        )
    ]
    assert findings(healthy(), "plugin-placement") == []


def test_a_plugin_on_a_static_mig_node_is_an_error() -> None:
    # static MIG nodes are not vGPU nodes: a plugin reaching them is reported
    static = NodeConfig(
        mode="mig",
        policy="h100-static",
        generation=1,
        mig=MigSpec(partitioning="static", layout=[MigLayout(profiles={"1g.10gb": 7})]),
    )
    snap = healthy()
    snap = replace(
        snap,
        nodes=[
            *snap.nodes,
            gpu_node("h100-0", "H100-80GB-HBM3", 8, released=static, tainted=False),
        ],
    )
    snap = edit(
        snap,
        "daemonsets",
        "volcano-device-plugin",
        lambda d: d["spec"]["template"]["spec"].pop("nodeSelector"),
    )
    [got] = findings(snap, "plugin-placement")
    assert got.severity == "error" and got.fixable_by_operator
    assert got.message.endswith("but on h100-0 (static MIG: NVIDIA's device plugin serves it)")
    assert '"nodeSelector":{"vgpu.volcano.sh/device-plugin":"hami"}' in got.fix
    assert '"tolerations"' not in got.fix  # it tolerates the policy taint already


def test_a_placement_that_is_right_by_chance_is_a_note_kept_until_a_node_needs_it() -> None:
    # exact today: the operator keeps it rather than roll every plugin pod (adoption of a
    # hand-made placement, core.volcano.config_adoption); the note still says why and how to fix it
    snap = edit(
        healthy(),
        "daemonsets",
        "volcano-device-plugin",
        lambda d: d["spec"]["template"]["spec"].update(
            nodeSelector={"nvidia.com/gpu.present": "true"}
        ),
    )
    [got] = findings(snap, "plugin-placement")
    assert got.severity == "info"
    assert "a node joining a static-MIG or whole-gpu pool would get it" in got.message
    assert got.fix.startswith(
        "kubectl -n kube-system patch daemonset volcano-device-plugin --type=strategic -p "
        '\'{"spec":{"template":{"spec":{"nodeSelector":{"vgpu.volcano.sh/device-plugin":"hami"}}}}}\''
    )


def test_no_patch_when_restarts_are_not_allowed() -> None:
    snap = healthy(load_config("restarts: {allowed: false}"))
    snap = edit(snap, "daemonsets", "volcano-device-plugin", shipped)
    [got] = findings(snap, "plugin-placement")
    assert not got.fixable_by_operator
    assert got.fix.endswith("(the operator does not apply it while restarts.allowed is false)")


def test_the_users_own_selector_excluding_pool_nodes_is_reported_not_patched() -> None:
    snap = edit(
        healthy(),
        "daemonsets",
        "volcano-device-plugin",
        lambda d: d["spec"]["template"]["spec"].update(nodeSelector={"gpu": "on"}),
    )
    got = findings(snap, "plugin-placement")
    assert [f.message for f in got] == [
        "the vGPU device plugin cannot run on gpu-a: its nodeSelector needs gpu=on (the "
        "DaemonSet's own placement; the operator does not override it)",
        "the vGPU device plugin cannot run on gpu-b: its nodeSelector needs gpu=on (the "
        "DaemonSet's own placement; the operator does not override it)",
    ]
    assert not any(f.fixable_by_operator for f in got)
    [p] = placements(snap)
    assert p.patch is None and [n for n, _ in p.excluded] == ["gpu-a", "gpu-b"]
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
        "of the node's labels (the DaemonSet's own placement; the operator does not override it)"
    ]


def test_an_unmanaged_cluster_is_checked_node_by_node() -> None:
    # no node carries the operator's released config: no placement to keep, the old check
    snap = healthy()
    for node in snap.nodes:
        node["metadata"]["annotations"].pop("vgpu.volcano.sh/config")
    snap = edit(
        snap,
        "daemonsets",
        "volcano-device-plugin",
        lambda d: d["spec"]["template"]["spec"]["tolerations"].pop(),
    )
    got = findings(snap, "plugin-placement")
    assert [f.message for f in got] == [
        "the vGPU device plugin does not tolerate volcano.sh/vgpu=hami:NoSchedule (set by the "
        f"policy) on {n}, so it never runs there"
        for n in ("gpu-a", "gpu-b")
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
    # Seed 002 (docs/from-a-hand-configured-cluster.md): NVIDIA's plugin pod on a node just
    # labelled and tainted for vGPU, which
    # the manual procedure deletes by hand (`kubectl delete pod nvidia-device-plugin-...`).
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

"""A static MIG pool is NVIDIA's: its nodes run NVIDIA's own device plugin with a MIG strategy,
untainted and unlabelled for HAMi's. HAMi's node-config entry for such a node filters every GPU,
so a stray HAMi plugin pod there registers nothing, and no rule reports the pool as broken."""

from __future__ import annotations

import json
from typing import Any

from tests.kit.volcano_fixtures import (
    deployment,
    edit,
    findings,
    gpu_node,
    healthy,
    pod,
    replace,
    text,
)
from vgpu_devcluster.fakeplugin import simulate_registration
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.volcano.render import render_node_config
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import MigLayout, MigSpec
from vgpu_operator.models.volcano_views import Version

NOW = "2026-02-01T00:00:00Z"
STATIC = NodeConfig(
    mode="mig",
    policy="h100-static-mig",
    generation=1,
    mig=MigSpec(partitioning="static", layout=[MigLayout(profiles={"1g.10gb": 7})]),
)
DYNAMIC = NodeConfig(mode="mig", policy="a100-dynamic-mig", generation=1)
NVIDIA_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"


def node_entries(cm_data: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in json.loads(cm_data["config.json"])["nodeconfig"]}


def test_a_static_mig_nodes_entry_filters_every_gpu() -> None:
    released = {"h100-0": STATIC, "a100-0": DYNAMIC}
    out = render_node_config(None, released, OperatorConfig(), NOW, {"h100-0": list(range(8))})
    got = node_entries(out.data)
    assert got["h100-0"]["operatingmode"] == "hami-core"
    assert got["h100-0"]["filterdevices"] == {"uuid": [], "index": [0, 1, 2, 3, 4, 5, 6, 7]}
    assert got["a100-0"]["operatingmode"] == "mig"  # dynamic MIG stays HAMi's
    assert got["a100-0"]["filterdevices"] == {"uuid": [], "index": []}
    # GPUs not known yet: every index a policy may name
    unknown = node_entries(render_node_config(None, released, OperatorConfig(), NOW).data)
    assert unknown["h100-0"]["filterdevices"]["index"] == list(range(64))


def test_a_stray_plugin_pod_on_a_static_node_registers_nothing() -> None:
    h100 = gpu_node("h100-0", "H100-80GB-HBM3", 8, released=STATIC, tainted=False)
    out = render_node_config(None, {"h100-0": STATIC}, OperatorConfig(), NOW, {"h100-0": None})
    reg = simulate_registration(
        h100,
        out.data["config.json"],
        text("manifest_device_config.yaml"),
        version=Version(1, 12, 0),
    )
    assert reg.gpus == [] and reg.mode == "hami-core"


def static_pool(snapshot: ClusterSnapshot | None = None) -> ClusterSnapshot:
    """The healthy cluster plus the demo's static H100 pool: no taint, no label, NVIDIA's own
    device plugin running there with a MIG strategy, its node-config entry rendered."""
    snap = snapshot or healthy()
    h100 = gpu_node("h100-0", "H100-80GB-HBM3", 8, released=STATIC, tainted=False)
    snap = replace(
        snap,
        nodes=[*snap.nodes, h100],
        pods=[
            *snap.pods,
            pod(
                "kube-system",
                "nvidia-device-plugin-daemonset-h100",
                node="h100-0",
                labels={"app": "nvidia-device-plugin-daemonset"},
                image=NVIDIA_PLUGIN_IMAGE,
            ),
        ],
    )

    def rerender(cm: dict[str, Any]) -> None:
        released = {n["metadata"]["name"]: snap.released(n) for n in snap.nodes}
        rendered = render_node_config(cm, released, snap.config, NOW, snap.gpus_by_node)
        cm["data"] = rendered.data
        cm["metadata"]["annotations"].update(rendered.annotations)

    return edit(snap, "configmaps", "volcano-vgpu-node-config", rerender)


def test_a_static_pool_raises_no_error() -> None:
    # none of plugin-placement, scheduler-default-resource-names, node-registration,
    # mig-geometry-coverage or nvidia-device-plugin-conflict reports the static pool (the last
    # one's fix, disableNvidiaDevicePlugin: true, is one the CRD forbids for static MIG)
    snap = static_pool(replace(healthy(), deployments=[deployment("v1.15.1")]))
    results = run_rules(snap)
    worse = [(f.id, f.message) for f in results.findings if f.severity != "info"]
    assert worse == []
    notes = {f.id for f in results.findings}
    assert notes == {"version-handshake", "gpu-memory-factor"}  # v1.12.0 with v1.15.1; the unit
    assert [n["metadata"]["name"] for n in snap.vgpu_nodes] == ["gpu-a", "gpu-b"]
    assert [n["metadata"]["name"] for n in snap.mig_nodes] == ["gpu-b"]


def test_fixes_for_an_nvidia_plugin_on_a_vgpu_node_are_ones_the_crd_allows() -> None:
    snap = static_pool()
    snap = replace(
        snap,
        pods=[
            *snap.pods,
            pod(
                "kube-system",
                "nvidia-device-plugin-daemonset-a",
                node="gpu-a",
                labels={"app": "nvidia-device-plugin-daemonset"},
                image=NVIDIA_PLUGIN_IMAGE,
            ),
        ],
    )
    got = findings(snap, "nvidia-device-plugin-conflict")
    assert [f.objects[1].name for f in got] == ["gpu-a"]  # not h100-0: static MIG is NVIDIA's

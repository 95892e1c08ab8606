"""HAMi's volcano-vgpu-device-plugin before v1.12.0 reads no per-node values from config.json
(split count, filter, core scaling): its command-line flags decide. The simulated plugin does the
same, and a policy whose per-node values such a plugin ignores is a warning
(`plugin-node-overrides`)."""

from __future__ import annotations

from typing import Any

from tests.kit.volcano_fixtures import edit, findings, gpu_node, healthy, text
from vgpu_devcluster.fakeplugin import simulate_registration
from vgpu_operator import contract
from vgpu_operator.core.volcano.render import render_node_config
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import HamiCoreSpec
from vgpu_operator.models.volcano_views import Version

NOW = "2026-02-01T00:00:00Z"
HAMI = NodeConfig(mode="hami-core", policy="rtx4090-hami-core", generation=1)


def test_the_simulated_v1_11_plugin_ignores_the_node_entry() -> None:
    rtx = gpu_node("gpu-a", "RTX-4090", 2, released=HAMI)
    spec = HamiCoreSpec(deviceSplitCount=4, filterDevices={"index": [1]})
    rc = HAMI.model_copy(update={"hami_core": spec})
    node_json = render_node_config(None, {"gpu-a": rc}, OperatorConfig(), NOW).data["config.json"]
    device = text("manifest_device_config.yaml")
    old = simulate_registration(
        rtx, node_json, device, version=Version(1, 11, 0), args=("--device-split-count=10",)
    )
    assert [g.count for g in old.gpus] == [10, 10]  # both GPUs, the flag's split count
    assert old.allocatable == {
        "volcano.sh/vgpu-number": "20",
        "volcano.sh/vgpu-cores": "200",
        "volcano.sh/vgpu-memory": str(2 * 32767),
    }
    new = simulate_registration(rtx, node_json, device, version=Version(1, 12, 0))
    assert [g.count for g in new.gpus] == [4]  # v1.12 reads the entry: split 4, GPU 1 filtered


def test_a_policy_split_count_a_v1_11_plugin_ignores_is_a_warning() -> None:
    rc = HAMI.model_copy(update={"hami_core": HamiCoreSpec(deviceSplitCount=4)})

    def old_plugin(ds: dict[str, Any]) -> None:
        c = ds["spec"]["template"]["spec"]["containers"][0]
        c["image"] = "docker.io/projecthami/volcano-vgpu-device-plugin:v1.11.0"
        c["args"] = ["--device-split-count=10"]

    snap = edit(healthy(), "daemonsets", "volcano-device-plugin", old_plugin)
    snap = edit(
        snap,
        "nodes",
        "gpu-a",
        lambda n: n["metadata"]["annotations"].update({contract.ANN_CONFIG: rc.to_annotation()}),
    )
    [got] = findings(snap, "plugin-node-overrides")
    assert got.severity == "warning"
    assert got.message == (
        "plugin v1.11.0 ignores the per-node values of policy rtx4090-hami-core on 1 node(s) "
        "(gpu-a): deviceSplitCount 4 (the plugin uses --device-split-count=10); only plugin "
        "v1.12.0 and later read them from config.json"
    )
    same = HAMI.model_copy(update={"hami_core": HamiCoreSpec(deviceSplitCount=10)})
    snap = edit(
        snap,
        "nodes",
        "gpu-a",
        lambda n: n["metadata"]["annotations"].update({contract.ANN_CONFIG: same.to_annotation()}),
    )
    assert findings(snap, "plugin-node-overrides") == []
    assert findings(healthy(), "plugin-node-overrides") == []  # v1.12 reads them

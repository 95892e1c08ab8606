"""HAMi's Ascend plugin and its per-node config (hami-device-node-config): the plugin must be
given --node_config_file to read the file it mounts, every node entry says hami-vnpu-core, and
the global default comes from the plugin's own device config."""

from __future__ import annotations

from tests.kit.volcano_fixtures import (
    ascend_daemonset,
    configmap,
    findings,
    gpu_node,
    healthy,
    replace,
)
from vgpu_operator.core.volcano.render import render_ascend_node_config
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig, load_config
from vgpu_operator.models.node import NodeConfig

NOW = "2026-02-01T00:00:00Z"


def ascend_cluster(args: list[str] | None = None) -> ClusterSnapshot:
    cfg = load_config("ascendVnpu: {enabled: true}")
    snap = healthy(cfg)
    npu = gpu_node("npu-0", "RTX-4090", 0, released=NodeConfig(mode="ascend-vnpu"))
    ds = ascend_daemonset()
    if args is not None:
        ds["spec"]["template"]["spec"]["containers"][0]["args"] = args
    return replace(snap, nodes=[*snap.nodes, npu], daemonsets=[*snap.daemonsets, ds])


def test_the_ascend_plugin_must_read_the_node_config_it_mounts() -> None:
    # the shipped DaemonSet mounts /node-config.yaml but never passes the flag
    shipped = ascend_daemonset()["spec"]["template"]["spec"]
    assert "--node_config_file" not in " ".join(shipped["containers"][0]["args"])
    [got] = findings(ascend_cluster(), "ascend-node-config-file")
    assert got.severity == "error"
    assert got.message.startswith(
        "container device-plugin runs without --node_config_file: hami-device-node-config is "
        "mounted at /node-config.yaml but never read"
    )
    assert (
        got.fix == "add --node_config_file=/node-config.yaml to the args of container device-plugin"
    )
    fixed = ["--config_file", "/device-config.yaml", "--node_config_file=/node-config.yaml"]
    assert findings(ascend_cluster(fixed), "ascend-node-config-file") == []
    elsewhere = ["--config_file", "/device-config.yaml", "-node_config_file", "/etc/x.yaml"]
    [wrong] = findings(ascend_cluster(elsewhere), "ascend-node-config-file")
    assert wrong.message.startswith("--node_config_file is /etc/x.yaml")
    # no ascend-vnpu node, no per-node config rendered: nothing to read
    no_nodes = replace(ascend_cluster(), nodes=healthy().nodes)
    assert findings(no_nodes, "ascend-node-config-file") == []


def test_every_ascend_entry_carries_hami_vnpu_core() -> None:
    # an entry of {"name": "npu-0"} only would be read as hami-vnpu-core: false, overriding a
    # global vnpus.hamiVnpuCore: true
    released = {
        "npu-0": NodeConfig(mode="ascend-vnpu"),
        "npu-1": NodeConfig(mode="ascend-vnpu", ascendVnpu={"hamiVnpuCore": False}),
    }
    out = render_ascend_node_config(None, released, OperatorConfig(), NOW, hami_vnpu_core=True)
    text_ = out.data["node-config.yaml"]
    assert "- name: npu-0\n  hami-vnpu-core: true\n" in text_
    assert "- name: npu-1\n  hami-vnpu-core: false\n" in text_


def with_scheduler_device(core: bool) -> ClusterSnapshot:
    cfg = load_config("ascendVnpu: {enabled: true}")
    device = f"vnpus:\n  hamiVnpuCore: {'true' if core else 'false'}\n  configs: []\n"
    cm = configmap("kube-system", "hami-scheduler-device", {"device-config.yaml": device})
    return replace(healthy(cfg), configmaps=[*healthy(cfg).configmaps, cm])


def test_the_global_hami_vnpu_core_comes_from_the_ascend_plugins_configmap() -> None:
    assert with_scheduler_device(True).hami_vnpu_core is True
    assert with_scheduler_device(False).hami_vnpu_core is False
    assert healthy().hami_vnpu_core is False  # no such ConfigMap: the plugin's default

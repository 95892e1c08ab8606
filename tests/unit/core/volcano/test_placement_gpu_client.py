"""The GPU Operator's GPU-client selector in the plugin's placement (`core.volcano.placement`):
GPU Operator v26.7.0 labels GPU nodes `nvidia.com/gpu.deploy.client=true`
(NVIDIA/gpu-operator@v26.7.0:controllers/state_manager.go) and its mig-manager, before a MIG
change, waits only for the DaemonSet pods whose spec.nodeSelector has that key
(NVIDIA/mig-parted@v0.15.0:pkg/mig/reconfigure/reconfigure.go). The placement selects on it where
every node the plugin serves carries it, nowhere else, takes its own selector off when that
stops being so, and never writes the label."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.kit.nodekit import labels_of, node, policy, reconcile
from tests.kit.volcano_fixtures import (
    HAMI_NODE,
    findings,
    gpu_node,
    healthy,
    healthy_daemonset,
    obj,
    replace,
)
from vgpu_operator import contract
from vgpu_operator.core.volcano.placement import (
    GPU_CLIENT_LABEL,
    GPU_CLIENT_PAUSED,
    plan_placement,
)
from vgpu_operator.core.volcano.restarts import RestartSettings
from vgpu_operator.core.volcano.workload_writes import workload_patches
from vgpu_operator.models.placement import PlacementRecord

PLACE = contract.LABEL_DEVICE_PLUGIN
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def served(name: str, client: str | None) -> dict[str, Any]:
    n = gpu_node(name, "A100-SXM4-80GB", 1, released=HAMI_NODE)
    if client is not None:
        n["metadata"]["labels"][GPU_CLIENT_LABEL] = client
    return n


def selector(p: Any) -> dict[str, Any]:
    return dict(p.patch["spec"]["template"]["spec"].get("nodeSelector") or {}) if p.patch else {}


def test_every_served_node_carries_it_so_the_plugin_selects_on_it() -> None:
    nodes = [served("a", "true"), served("b", GPU_CLIENT_PAUSED)]  # b: mig-manager at work
    p = plan_placement(healthy_daemonset(), "hami", nodes)
    assert selector(p) == {GPU_CLIENT_LABEL: "true"}
    assert p.gpu_client == "added" and not p.adopted  # sent, though it runs exactly there
    # b's plugin pod leaves while mig-manager works there, on purpose: not a node it cannot reach
    assert p.still_unreached == () and p.unreached == ()


def test_a_served_node_without_it_gets_no_selector() -> None:
    for missing in (None, "false"):
        p = plan_placement(healthy_daemonset(), "hami", [served("a", "true"), served("b", missing)])
        assert GPU_CLIENT_LABEL not in selector(p) and p.gpu_client is None
        assert p.patch is None  # the shipped placement is otherwise right: nothing to send


def test_the_shipped_daemonset_gets_both_selectors_in_one_patch() -> None:
    ds = obj("manifest_plugin_daemonset.yaml")
    p = plan_placement(ds, "hami", [served("a", "true")])
    assert selector(p) == {PLACE: "hami", GPU_CLIENT_LABEL: "true"}


def test_its_own_selector_comes_off_when_a_served_node_lacks_the_label() -> None:
    ds = healthy_daemonset()
    ds["spec"]["template"]["spec"]["nodeSelector"][GPU_CLIENT_LABEL] = "true"
    record = PlacementRecord(node_selector={PLACE: "hami", GPU_CLIENT_LABEL: "true"})
    ds["metadata"].setdefault("annotations", {})[contract.ANN_PLACEMENT] = record.to_annotation()
    p = plan_placement(ds, "hami", [served("a", "true"), served("b", None)])
    assert not p.excluded  # the operator's own selector does not count as the user's
    assert selector(p) == {GPU_CLIENT_LABEL: None} and p.gpu_client == "removed"
    assert record.adding(selector(p), []).node_selector == {PLACE: "hami"}


def test_a_persons_own_selector_on_the_key_stays() -> None:
    ds = healthy_daemonset()
    ds["spec"]["template"]["spec"]["nodeSelector"][GPU_CLIENT_LABEL] = "true"  # not recorded
    p = plan_placement(ds, "hami", [served("a", "true"), served("b", None)])
    assert p.patch is None and p.excluded  # plugin-placement names it; nothing is taken off
    assert "nvidia.com/gpu.deploy.client=true" in p.excluded[0][1]


def test_the_write_plan_records_it_and_the_rule_says_why() -> None:
    base = healthy()
    nodes = [dict(n, metadata=dict(n["metadata"])) for n in base.nodes]
    for n in nodes:
        n["metadata"]["labels"] = {**n["metadata"]["labels"], GPU_CLIENT_LABEL: "true"}
    snap = replace(base, nodes=nodes)
    [f] = findings(snap, "plugin-placement")
    assert f.severity == "warning"
    assert f.message.startswith("the vGPU device plugin runs on the 2 node(s) labelled")
    assert "no nodeSelector nvidia.com/gpu.deploy.client=true" in f.message
    assert "NVIDIA/mig-parted@v0.15.0" in f.message
    _, [patch] = workload_patches(snap, [], {}, RestartSettings(), NOW)
    assert patch.body["spec"]["template"]["spec"]["nodeSelector"] == {GPU_CLIENT_LABEL: "true"}
    record = PlacementRecord.from_annotation(
        patch.body["metadata"]["annotations"][contract.ANN_PLACEMENT]
    )
    assert record.node_selector == {GPU_CLIENT_LABEL: "true"}  # cleanup takes it off again
    assert "placement: nodeSelector nvidia.com/gpu.deploy.client=true" in patch.what


def test_the_operator_never_writes_the_label() -> None:
    nodes = [
        node("n1", {"pool": "a", GPU_CLIENT_LABEL: "true"}),
        node("n2", {"pool": "a"}),
        node("n3", {"pool": "b", GPU_CLIENT_LABEL: GPU_CLIENT_PAUSED}),
    ]
    pools = [
        policy("a", {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "a"}}}),
        policy("b", {"mode": "mig", "nodeSelector": {"matchLabels": {"pool": "b"}}}),
    ]
    after, _ = reconcile(nodes, pools)
    assert [labels_of(n).get(GPU_CLIENT_LABEL) for n in after] == ["true", None, GPU_CLIENT_PAUSED]
    again, _ = reconcile(after, [])  # and leaving a pool takes it off no node
    assert [labels_of(n).get(GPU_CLIENT_LABEL) for n in again] == ["true", None, GPU_CLIENT_PAUSED]

"""Where the DRA driver's kubelet plugin runs (core.volcano.placement): the same placement decision
as HAMi's plugins, one per plugin. Its chart selects no label of its own and admits every NVIDIA
GPU node (tests.kit.drakit), so the operator gives it a nodeSelector on
`vgpu.volcano.sh/device-plugin=dra` (and a toleration for a dra pool's own taints), in the same
DaemonSet PATCH with its placement record, under the same restart limits;
HAMi's plugin keeps its own label, so the two never share a node. With the operator config's `dra`
section that DaemonSet serves the dra pools only: pinned even before any exists."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.kit.drakit import kubelet_plugin_daemonset
from tests.kit.nodekit import labels_of, node, policy, reconcile
from tests.kit.volcano_fixtures import findings, obj
from vgpu_operator import contract
from vgpu_operator.core.volcano.placement import placements
from vgpu_operator.core.volcano.restarts import RestartSettings
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.workload_writes import workload_patches
from vgpu_operator.models.config import OperatorConfig, load_config
from vgpu_operator.models.placement import PlacementRecord

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
PLACE = contract.LABEL_DEVICE_PLUGIN
GPU = {contract.GFD_PRESENT: "true"}
DRA_CONFIG = load_config("dra: {}\n")
DRA_DS = ("dra-driver-nvidia-gpu", "dra-driver-nvidia-gpu-kubelet-plugin")


def pools(dra_taints: list[dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """A hami-core pool (tainted), a whole-gpu pool, a dra pool of two nodes; nodes as the
    planner leaves them."""
    dra_spec: dict[str, Any] = {"mode": "dra", "nodeSelector": {"matchLabels": {"pool": "d"}}}
    if dra_taints is not None:
        dra_spec["nodeTaints"] = dra_taints
    policies = [
        policy("v", {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "v"}}}),
        policy("w", {"mode": "whole-gpu", "nodeSelector": {"matchLabels": {"pool": "w"}}}),
        policy("d", dra_spec),
    ]
    nodes = [
        node("v-0", {"pool": "v", **GPU}),
        node("w-0", {"pool": "w", **GPU}),
        node("d-0", {"pool": "d", **GPU}),
        node("d-1", {"pool": "d", **GPU}),
    ]
    nodes, _ = reconcile(nodes, policies)
    return nodes


def snapshot(nodes: list[dict[str, Any]], config: OperatorConfig = DRA_CONFIG) -> ClusterSnapshot:
    hami = obj("manifest_plugin_daemonset.yaml")
    return ClusterSnapshot(
        config=config, daemonsets=[hami, kubelet_plugin_daemonset()], nodes=nodes
    )


def dra_placement(s: ClusterSnapshot) -> Any:
    found = [p for p in placements(s) if (p.namespace, p.name) == DRA_DS]
    return found[0] if found else None


def test_the_dra_kubelet_plugin_is_pinned_to_the_dra_nodes_by_the_operators_label() -> None:
    nodes = pools()
    assert [labels_of(n).get(PLACE) for n in nodes] == ["hami", None, "dra", "dra"]
    p = dra_placement(snapshot(nodes))
    assert p is not None and p.plugin == "dra"
    assert p.served == ("d-0", "d-1")
    assert p.extra == ("w-0",)  # as shipped it would run beside NVIDIA's plugin there
    assert p.patch == {"spec": {"template": {"spec": {"nodeSelector": {PLACE: "dra"}}}}}
    assert p.added_tolerations == ()  # a dra node carries no taint of the operator's
    hami = next(x for x in placements(snapshot(nodes)) if x.plugin == "hami")
    assert hami.served == ("v-0",)  # HAMi's plugin keeps off the dra nodes


def test_a_dra_pools_own_taint_is_tolerated_by_the_placement() -> None:
    taint = {"key": "example.com/dra", "value": "only", "effect": "NoSchedule"}
    p = dra_placement(snapshot(pools([taint])))
    assert p.added_tolerations == (
        {"key": "example.com/dra", "operator": "Equal", "value": "only", "effect": "NoSchedule"},
    )
    assert p.still_unreached == ()


def test_no_dra_placement_without_the_config_section() -> None:
    assert dra_placement(snapshot(pools(), OperatorConfig())) is None


def test_without_a_dra_node_the_kubelet_plugin_is_pinned_to_none_never_adopted() -> None:
    vgpu_only, _ = reconcile(
        [node("v-0", {"pool": "v", **GPU})],
        [policy("v", {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "v"}}})],
    )
    p = dra_placement(snapshot(vgpu_only))
    # as shipped it reaches no node only because the vGPU taint keeps it off: exact by chance,
    # which a pool moving to dra (its taint gone before its release) would end
    assert p.served == () and p.extra == () and p.unreached == ()
    assert p.patch == {"spec": {"template": {"spec": {"nodeSelector": {PLACE: "dra"}}}}}
    assert not p.adopted


def test_the_placement_goes_out_as_one_daemonset_patch_with_its_record() -> None:
    s = snapshot(pools())
    _, patches = workload_patches(s, [], {}, RestartSettings(), T0)
    [dra] = [w for w in patches if (w.namespace, w.name) == DRA_DS]
    assert dra.body["spec"] == {"template": {"spec": {"nodeSelector": {PLACE: "dra"}}}}
    record = PlacementRecord.from_annotation(
        dra.body["metadata"]["annotations"][contract.ANN_PLACEMENT]
    )
    assert record.node_selector == {PLACE: "dra"} and record.tolerations == []
    assert dra.body["metadata"]["resourceVersion"] == "3"


def test_the_placement_rule_names_the_dra_kubelet_plugin_until_it_is_placed() -> None:
    [finding] = [
        f for f in findings(snapshot(pools()), "plugin-placement") if DRA_DS[1] in str(f.objects)
    ]
    assert "DRA kubelet" in finding.message and "w-0" in finding.message
    assert "nodeSelector" in finding.fix

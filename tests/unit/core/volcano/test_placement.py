"""Where HAMi's plugins run (`core.volcano.placement`): the node planner labels each node with
the plugin that serves its mode (`vgpu.volcano.sh/device-plugin`), and the plugin DaemonSets get
a nodeSelector on that label and a toleration for every policy taint, the user's own kept; a
placement change rolls the DaemonSet, so it waits for the restart limits."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.kit.nodekit import labels_of, node, policy, reconcile
from tests.kit.volcano_fixtures import ascend_daemonset, healthy, obj, replace
from vgpu_operator import contract
from vgpu_operator.core.volcano.placement import placements, plan_placement
from vgpu_operator.core.volcano.restarts import RestartSettings, daemonset_key, rollout_due
from vgpu_operator.models.config import load_config

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
PLACE = contract.LABEL_DEVICE_PLUGIN


@pytest.mark.parametrize(
    ("spec", "label"),
    [
        ({"mode": "hami-core"}, "hami"),
        ({"mode": "mig"}, "hami"),
        ({"mode": "mig", "mig": {"partitioning": "dynamic"}}, "hami"),
        ({"mode": "ascend-vnpu"}, "ascend"),
        (
            {
                "mode": "mig",
                "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]},
            },
            None,
        ),
        ({"mode": "whole-gpu"}, None),
    ],
)
def test_the_node_planner_writes_the_device_plugin_label(
    spec: dict[str, Any], label: str | None
) -> None:
    selector = {"nodeSelector": {"matchLabels": {"pool": "a"}}}
    both = node("n1", {"pool": "a", contract.ASCEND_CHIP_LABEL: "910B3"})  # GPUs and NPUs
    nodes, _ = reconcile([both], [policy("p", {**spec, **selector})])
    assert labels_of(nodes[0]).get(PLACE) == label
    again, _ = reconcile(nodes, [])  # the policy is gone: the label goes with it
    assert PLACE not in labels_of(again[0])


def test_a_users_own_device_plugin_label_is_the_operators_to_correct() -> None:
    nodes, _ = reconcile([node("n1", {"pool": "a", PLACE: "hami"})], [])
    assert PLACE not in labels_of(nodes[0])


def shipped_daemonset() -> dict[str, Any]:
    ds = obj("manifest_plugin_daemonset.yaml")
    ds["metadata"]["resourceVersion"] = "7"
    return ds


def custom_taint_cluster() -> list[dict[str, Any]]:
    """Nodes as the planner leaves them: one pool with the default taint, one with custom
    nodeTaints (NoSchedule, NoExecute and a PreferNoSchedule that blocks nothing)."""
    custom = [
        {"key": "example.com/gpu-pool", "value": "rtx", "effect": "NoSchedule"},
        {"key": "example.com/dedicated", "effect": "NoExecute"},
        {"key": "example.com/soft", "value": "x", "effect": "PreferNoSchedule"},
    ]
    policies = [
        policy("a", {"mode": "mig", "nodeSelector": {"matchLabels": {"pool": "a"}}}),
        policy(
            "b",
            {
                "mode": "hami-core",
                "nodeSelector": {"matchLabels": {"pool": "b"}},
                "nodeTaints": custom,
                "allowNoExecute": True,
            },
        ),
        policy(
            "c",
            {
                "mode": "mig",
                "nodeSelector": {"matchLabels": {"pool": "c"}},
                "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]},
                "nodeTaints": [],  # as the demo's static pool
            },
        ),
    ]
    linux = {"kubernetes.io/os": "linux"}
    nodes = [
        node("a-0", {"pool": "a", **linux}),
        node("b-0", {"pool": "b", **linux}, gpu="rtx4090"),
        node("c-0", {"pool": "c", **linux}, gpu="h100"),
        node("cpu-0", linux, gpu="cpu"),
    ]
    nodes, _ = reconcile(nodes, policies)
    return nodes


def test_the_placement_tolerates_every_policy_taint_and_keeps_the_users() -> None:
    ds = shipped_daemonset()
    spec = ds["spec"]["template"]["spec"]
    spec["nodeSelector"] = {"kubernetes.io/os": "linux"}
    spec["tolerations"].append({"key": "user.example/x", "operator": "Exists"})
    p = plan_placement(ds, "hami", custom_taint_cluster())
    assert p.served == ("a-0", "b-0")
    assert p.extra == ("c-0", "cpu-0")  # static MIG and CPU: untainted, reached today
    assert [n for n, _ in p.unreached] == ["a-0", "b-0"]
    assert p.patch == {
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": {PLACE: "hami"},  # merged: kubernetes.io/os stays
                    "tolerations": [
                        *spec["tolerations"],
                        {
                            "key": "example.com/dedicated",
                            "operator": "Exists",
                            "effect": "NoExecute",
                        },
                        {
                            "key": "example.com/gpu-pool",
                            "operator": "Equal",
                            "value": "rtx",
                            "effect": "NoSchedule",
                        },
                        {
                            "key": "volcano.sh/vgpu",
                            "operator": "Equal",
                            "value": "hami",
                            "effect": "NoSchedule",
                        },
                    ],
                }
            }
        }
    }
    assert p.still_unreached == ()
    # applied (nodeSelector merged, tolerations replaced): nothing left to write
    patched = copy.deepcopy(ds)
    pod_spec = patched["spec"]["template"]["spec"]
    pod_spec["nodeSelector"].update(p.patch["spec"]["template"]["spec"]["nodeSelector"])
    pod_spec["tolerations"] = p.patch["spec"]["template"]["spec"]["tolerations"]
    again = plan_placement(patched, "hami", custom_taint_cluster())
    assert again.patch is None and again.unreached == () and again.extra == ()


def test_a_toleration_the_user_already_has_is_not_added_again() -> None:
    ds = shipped_daemonset()
    ds["spec"]["template"]["spec"]["tolerations"].append({"operator": "Exists"})  # all taints
    p = plan_placement(ds, "hami", custom_taint_cluster())
    assert p.patch == {"spec": {"template": {"spec": {"nodeSelector": {PLACE: "hami"}}}}}


def test_the_ascend_plugin_is_placed_only_when_ascend_is_enabled() -> None:
    snap = healthy()
    snap = replace(snap, daemonsets=[*snap.daemonsets, ascend_daemonset()])
    assert [p.plugin for p in placements(snap)] == ["hami"]
    on = replace(snap, config=load_config("ascendVnpu: {enabled: true}"))
    assert [p.plugin for p in placements(on)] == ["hami", "ascend"]


def test_nothing_is_placed_before_the_operator_manages_a_node() -> None:
    snap = healthy()
    for n in snap.nodes:
        n["metadata"]["annotations"].pop(contract.ANN_CONFIG)
    assert placements(snap) == []


def test_a_placement_rollout_waits_for_the_restart_limits() -> None:
    settings = RestartSettings(min_interval=timedelta(seconds=300))
    key = daemonset_key("kube-system", "volcano-device-plugin")
    assert rollout_due({}, key, None, settings, T0) == T0
    last = T0 - timedelta(seconds=100)
    assert rollout_due({key: last}, key, None, settings, T0) == T0 + timedelta(seconds=200)
    assert rollout_due({}, key, last, settings, T0) == T0 + timedelta(seconds=200)
    assert rollout_due({}, key, None, RestartSettings(allowed=False), T0) is None

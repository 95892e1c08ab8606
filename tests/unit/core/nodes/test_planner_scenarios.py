"""The node planner's scenarios at the pure level: plan, apply the PATCH as the apiserver would,
plan again; each pass converges in one write."""

from __future__ import annotations

import json

import pytest

from tests.kit.nodekit import (
    DEFAULT_TAINT,
    HAMI,
    annotations_of,
    converge,
    labels_of,
    node,
    parsed,
    policy,
    taints_of,
)
from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster, plan_one
from vgpu_operator.models.node import NodeConfig, Owned

USER_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
OPERATOR_LABELS = {contract.LABEL_POLICY, contract.LABEL_MODE, "volcano.sh/vgpu.enabled"}


def test_create_policy_labels_and_taints_the_matching_nodes() -> None:
    nodes = [node("n1", {"pool": "a"}), node("n2", {"pool": "b"})]
    out, plan = converge(nodes, [policy("gpu-a", HAMI, generation=3)])
    assert plan.plans["n1"].action == "configure"
    assert plan.plans["n2"].patch is None
    labels = labels_of(out[0])
    assert labels[contract.LABEL_POLICY] == "gpu-a"
    assert labels[contract.LABEL_MODE] == "hami-core"
    assert labels["volcano.sh/vgpu.enabled"] == "true"
    assert taints_of(out[0]) == [DEFAULT_TAINT]
    ann = annotations_of(out[0])
    target = NodeConfig.from_annotation(ann[contract.ANN_TARGET])
    assert target == NodeConfig(mode="hami-core", policy="gpu-a", generation=3)
    assert ann[contract.ANN_CONFIG] == ann[contract.ANN_TARGET]  # released at once
    owned = Owned.from_annotation(ann[contract.ANN_OWNED])
    assert owned.labels == {"volcano.sh/vgpu.enabled": "true"}
    assert [t.key for t in owned.taints] == [contract.DEFAULT_TAINT_KEY]
    assert out[1] == nodes[1]


def test_patch_is_a_merge_patch_with_resource_version() -> None:
    nodes = [node("n1", {"pool": "a"}, rv=41)]
    plan = plan_cluster([node_facts(n) for n in nodes], parsed([policy("p", HAMI)]))
    patch = plan.plans["n1"].patch
    assert patch is not None
    assert patch["metadata"]["resourceVersion"] == "41"
    assert set(patch) == {"metadata", "spec"}
    assert set(patch["metadata"]) == {"resourceVersion", "labels", "annotations"}


def test_new_matching_node_joins_and_is_configured() -> None:
    pol = [policy("gpu-a", HAMI)]
    nodes, _ = converge([node("n1", {"pool": "a"})], pol)
    nodes.append(node("n2", {"pool": "a"}))
    out, plan = converge(nodes, pol)
    assert plan.plans["n1"].patch is None
    assert plan.plans["n2"].action == "configure"
    assert labels_of(out[1])[contract.LABEL_POLICY] == "gpu-a"


def test_node_relabelled_out_loses_only_the_operators_labels_and_taints() -> None:
    pol = [policy("gpu-a", HAMI)]
    start = node("n1", {"pool": "a", "team": "ml"}, taints=[USER_TAINT])
    (configured,), _ = converge([start], pol)
    configured["metadata"]["labels"]["pool"] = "b"  # the user moves the node out of the pool
    (out,), plan = converge([configured], pol)
    assert plan.plans["n1"].action == "release"
    labels = labels_of(out)
    assert labels["team"] == "ml" and labels["pool"] == "b"
    assert not OPERATOR_LABELS & set(labels)
    assert taints_of(out) == [USER_TAINT]
    assert annotations_of(out) == {}


def test_policy_labels_changed_old_removed_new_added() -> None:
    (configured,), _ = converge([node("n1", {"pool": "a"})], [policy("p", HAMI)])
    changed = {**HAMI, "nodeLabels": {"accelerator": "vgpu"}}
    (out,), plan = converge([configured], [policy("p", changed, generation=2)])
    assert plan.plans["n1"].action == "update"
    labels = labels_of(out)
    assert labels["accelerator"] == "vgpu"
    assert "volcano.sh/vgpu.enabled" not in labels
    assert Owned.from_annotation(annotations_of(out)[contract.ANN_OWNED]).labels == {
        "accelerator": "vgpu"
    }


@pytest.mark.parametrize("how", ["deleting", "gone"])
def test_policy_deleted_leaves_nodes_clean(how: str) -> None:
    start = node("n1", {"pool": "a", "team": "ml"}, taints=[USER_TAINT])
    (configured,), _ = converge([start], [policy("p", HAMI)])
    after = [policy("p", HAMI, deleting=True)] if how == "deleting" else []
    (out,), plan = converge([configured], after)
    assert plan.plans["n1"].action == "release"
    assert labels_of(out) == labels_of(start)
    assert taints_of(out) == [USER_TAINT]
    assert annotations_of(out) == {}


def test_excluded_node_is_untouched() -> None:
    excluded = node("n1", {"pool": "a", contract.LABEL_EXCLUDE: "true"})
    (out,), plan = converge([excluded], [policy("p", HAMI)])
    assert plan.plans["n1"].patch is None and plan.assignments["n1"].excluded
    assert out == excluded


def test_excluding_a_configured_node_releases_it_like_leaving_the_pool() -> None:
    (configured,), _ = converge([node("n1", {"pool": "a"})], [policy("p", HAMI)])
    configured["metadata"]["labels"][contract.LABEL_EXCLUDE] = "true"
    (out,), plan = converge([configured], [policy("p", HAMI)])
    assert plan.plans["n1"].action == "release"
    assert not OPERATOR_LABELS & set(labels_of(out))


def test_suspended_policy_changes_nothing() -> None:
    nodes, _ = converge([node("n1", {"pool": "a"})], [policy("p", HAMI)])
    suspended = {**HAMI, "suspend": True, "nodeLabels": {"other": "x"}}
    nodes.append(node("n2", {"pool": "a"}))
    out, plan = converge(nodes, [policy("p", suspended, generation=2)])
    assert plan.plans["n1"].action == "held" and plan.plans["n2"].action == "held"
    assert out == nodes
    # resuming applies the edit to both nodes, one write each
    resumed = {**suspended, "suspend": False}
    out, plan = converge(out, [policy("p", resumed, generation=3)])
    assert all(labels_of(n)["other"] == "x" for n in out)


def test_equal_priority_overlap_is_a_conflict_and_nodes_stay_as_they_are() -> None:
    both = node("n1", {"pool": "a", "zone": "z1"})
    a = policy("a", {**HAMI, "priority": 5})
    b = policy(
        "b", {"mode": "whole-gpu", "priority": 5, "nodeSelector": {"matchLabels": {"zone": "z1"}}}
    )
    (out,), plan = converge([both], [a, b])
    assert plan.plans["n1"].action == "conflict"
    assert plan.assignments["n1"].conflict == ("a", "b")
    assert out == both
    # an already configured node in a new overlap is left as it is too
    (configured,), _ = converge([both], [a])
    configured["metadata"]["labels"]["zone"] = "z1"
    (kept,), plan = converge([configured], [a, b])
    assert plan.plans["n1"].action == "conflict" and kept == configured


def test_higher_priority_wins_and_moves_the_node_in_one_write() -> None:
    low = policy("low", {**HAMI, "priority": 1, "nodeLabels": {"low": "yes"}})
    high = policy(
        "high",
        {"mode": "ascend-vnpu", "priority": 9, "nodeSelector": {"matchLabels": {"pool": "a"}}},
    )
    # a node with GPUs and NPUs: both modes find their hardware on it
    both = node("n1", {"pool": "a", contract.ASCEND_CHIP_LABEL: "910B3"})
    (configured,), _ = converge([both], [low])
    (out,), plan = converge([configured], [low, high])
    assert plan.plans["n1"].action == "configure" and plan.plans["n1"].old_owner == "low"
    labels = labels_of(out)
    assert labels[contract.LABEL_POLICY] == "high" and labels["ascend"] == "on"
    assert "low" not in labels and taints_of(out) == []


def test_nothing_changed_means_no_patch_at_all() -> None:
    pols = [
        policy("p", HAMI),
        policy("w", {"mode": "whole-gpu", "nodeSelector": {"matchLabels": {"pool": "w"}}}),
    ]
    nodes = [node(f"n{i}", {"pool": "a" if i % 2 else "w"}) for i in range(6)]
    nodes, _ = converge(nodes, pols)
    plan = plan_cluster([node_facts(n) for n in nodes], parsed(pols))
    assert plan.patches == {}
    assert all(p.action == "none" and p.in_sync for p in plan.plans.values())


def test_whole_gpu_takes_the_vgpu_labels_off_and_keeps_policy_and_mode() -> None:
    (configured,), _ = converge([node("n1", {"pool": "a"})], [policy("p", HAMI)])
    whole = {"mode": "whole-gpu", "nodeSelector": {"matchLabels": {"pool": "a"}}}
    (out,), plan = converge([configured], [policy("p", whole, generation=2)])
    assert plan.plans["n1"].mode_changed
    labels = labels_of(out)
    assert labels[contract.LABEL_MODE] == "whole-gpu" and labels[contract.LABEL_POLICY] == "p"
    assert "volcano.sh/vgpu.enabled" not in labels and taints_of(out) == []
    config = NodeConfig.from_annotation(annotations_of(out)[contract.ANN_CONFIG])
    assert config is not None and config.mode == "whole-gpu"


def test_leaving_a_mig_pool_keeps_config_whole_gpu_so_the_agent_turns_mig_off() -> None:
    mig = {"mode": "mig", "nodeSelector": {"matchLabels": {"pool": "a"}}}
    (configured,), _ = converge([node("n1", {"pool": "a"})], [policy("m", mig)])
    config = NodeConfig.from_annotation(annotations_of(configured)[contract.ANN_CONFIG])
    assert config is not None and config.mig is not None and config.mig.partitioning == "dynamic"
    (out,), _ = converge([configured], [])
    ann = annotations_of(out)
    assert set(ann) == {contract.ANN_CONFIG}
    assert json.loads(ann[contract.ANN_CONFIG]) == {"mode": "whole-gpu", "generation": 0}


def test_leaving_a_hami_pool_removes_config() -> None:
    (configured,), _ = converge([node("n1", {"pool": "a"})], [policy("p", HAMI)])
    (out,), _ = converge([configured], [])
    assert annotations_of(out) == {}


@pytest.mark.parametrize("prior", [None, "true"])
def test_gpu_operator_device_plugin_switched_off_and_restored_on_leave(prior: str | None) -> None:
    dp = contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL
    labels = {"pool": "a"} | ({dp: prior} if prior else {})
    spec = {**HAMI, "disableNvidiaDevicePlugin": True}
    (configured,), _ = converge([node("n1", labels)], [policy("p", spec)])
    assert labels_of(configured)[dp] == "false"
    owned = Owned.from_annotation(annotations_of(configured)[contract.ANN_OWNED])
    assert owned.replaced == ({dp: prior} if prior else {})
    (out,), _ = converge([configured], [])
    assert labels_of(out).get(dp) == prior


def test_turning_the_device_plugin_option_off_restores_the_label() -> None:
    dp = contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL
    spec = {**HAMI, "disableNvidiaDevicePlugin": True}
    (configured,), _ = converge([node("n1", {"pool": "a", dp: "true"})], [policy("p", spec)])
    (out,), _ = converge([configured], [policy("p", HAMI, generation=2)])
    assert labels_of(out)[dp] == "true"
    assert labels_of(out)[contract.LABEL_POLICY] == "p"


def test_label_collision_blocks_the_node_and_writes_nothing() -> None:
    start = node("n1", {"pool": "a", "volcano.sh/vgpu.enabled": "false"})
    (out,), plan = converge([start], [policy("p", HAMI)])
    p = plan.plans["n1"]
    assert p.action == "blocked" and p.patch is None and out == start
    assert [x.reason for x in p.problems] == ["LabelCollision"]
    assert p.problems[0].field == "spec.nodeLabels['volcano.sh/vgpu.enabled']"
    assert "kubectl label node n1 volcano.sh/vgpu.enabled-" in p.problems[0].fix


def test_taint_collision_blocks_the_node_and_writes_nothing() -> None:
    theirs = {"key": contract.DEFAULT_TAINT_KEY, "value": "mine", "effect": "NoSchedule"}
    start = node("n1", {"pool": "a"}, taints=[theirs])
    (out,), plan = converge([start], [policy("p", HAMI)])
    p = plan.plans["n1"]
    assert p.action == "blocked" and out == start
    assert p.problems[0].reason == "TaintCollision" and p.problems[0].field == "spec.nodeTaints[0]"


def test_same_key_other_effect_is_not_a_collision() -> None:
    other = {**DEFAULT_TAINT, "value": "x", "effect": "NoExecute"}
    (out,), plan = converge([node("n1", {"pool": "a"}, taints=[other])], [policy("p", HAMI)])
    assert plan.plans["n1"].action == "configure"
    assert taints_of(out) == [other, DEFAULT_TAINT]


def test_user_label_with_the_wanted_value_is_kept_as_the_users() -> None:
    start = node("n1", {"pool": "a", "volcano.sh/vgpu.enabled": "true"}, taints=[DEFAULT_TAINT])
    (configured,), _ = converge([start], [policy("p", HAMI)])
    owned = Owned.from_annotation(annotations_of(configured).get(contract.ANN_OWNED))
    assert owned == Owned()  # the operator set nothing of the policy's
    (out,), _ = converge([configured], [])
    assert labels_of(out)["volcano.sh/vgpu.enabled"] == "true"
    assert taints_of(out) == [DEFAULT_TAINT]


def test_a_label_the_user_changed_after_the_operator_is_left_to_the_user() -> None:
    (configured,), _ = converge([node("n1", {"pool": "a"})], [policy("p", HAMI)])
    configured["metadata"]["labels"]["volcano.sh/vgpu.enabled"] = "custom"
    (out,), _ = converge([configured], [])
    assert labels_of(out)["volcano.sh/vgpu.enabled"] == "custom"


def test_other_taints_are_given_back_verbatim() -> None:
    unreachable = {
        "key": "node.kubernetes.io/unreachable",
        "effect": "NoExecute",
        "timeAdded": "2026-01-01T00:00:00Z",
    }
    (out,), _ = converge([node("n1", {"pool": "a"}, taints=[unreachable])], [policy("p", HAMI)])
    assert taints_of(out) == [unreachable, DEFAULT_TAINT]


def test_static_layout_the_gpu_cannot_hold_blocks_only_that_node() -> None:
    spec = {
        "mode": "mig",
        "nodeSelector": {"matchLabels": {"pool": "a"}},
        "mig": {"partitioning": "static", "layout": [{"gpus": "all", "profiles": {"1g.10gb": 7}}]},
    }
    nodes = [node("a100", {"pool": "a"}, gpu="a100"), node("a30", {"pool": "a"}, gpu="a30")]
    out, plan = converge(nodes, [policy("p", spec)])
    assert plan.plans["a100"].action == "configure"
    blocked = plan.plans["a30"]
    assert blocked.action == "blocked" and out[1] == nodes[1]
    assert blocked.problems[0].reason == "UnknownMigProfile"
    assert blocked.problems[0].field == "spec.mig.layout[0].profiles"


def test_invalid_spec_holds_the_policys_nodes() -> None:
    (configured,), _ = converge([node("n1", {"pool": "a"})], [policy("p", HAMI)])
    broken = {**HAMI, "mig": {"layout": [{"gpus": 3, "profiles": {"1g.10gb": 1}}]}}
    (out,), plan = converge([configured], [policy("p", broken, generation=2)])
    assert plan.plans["n1"].action == "held" and out == configured


def test_unreadable_ownership_record_blocks_the_node() -> None:
    start = node("n1", {"pool": "a"}, annotations={contract.ANN_OWNED: "{not json"})
    (out,), plan = converge([start], [policy("p", HAMI)])
    assert plan.plans["n1"].action == "blocked" and out == start
    assert plan.plans["n1"].problems[0].reason == "OwnedRecordUnreadable"


def test_unreadable_target_is_rewritten() -> None:
    (configured,), _ = converge([node("n1", {"pool": "a"})], [policy("p", HAMI)])
    configured["metadata"]["annotations"][contract.ANN_TARGET] = "garbage"
    (out,), plan = converge([configured], [policy("p", HAMI)])
    assert plan.plans["n1"].action == "update"
    assert NodeConfig.from_annotation(annotations_of(out)[contract.ANN_TARGET]) is not None


def test_node_of_a_deleted_policy_in_a_new_conflict_is_released() -> None:
    """Otherwise the deleted policy's finalizer would wait for a node nobody may touch."""
    start = node("n1", {"pool": "a", "zone": "z"})
    (configured,), _ = converge([start], [policy("old", HAMI)])
    rivals = [
        policy(
            "a",
            {"mode": "whole-gpu", "priority": 3, "nodeSelector": {"matchLabels": {"zone": "z"}}},
        ),
        policy(
            "b",
            {"mode": "whole-gpu", "priority": 3, "nodeSelector": {"matchLabels": {"zone": "z"}}},
        ),
    ]
    (out,), plan = converge([configured], [policy("old", HAMI, deleting=True), *rivals])
    assert plan.plans["n1"].action == "release" and plan.plans["n1"].conflict == ("a", "b")
    assert labels_of(out) == labels_of(start)
    # a live, outranked owner keeps the node as it is
    (kept,), plan = converge([configured], [policy("old", HAMI), *rivals])
    assert plan.plans["n1"].action == "conflict" and kept == configured


def test_suspended_policy_keeps_its_node_from_a_higher_priority_newcomer() -> None:
    (configured,), _ = converge([node("n1", {"pool": "a"})], [policy("old", HAMI)])
    frozen = policy("old", {**HAMI, "suspend": True}, generation=2)
    high = policy("new", {**HAMI, "priority": 9, "nodeLabels": {"x": "y"}})
    (out,), plan = converge([configured], [frozen, high])
    p = plan.plans["n1"]
    assert p.action == "held" and out == configured and p.new_owner == "new"
    assert [(x.reason, x.field) for x in p.problems] == [("HeldByOtherPolicy", "spec.suspend")]


def test_plan_one_agrees_with_plan_cluster() -> None:
    pols = parsed([policy("p", HAMI), policy("q", {**HAMI, "priority": 2})])
    facts = node_facts(node("n1", {"pool": "a"}))
    assert plan_one(facts, pols) == plan_cluster([facts], pols).plans["n1"]

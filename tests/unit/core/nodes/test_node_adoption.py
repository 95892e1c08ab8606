"""Adopting what a person set up by hand, and leaving it (core.nodes.adoption, core.nodes.planner):
plan, apply the PATCH as the apiserver would, plan again."""

from __future__ import annotations

from typing import Any

from tests.kit.migkit import gpu, static
from tests.kit.migkit import node as inventory
from tests.kit.nodekit import (
    DEFAULT_TAINT,
    annotations_of,
    labels_of,
    node,
    parsed,
    policy,
    reconcile,
    taints_of,
)
from vgpu_operator import contract
from vgpu_operator.core.mig.partition import plan_node as plan_mig
from vgpu_operator.core.nodes.adoption import adopted, on_delete, with_on_delete_default
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.models.node import NodeConfig, Owned

# Seed 002 by hand: `volcano.sh/vgpu.enabled=true` and `volcano.sh/vgpu=hami:NoSchedule`.
HAND_LABELS = {"pool": "a", "volcano.sh/vgpu.enabled": "true"}
HAMI = {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "a"}}}


def hand_node(name: str = "n1", **extra: Any) -> dict[str, Any]:
    return node(name, HAND_LABELS, taints=[DEFAULT_TAINT], gpu="rtx4090", **extra)


def owned(raw: dict[str, Any]) -> Owned:
    return Owned.from_annotation(annotations_of(raw)[contract.ANN_OWNED])


def test_identical_hand_label_and_taint_cost_no_write_and_stay_the_users() -> None:
    [before] = [hand_node()]
    [after], plan = reconcile([before], [policy("p", HAMI)])
    p = plan.plans["n1"]
    assert p.action == "configure" and not p.problems
    assert p.patch is not None
    assert "spec" not in p.patch  # the taint is already there: the taint list is not written
    assert "volcano.sh/vgpu.enabled" not in p.patch["metadata"]["labels"]
    assert taints_of(after) == [DEFAULT_TAINT]
    record = owned(after) if contract.ANN_OWNED in annotations_of(after) else Owned()
    assert "volcano.sh/vgpu.enabled" not in record.labels
    assert record.taints == []
    assert adopted(node_facts(before), {"volcano.sh/vgpu.enabled": "true"}, []) == [
        "label volcano.sh/vgpu.enabled=true"
    ]
    # Released (the policy deleted): the hand-set label and taint stay.
    [released], plan = reconcile([after], [policy("p", HAMI, deleting=True)])
    assert plan.plans["n1"].action == "release"
    assert labels_of(released)["volcano.sh/vgpu.enabled"] == "true"
    assert taints_of(released) == [DEFAULT_TAINT]
    assert contract.LABEL_POLICY not in labels_of(released)


def test_adopt_existing_records_them_with_the_users_value_and_release_keeps_them() -> None:
    spec = {**HAMI, "adoptExisting": True}
    [after], plan = reconcile([hand_node()], [policy("p", spec)])
    assert plan.plans["n1"].patch is not None
    assert "spec" not in plan.plans["n1"].patch  # still no taint write
    record = owned(after)
    assert record.labels == {"volcano.sh/vgpu.enabled": "true"}
    assert [(t.key, t.value, t.effect) for t in record.taints] == [
        (DEFAULT_TAINT["key"], DEFAULT_TAINT["value"], DEFAULT_TAINT["effect"])
    ]
    # The user had them before: their values are in the record, to be put back.
    assert record.replaced == {"volcano.sh/vgpu.enabled": "true"}
    assert [(t.key, t.value, t.effect) for t in record.replaced_taints] == [
        (DEFAULT_TAINT["key"], DEFAULT_TAINT["value"], DEFAULT_TAINT["effect"])
    ]
    [again], second = reconcile([after], [policy("p", spec)])
    assert second.patches == {}
    [released], plan = reconcile([again], [policy("p", spec, deleting=True)])
    patch = plan.plans["n1"].patch
    assert patch is not None and "spec" not in patch  # no taint write: the user's stays
    assert "volcano.sh/vgpu.enabled" not in (patch["metadata"].get("labels") or {})
    assert labels_of(released)["volcano.sh/vgpu.enabled"] == "true"
    assert taints_of(released) == [DEFAULT_TAINT]
    assert contract.ANN_OWNED not in annotations_of(released)


def test_a_different_hand_value_is_still_a_collision() -> None:
    raw = node("n1", {"pool": "a", "volcano.sh/vgpu.enabled": "yes"}, gpu="rtx4090")
    _, plan = reconcile([raw], [policy("p", {**HAMI, "adoptExisting": True})])
    p = plan.plans["n1"]
    assert p.action == "blocked" and p.patch is None
    assert [x.reason for x in p.problems] == ["LabelCollision"]


def test_retain_leaves_everything_in_place_and_only_drops_the_record() -> None:
    spec = {**HAMI, "onDelete": "Retain"}
    [managed], _ = reconcile([node("n1", {"pool": "a"}, gpu="rtx4090")], [policy("p", spec)])
    assert owned(managed).labels == {"volcano.sh/vgpu.enabled": "true"}
    config = annotations_of(managed)[contract.ANN_CONFIG]
    [left], plan = reconcile([managed], [policy("p", spec, deleting=True)])
    p = plan.plans["n1"]
    assert p.action == "release" and p.patch is not None
    assert set(p.patch) == {"metadata"}  # no taint, no cordon
    labels, annotations = labels_of(left), annotations_of(left)
    assert labels["volcano.sh/vgpu.enabled"] == "true"
    assert taints_of(left) == [DEFAULT_TAINT]
    assert labels[contract.LABEL_DEVICE_PLUGIN] == labels_of(managed)[contract.LABEL_DEVICE_PLUGIN]
    assert annotations[contract.ANN_CONFIG] == config  # the agent keeps what it applied
    assert contract.LABEL_POLICY not in labels  # (the finalizer waits on this label)
    assert contract.ANN_OWNED not in annotations and contract.ANN_TARGET not in annotations
    assert annotations[contract.ANN_RETAINED] == "p"
    # The policy gone: the node is left alone, pass after pass.
    [still], plan = reconcile([left], [])
    assert plan.patches == {} and still == left


def test_operator_config_default_retains_unless_the_policy_says_delete() -> None:
    raw = [policy("a", HAMI, deleting=True), policy("b", {**HAMI, "onDelete": "Delete"})]
    filled = {p.name: on_delete(p) for p in with_on_delete_default(parsed(raw), "Retain")}
    assert filled == {"a": "Retain", "b": "Delete"}
    unchanged = {p.name: on_delete(p) for p in with_on_delete_default(parsed(raw), "Delete")}
    assert unchanged == {"a": "Delete", "b": "Delete"}


def test_retained_node_selected_again_is_managed_and_the_mark_goes() -> None:
    spec = {**HAMI, "onDelete": "Retain"}
    [managed], _ = reconcile([node("n1", {"pool": "a"}, gpu="rtx4090")], [policy("p", spec)])
    [left], _ = reconcile([managed], [policy("p", spec, deleting=True)])
    [back], plan = reconcile([left], [policy("q", HAMI)])
    assert plan.plans["n1"].action == "configure"
    assert contract.ANN_RETAINED not in annotations_of(back)
    assert labels_of(back)[contract.LABEL_POLICY] == "q"
    # what the deleted policy set is now the user's: equal values adopted, never removed
    record = owned(back) if contract.ANN_OWNED in annotations_of(back) else Owned()
    assert "volcano.sh/vgpu.enabled" not in record.labels
    [released], _ = reconcile([back], [policy("q", HAMI, deleting=True)])
    assert labels_of(released)["volcano.sh/vgpu.enabled"] == "true"


def test_retain_keeps_a_mig_layout_where_delete_parks_it() -> None:
    mig = {
        "mode": "mig",
        "nodeSelector": {"matchLabels": {"pool": "a"}},
        "mig": {"partitioning": "static", "layout": [{"gpus": "all", "profiles": {"3g.40gb": 2}}]},
    }
    raw = node("n1", {"pool": "a"}, gpu="a100")
    [managed], _ = reconcile([raw], [policy("p", {**mig, "onDelete": "Retain"})])
    released_config = NodeConfig.from_annotation(annotations_of(managed)[contract.ANN_CONFIG])
    assert released_config is not None and released_config.mode == "mig"
    [left], _ = reconcile([managed], [policy("p", {**mig, "onDelete": "Retain"}, deleting=True)])
    kept = NodeConfig.from_annotation(annotations_of(left)[contract.ANN_CONFIG])
    assert kept == released_config
    [parked], _ = reconcile([managed], [policy("p", mig, deleting=True)])
    assert NodeConfig.from_annotation(annotations_of(parked)[contract.ANN_CONFIG]) == NodeConfig(
        mode="whole-gpu"
    )


def test_a_mig_layout_made_by_hand_equal_to_the_policys_is_kept_without_a_step() -> None:
    # The node agent's first plan for a node whose MIG instances a person created (no earlier
    # configuration: `previous` None): nothing destroyed, no mode change, no reset.
    by_hand = inventory(
        *(gpu("A100-SXM4-80GB", i, instances=[("3g.40gb", 0), ("3g.40gb", 4)]) for i in range(2))
    )
    desired = static({"gpus": "all", "profiles": {"3g.40gb": 2}})
    plan = plan_mig(by_hand, desired, None)
    assert plan.ok and plan.steps == ()

"""Ownership decided from what the node records (issue 29): a user's same-valued label or taint
that the operator adopted is put back, never removed, when the node leaves; a record listing
what this version may no longer own is released cleanly, never freezes the node; a record naming
Kubernetes' own keys makes the operator touch none of them. Plan, apply the PATCH as the
apiserver would, plan again (core.nodes.patch, core.nodes.facts, core.nodes.planner)."""

from __future__ import annotations

import json
from typing import Any

from tests.kit.nodekit import (
    DEFAULT_TAINT,
    annotations_of,
    labels_of,
    node,
    policy,
    reconcile,
    taints_of,
)
from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import disowned_entries, node_facts
from vgpu_operator.models.node import Owned

POOL = {"pool": "a"}
USER_TAINT = {"key": "team", "value": "ml", "effect": "NoSchedule"}


def spec(**extra: Any) -> dict[str, Any]:
    return {"mode": "hami-core", "nodeSelector": {"matchLabels": POOL}, **extra}


def owned(raw: dict[str, Any]) -> Owned:
    return Owned.from_annotation(annotations_of(raw).get(contract.ANN_OWNED))


def leave(raw: dict[str, Any], spec_: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    [out], plan = reconcile([raw], [policy("p", spec_, deleting=True)])
    return out, plan.plans[raw["metadata"]["name"]]


# --- a user's same-valued label or taint -----------------------------------------------------


def test_a_label_the_user_had_before_survives_release_even_after_the_policy_changed_it() -> None:
    """adoptExisting takes the user's `team=ml` over; the policy then sets `team=ai`. Leaving
    puts `ml` back: the record says it was the user's, whatever the operator saw happen."""
    raw = node("n1", {**POOL, "team": "ml"}, gpu="rtx4090")
    first = spec(adoptExisting=True, nodeLabels={"team": "ml"})
    [configured], _ = reconcile([raw], [policy("p", first)])
    assert owned(configured).replaced == {"team": "ml"}
    second = spec(adoptExisting=True, nodeLabels={"team": "ai"})
    [changed], plan = reconcile([configured], [policy("p", second, generation=2)])
    assert plan.plans["n1"].problems == ()  # the adopted label is the operator's to change
    assert labels_of(changed)["team"] == "ai"
    assert owned(changed).replaced == {"team": "ml"}  # still known from the record alone
    released, _ = leave(changed, second)
    assert labels_of(released)["team"] == "ml"
    assert contract.ANN_OWNED not in annotations_of(released)


def test_a_taint_the_user_had_before_is_put_back_as_it_was() -> None:
    raw = node("n1", POOL, taints=[USER_TAINT], gpu="rtx4090")
    wanted = {"nodeTaints": [{**USER_TAINT, "value": "ml"}], "adoptExisting": True}
    [configured], plan = reconcile([raw], [policy("p", spec(**wanted))])
    patch = plan.plans["n1"].patch
    assert patch is not None and "spec" not in patch  # adopting costs no taint write
    assert [t.value for t in owned(configured).replaced_taints] == ["ml"]
    changed_spec = spec(nodeTaints=[{**USER_TAINT, "value": "gpu"}], adoptExisting=True)
    [changed], _ = reconcile([configured], [policy("p", changed_spec, generation=2)])
    assert taints_of(changed) == [{**USER_TAINT, "value": "gpu"}]
    released, _ = leave(changed, changed_spec)
    assert taints_of(released) == [USER_TAINT]


def test_without_adopt_a_same_valued_label_is_never_recorded_and_stays() -> None:
    raw = node("n1", {**POOL, "team": "ml"}, gpu="rtx4090")
    s = spec(nodeLabels={"team": "ml"})
    [configured], _ = reconcile([raw], [policy("p", s)])
    assert "team" not in owned(configured).labels
    released, plan = leave(configured, s)
    assert plan.action == "release"
    assert labels_of(released)["team"] == "ml"


def test_a_label_the_operator_set_is_still_removed_on_release() -> None:
    raw = node("n1", POOL, gpu="rtx4090")
    s = spec(nodeLabels={"team": "ml"}, adoptExisting=True)
    [configured], _ = reconcile([raw], [policy("p", s)])
    assert owned(configured).replaced == {}  # nothing was there before
    released, _ = leave(configured, s)
    assert "team" not in labels_of(released)


def test_a_record_from_before_the_field_reads_back_as_the_same_text() -> None:
    """Records written before `replacedTaints` and `onDelete` existed cost no write."""
    text = '{"labels":{"a":"b"},"replaced":{},"taints":[]}'
    assert Owned.from_annotation(text).to_annotation() == text


# --- narrowed keys: an upgrade that owns less ------------------------------------------------


def narrowed_node(**extra: Any) -> dict[str, Any]:
    """A node an earlier version configured: it recorded `vgpu.volcano.sh/pool` (a key this
    version reserves) and `node-role.kubernetes.io/gpu` (Kubernetes' own), and its taint."""
    record = {
        "labels": {"vgpu.volcano.sh/pool": "a", "node-role.kubernetes.io/gpu": "true"},
        "taints": [DEFAULT_TAINT],
        "replaced": {},
    }
    labels = {
        **POOL,
        "vgpu.volcano.sh/pool": "a",
        "node-role.kubernetes.io/gpu": "true",
        contract.LABEL_POLICY: "old",
        contract.LABEL_MODE: "hami-core",
    }
    return node(
        "n1",
        labels,
        taints=[DEFAULT_TAINT],
        annotations={contract.ANN_OWNED: json.dumps(record)},
        gpu="rtx4090",
        **extra,
    )


def test_a_narrowed_record_is_trusted_for_the_rest_and_never_freezes_the_node() -> None:
    facts = node_facts(narrowed_node())
    assert contract.ANN_OWNED not in facts.errors
    assert facts.disowned == ("label node-role.kubernetes.io/gpu=true",)
    assert facts.owned.labels == {"vgpu.volcano.sh/pool": "a"}


def test_leaving_releases_what_it_no_longer_owns_and_leaves_kubernetes_keys() -> None:
    """The policy `old` is gone: the node is released, its taint and the narrowed key removed,
    the record dropped; Kubernetes' own key stays, named in a notice."""
    [released], plan = reconcile([narrowed_node()], [])
    p = plan.plans["n1"]
    assert p.action == "release" and p.problems == ()
    assert [n.reason for n in p.notices] == ["OwnedEntriesDisowned"]
    assert "node-role.kubernetes.io/gpu" in p.notices[0].message
    assert taints_of(released) == []
    labels = labels_of(released)
    assert "vgpu.volcano.sh/pool" not in labels
    assert labels["node-role.kubernetes.io/gpu"] == "true"
    assert contract.ANN_OWNED not in annotations_of(released)
    _, second = reconcile([released], [])
    assert second.patches == {}


def test_a_narrowed_node_still_in_its_pool_is_configured_and_its_record_cleaned() -> None:
    [configured], plan = reconcile([narrowed_node()], [policy("old", spec())])
    p = plan.plans["n1"]
    assert p.action == "update" and p.problems == ()
    assert [n.reason for n in p.notices] == ["OwnedEntriesDisowned"]
    assert taints_of(configured) == [DEFAULT_TAINT]  # still wanted
    assert "vgpu.volcano.sh/pool" not in labels_of(configured)
    assert not {"vgpu.volcano.sh/pool", "node-role.kubernetes.io/gpu"} & set(
        owned(configured).labels
    )
    _, second = reconcile([configured], [policy("old", spec())])
    assert second.patches == {}
    assert second.plans["n1"].notices == ()


def test_a_record_naming_only_what_it_may_never_own_costs_no_write_off_pool() -> None:
    record = json.dumps({"labels": {"kubernetes.io/hostname": "n1"}, "replaced": {}})
    raw = node("n1", annotations={contract.ANN_OWNED: record}, gpu="rtx4090")
    [same], plan = reconcile([raw], [policy("p", spec())])
    assert plan.plans["n1"].patch is None
    assert labels_of(same)["kubernetes.io/hostname"] == "n1"


def test_disowned_entries_leave_out_every_key_the_operator_may_never_act_on() -> None:
    record = Owned.model_validate(
        {
            "labels": {
                "kubernetes.io/hostname": "x",
                contract.LABEL_EXCLUDE: "true",
                contract.LABEL_STATE: "success",
                "bad key!": "v",
                "team": "ml",
            },
            "replaced": {"kubernetes.io/os": "windows", "team": "ai", "absent": "z"},
            "taints": [{"key": "node.kubernetes.io/x", "effect": "NoSchedule"}],
            "replacedTaints": [{"key": "t", "value": "v", "effect": "NoSchedule"}],
            "onDelete": "Retain",
        }
    )
    kept, bad = disowned_entries(record)
    assert kept.labels == {"team": "ml"}
    assert kept.replaced == {"team": "ai"}
    assert kept.taints == [] and kept.replaced_taints == []
    assert kept.on_delete == "Retain"
    assert len(bad) == 8, bad

"""The placement record on HAMi's plugin DaemonSet (`vgpu.volcano.sh/placement`): the operator's
placement PATCH records the nodeSelector entry it set and each toleration it added, and
`core.cleanup.placement_revert` takes off exactly those: a person's own nodeSelector keys and
tolerations stay, even one equal to a toleration the operator would have added."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.kit.nodekit import node, policy, reconcile
from vgpu_operator import contract
from vgpu_operator.core.cleanup import operator_taints, placement_revert
from vgpu_operator.core.nodes.mergepatch import apply_merge_patch
from vgpu_operator.core.volcano.placement import plan_placement
from vgpu_operator.models.placement import PlacementRecord
from vgpu_operator.models.policy import Taint

POOL = {"matchLabels": {"pool": "a"}}
CUSTOM = {"key": "gpu/shared", "effect": "NoSchedule"}
HAMI_TAINT = {"key": contract.DEFAULT_TAINT_KEY, "value": "hami", "effect": "NoSchedule"}
USERS = [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
HAMI_ONLY = {"mode": "hami-core", "nodeSelector": POOL}


def plugin(tolerations: list[dict[str, Any]], **selector: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "volcano-device-plugin", "namespace": "kube-system", "uid": "u"},
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": {"kubernetes.io/os": "linux", **selector},
                    "tolerations": tolerations,
                    "containers": [{"name": "volcano-device-plugin"}],
                }
            }
        },
    }


def configured(spec: dict[str, Any]) -> dict[str, Any]:
    (out,), plan = reconcile(
        [node("n1", labels={"pool": "a", "kubernetes.io/os": "linux"})], [policy("p", spec)]
    )
    assert plan.plans["n1"].patch is not None, "the policy configured nothing"
    return out


def placed(daemonset: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The DaemonSet after the operator's placement PATCH, as controller.workload_writes sends it
    (the patch, and the record of what it set, in one PATCH); resourceVersion 7."""
    p = plan_placement(daemonset, "hami", nodes)
    assert p.patch is not None and not p.adopted
    spec = p.patch["spec"]["template"]["spec"]
    record = PlacementRecord.of(daemonset).adding(
        spec.get("nodeSelector") or {}, p.added_tolerations
    )
    body = {
        **p.patch,
        "metadata": {"annotations": {contract.ANN_PLACEMENT: record.to_annotation()}},
    }
    out: dict[str, Any] = apply_merge_patch(daemonset, body)
    out["metadata"]["resourceVersion"] = "7"
    return out


def reverted(daemonset: dict[str, Any], taints: list[Taint] | None = None) -> dict[str, Any]:
    change = placement_revert(daemonset, taints or [])
    assert change.patch is not None
    assert change.patch["metadata"]["resourceVersion"] == "7"
    out: dict[str, Any] = apply_merge_patch(daemonset, change.patch)
    del out["metadata"]["resourceVersion"]
    if not out["metadata"].get("annotations"):
        out["metadata"].pop("annotations", None)  # as the apiserver stores an emptied map
    assert placement_revert(out).patch is None, "a second cleanup still changes the DaemonSet"
    return out


def test_the_placement_patch_records_what_it_set_and_cleanup_takes_off_exactly_that() -> None:
    nodes = [configured({"mode": "hami-core", "nodeSelector": POOL, "nodeTaints": [CUSTOM]})]
    original = plugin(USERS)
    patched = placed(original, nodes)
    record = PlacementRecord.of(patched)
    assert record.node_selector == {contract.LABEL_DEVICE_PLUGIN: "hami"}
    assert record.tolerations == [
        {"key": "gpu/shared", "operator": "Exists", "effect": "NoSchedule"}
    ]
    change = placement_revert(patched)
    assert f"removed nodeSelector {contract.LABEL_DEVICE_PLUGIN}=hami" in change.did
    assert "removed toleration gpu/shared:NoSchedule" in change.did
    assert f"removed annotation {contract.ANN_PLACEMENT}" in change.did
    assert reverted(patched) == original


def test_a_persons_toleration_equal_to_the_operators_stays() -> None:
    # The person tolerated the policy's taint in exactly the form the operator writes: the
    # operator adds no second one (only its nodeSelector), and cleanup leaves theirs.
    theirs = {**HAMI_TAINT, "operator": "Equal"}
    # (and a CPU node it reaches: placed by hand it would already be right, nothing to patch)
    nodes = [configured(HAMI_ONLY), node("cpu", labels={"kubernetes.io/os": "linux"})]
    original = plugin([*USERS, theirs])
    patched = placed(original, nodes)
    assert PlacementRecord.of(patched).tolerations == []
    out = reverted(patched, operator_taints(nodes, []))
    assert theirs in out["spec"]["template"]["spec"]["tolerations"]
    assert out == original


def test_a_second_placement_adds_to_the_record() -> None:
    first = placed(plugin(USERS), [configured(HAMI_ONLY)])
    assert [t["key"] for t in PlacementRecord.of(first).tolerations] == [contract.DEFAULT_TAINT_KEY]
    # the policy later taints its nodes with a custom taint instead: a second PATCH, tolerations
    # only (the first toleration stays: the operator never takes one off while it runs)
    spec = {**HAMI_ONLY, "nodeTaints": [CUSTOM]}
    second = placed(first, [configured(spec)])
    record = PlacementRecord.of(second)
    assert record.node_selector == {contract.LABEL_DEVICE_PLUGIN: "hami"}
    assert sorted(t["key"] for t in record.tolerations) == sorted(
        [contract.DEFAULT_TAINT_KEY, CUSTOM["key"]]
    )
    assert reverted(second) == plugin(USERS)


def test_a_selector_a_person_set_is_not_recorded_and_stays() -> None:
    # The person placed the plugin on the operator's label themselves; the operator only adds
    # the toleration it lacks, so only that is recorded and taken off.
    original = plugin(USERS, **{contract.LABEL_DEVICE_PLUGIN: "hami"})
    patched = placed(original, [configured(HAMI_ONLY)])
    assert PlacementRecord.of(patched).node_selector == {}
    assert reverted(patched) == original


def test_without_a_record_nothing_is_taken_off_and_what_looks_like_the_operators_is_named() -> None:
    taint = Taint(key=contract.DEFAULT_TAINT_KEY, value="hami", effect="NoSchedule")
    hand = plugin(
        [*USERS, {**HAMI_TAINT, "operator": "Equal"}], **{contract.LABEL_DEVICE_PLUGIN: "hami"}
    )
    change = placement_revert(hand, [taint])
    assert change.patch is None and change.did == ()
    assert any(
        line.startswith(f"nodeSelector {contract.LABEL_DEVICE_PLUGIN}=hami") for line in change.left
    )
    assert any("toleration volcano.sh/vgpu=hami:NoSchedule" in line for line in change.left)
    assert placement_revert(plugin(USERS), [taint]) == placement_revert(plugin(USERS))


def test_a_changed_selector_is_left_and_an_unreadable_record_takes_nothing_off() -> None:
    patched = placed(plugin(USERS), [configured(HAMI_ONLY)])
    changed = copy.deepcopy(patched)
    changed["spec"]["template"]["spec"]["nodeSelector"][contract.LABEL_DEVICE_PLUGIN] = "mine"
    change = placement_revert(changed)
    assert change.patch is not None
    assert "nodeSelector" not in change.patch["spec"]["template"]["spec"]
    assert any("changed since the operator set it" in line for line in change.left)

    broken = copy.deepcopy(patched)
    broken["metadata"]["annotations"][contract.ANN_PLACEMENT] = "{not json"
    change = placement_revert(broken)
    assert change.patch is None
    assert any(contract.ANN_PLACEMENT in line for line in change.left)


@pytest.mark.parametrize("raw", ["", None])
def test_an_empty_record_is_none(raw: str | None) -> None:
    assert PlacementRecord.from_annotation(raw) == PlacementRecord()

"""`core.cleanup`: what `vgpu-operator cleanup` takes off nodes, plugin DaemonSets and policies:
all the operator owns, nothing of a user's."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from tests.kit.nodekit import (
    DEFAULT_TAINT,
    annotations_of,
    apply,
    labels_of,
    node,
    policy,
    reconcile,
    taints_of,
)
from vgpu_operator import contract
from vgpu_operator.core.cleanup import (
    finalizer_release,
    node_cleanup,
    operator_taints,
)
from vgpu_operator.core.nodes.step import PAUSED_VALUE
from vgpu_operator.models.rollout import NodeRollout

USER_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
DP = contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL
POOL = {"matchLabels": {"pool": "a"}}


def _configured(spec: dict[str, Any], **node_args: Any) -> dict[str, Any]:
    (out,), plan = reconcile([node("n1", **node_args)], [policy("p", spec)])
    assert plan.plans["n1"].patch is not None, "the policy configured nothing"
    return out


def _cleaned(raw: dict[str, Any]) -> dict[str, Any]:
    change = node_cleanup(raw)
    assert change.patch is not None
    out = apply(raw, change.patch)
    assert node_cleanup(out).patch is None, "a second cleanup still changes the node"
    return out


def test_everything_of_the_operator_and_agent_goes_and_the_users_stays() -> None:
    spec = {"mode": "hami-core", "nodeSelector": POOL, "disableNvidiaDevicePlugin": True}
    user = {"pool": "a", "team": "ml", DP: "true"}
    configured = _configured(spec, labels=user, taints=[USER_TAINT])
    # what the agent adds beside the controller
    configured["metadata"]["labels"][contract.LABEL_STATE] = "success"
    configured["metadata"]["annotations"][contract.ANN_INVENTORY] = '{"gpus": []}'
    assert labels_of(configured)[DP] == "false"

    clean = _cleaned(configured)

    # the user's labels as before (the device-plugin switch restored), GFD and hostname kept
    before = node("n1", labels=user, taints=[USER_TAINT])
    assert labels_of(clean) == labels_of(before)
    assert taints_of(clean) == [USER_TAINT]
    assert annotations_of(clean) == {}


def test_words_name_every_change() -> None:
    configured = _configured({"mode": "hami-core", "nodeSelector": POOL}, labels={"pool": "a"})
    did = node_cleanup(configured).did
    assert f"removed taint {DEFAULT_TAINT['key']}={DEFAULT_TAINT['value']}:NoSchedule" in did
    assert "removed label volcano.sh/vgpu.enabled=true" in did
    assert f"removed annotation {contract.ANN_OWNED}" in did


def test_mig_node_loses_its_config_and_the_report_says_the_gpus_keep_mig() -> None:
    spec = {"mode": "mig", "nodeSelector": POOL}
    configured = _configured(spec, labels={"pool": "a"})
    change = node_cleanup(configured)
    assert any("nvidia-smi -mig 0" in line for line in change.left)
    assert contract.ANN_CONFIG not in annotations_of(_cleaned(configured))


def test_a_label_or_taint_changed_by_someone_is_left_and_reported() -> None:
    configured = _configured({"mode": "hami-core", "nodeSelector": POOL}, labels={"pool": "a"})
    changed = copy.deepcopy(configured)
    changed["metadata"]["labels"]["volcano.sh/vgpu.enabled"] = "mine"
    changed["spec"]["taints"] = [{**DEFAULT_TAINT, "value": "theirs"}]
    change = node_cleanup(changed)
    clean = _cleaned(changed)
    assert labels_of(clean)["volcano.sh/vgpu.enabled"] == "mine"
    assert taints_of(clean) == [{**DEFAULT_TAINT, "value": "theirs"}]
    assert len(change.left) == 2


def test_a_record_naming_a_system_key_leaves_that_key_and_cleans_the_rest() -> None:
    record = (
        '{"labels": {"kubernetes.io/role": "gpu", "team": "a"}, "taints": [], '
        '"replaced": {"kubernetes.io/os": "windows"}}'
    )
    raw = node(
        "n1",
        labels={"kubernetes.io/role": "gpu", "team": "a", contract.LABEL_POLICY: "p"},
        annotations={contract.ANN_OWNED: record, contract.ANN_TARGET: "{}"},
    )
    change = node_cleanup(raw)
    assert change.patch is not None
    out = apply(raw, change.patch)
    assert labels_of(out)["kubernetes.io/role"] == "gpu"  # never the operator's to remove
    assert labels_of(out).get("kubernetes.io/os") is None  # nor to restore
    assert "team" not in labels_of(out)  # what it may own is cleaned as recorded
    assert contract.LABEL_POLICY not in labels_of(out)
    assert annotations_of(out) == {}
    assert any("kubernetes.io/role" in line for line in change.left)


def test_an_unreadable_record_keeps_what_it_may_name_and_drops_only_the_contract_keys() -> None:
    record = '{"labels": ["kubernetes.io/role"]}'
    raw = node(
        "n1",
        labels={"kubernetes.io/role": "gpu", contract.LABEL_POLICY: "p"},
        annotations={contract.ANN_OWNED: record, contract.ANN_TARGET: "{}"},
    )
    change = node_cleanup(raw)
    assert change.patch is not None
    out = apply(raw, change.patch)
    assert labels_of(out)["kubernetes.io/role"] == "gpu"
    assert contract.LABEL_POLICY not in labels_of(out)
    assert annotations_of(out) == {contract.ANN_OWNED: record}
    assert any("none of it is trusted" in line for line in change.left)


def test_a_node_the_operator_never_touched_gets_no_patch() -> None:
    assert node_cleanup(node("n1", labels={"pool": "a"}, taints=[USER_TAINT])).patch is None


def test_taints_come_from_records_and_policies_blocking_only() -> None:
    soft = {"key": "soft", "effect": "PreferNoSchedule"}
    spec = {"mode": "hami-core", "nodeSelector": POOL, "nodeTaints": [soft]}
    configured = _configured({"mode": "hami-core", "nodeSelector": POOL}, labels={"pool": "a"})
    found = operator_taints([configured], [policy("q", spec)])
    assert [(t.key, t.value, t.effect) for t in found] == [
        (contract.DEFAULT_TAINT_KEY, "hami", "NoSchedule")
    ]


def test_finalizer_release_keeps_other_finalizers() -> None:
    raw = policy("p", {"mode": "hami-core"})
    raw["metadata"] |= {"resourceVersion": "3", "finalizers": ["x/y", contract.FINALIZER]}
    change = finalizer_release(raw)
    assert change.patch == {"metadata": {"resourceVersion": "3", "finalizers": ["x/y"]}}
    raw["metadata"]["finalizers"] = [contract.FINALIZER]
    only = finalizer_release(raw).patch
    assert only is not None and only["metadata"]["finalizers"] is None
    raw["metadata"]["finalizers"] = ["x/y"]
    assert finalizer_release(raw).patch is None


def test_a_transition_under_way_is_undone_cordon_and_paused_operands() -> None:
    dcgm = "nvidia.com/gpu.deploy.dcgm"
    now = datetime(2026, 1, 1, tzinfo=UTC)
    rollout = NodeRollout(
        policy="p",
        generation=2,
        target="{}",
        kind="disruptive",
        phase="Pausing",
        started=now,
        since=now,
        cordoned=True,
        paused={dcgm: "true"},
    )
    configured = _configured({"mode": "mig", "nodeSelector": POOL}, labels={"pool": "a"})
    configured["metadata"]["labels"][dcgm] = PAUSED_VALUE
    configured["metadata"]["annotations"][contract.ANN_ROLLOUT] = rollout.to_annotation()
    configured["spec"]["unschedulable"] = True
    change = node_cleanup(configured)
    clean = _cleaned(configured)
    assert labels_of(clean)[dcgm] == "true"
    assert "unschedulable" not in clean["spec"]
    assert "uncordoned (a transition of the operator had cordoned it)" in change.did
    # a node cordoned by someone else before the transition stays cordoned
    theirs = copy.deepcopy(configured)
    theirs["metadata"]["annotations"][contract.ANN_ROLLOUT] = rollout.model_copy(
        update={"cordoned": False}
    ).to_annotation()
    assert _cleaned(theirs)["spec"]["unschedulable"] is True


def test_the_retained_marker_goes_too() -> None:
    raw = node("n1", labels={"pool": "a"}, annotations={contract.ANN_RETAINED: "p"})
    assert annotations_of(_cleaned(raw)) == {}


def test_an_adopted_label_and_a_taint_changed_by_the_policy_are_given_back_on_uninstall() -> None:
    """adoptExisting took the user's `team=ml` and taint over; the policy then changed both.
    The uninstall puts the user's values back (core.nodes.patch `replaced`)."""
    user = {"key": "team", "value": "ml", "effect": "NoSchedule"}
    raw = node("n1", labels={"pool": "a", "team": "ml"}, taints=[user])
    first = {"nodeSelector": POOL, "mode": "hami-core", "adoptExisting": True}
    (held,), _ = reconcile(
        [raw], [policy("p", {**first, "nodeLabels": {"team": "ml"}, "nodeTaints": [user]})]
    )
    later = {**first, "nodeLabels": {"team": "ai"}, "nodeTaints": [{**user, "value": "gpu"}]}
    (changed,), _ = reconcile([held], [policy("p", later, generation=2)])
    assert labels_of(changed)["team"] == "ai" and taints_of(changed) == [{**user, "value": "gpu"}]
    change = node_cleanup(changed)
    clean = _cleaned(changed)
    assert labels_of(clean)["team"] == "ml"
    assert taints_of(clean) == [user]
    assert "restored label team=ml (its value before the operator)" in change.did
    assert any(line.startswith("restored taint team=ml:NoSchedule") for line in change.did)

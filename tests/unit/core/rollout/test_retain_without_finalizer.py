"""`onDelete: Retain` holds when the policy vanishes without the operator's finalizer pass (its
finalizer removed by hand, `helm uninstall --no-hooks`): the node's own record says Retain
(`Owned.on_delete`, written when it was configured), so nothing is stripped, MIG is not turned
off, no pod is evicted, and a transition under way is undone (core.nodes.adoption.retains,
core.rollout.leave.plan_with_leaves, core.cleanup_nodes.retaining_node)."""

from __future__ import annotations

from typing import Any

from tests.kit.nodekit import annotations_of, labels_of, node, parsed, policy, reconcile
from tests.kit.rollout_world import HAMI, MIG, World, pods, spec
from vgpu_operator import contract
from vgpu_operator.core.cleanup_nodes import retaining_node
from vgpu_operator.core.nodes.adoption import with_on_delete_default
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.models.node import NodeConfig, Owned

GFD = "nvidia.com/gpu.deploy.gpu-feature-discovery"


def vanish(w: World) -> None:
    """The policy is gone: no deletion the operator saw, no finalizer pass."""
    w.policies = []


def taints(w: World, name: str) -> list[dict[str, Any]]:
    return list(w.nodes[name].get("spec", {}).get("taints") or [])


def record(w: World, name: str) -> Owned:
    return Owned.from_annotation(w.annotations(name).get(contract.ANN_OWNED))


def test_the_record_carries_retain_and_a_vanished_policy_leaves_every_node_as_it_is() -> None:
    w = World.pool(2)
    body = {**spec(MIG, maxUnavailable=1), "onDelete": "Retain"}
    w.configure(body)
    w.agents_apply()
    w.pods["a100-0"] = pods("a100-0", "train-0")
    assert all(record(w, n).on_delete == "Retain" for n in w.nodes)
    before = {n: (w.labels(n), taints(w, n), w.config(n)) for n in w.nodes}
    vanish(w)
    w.settle(passes=6)
    assert w.evicted == []
    for name in w.nodes:
        labels, kept, config = before[name]
        assert w.annotations(name)[contract.ANN_RETAINED] == "pool"
        assert taints(w, name) == kept and not w.cordoned(name)
        assert {k: v for k, v in labels.items() if k != contract.LABEL_POLICY} == w.labels(name)
        assert w.config(name) == config  # MIG stays as it is: never parked at whole-gpu
        assert config is not None and config.mode == "mig"


def test_without_retain_in_the_record_a_vanished_policy_releases_at_once() -> None:
    w = World.pool(1)
    body = spec(MIG, maxUnavailable=1)
    w.configure(body)
    assert record(w, "a100-0").on_delete is None  # the default costs nothing in the record
    vanish(w)
    w.run()
    assert contract.ANN_RETAINED not in w.annotations("a100-0")
    assert w.config("a100-0") == NodeConfig(mode="whole-gpu")


def test_a_vanished_retain_policy_in_the_middle_of_a_transition_is_undone() -> None:
    w = World.pool(1, operands=True)
    base = {**spec(HAMI, maxUnavailable=1, drain={"mode": "Wait"}), "onDelete": "Retain"}
    w.configure(base)
    w.pods["a100-0"] = pods("a100-0", "train-0")
    mig = {**spec(MIG, maxUnavailable=1, drain={"mode": "Wait"}), "onDelete": "Retain"}
    w.set_policy("pool", mig, generation=2)
    w.run()  # cordoned, waiting for the pod
    w.pods["a100-0"] = []
    w.run()  # paused
    assert w.cordoned("a100-0")
    vanish(w)
    w.run()
    assert w.annotations("a100-0")[contract.ANN_RETAINED] == "pool"
    assert w.rollout("a100-0") is None and not w.cordoned("a100-0")
    assert w.labels("a100-0")[GFD] == "true"
    assert w.config("a100-0").mode == "hami-core"  # type: ignore[union-attr]


def test_the_operator_configs_retain_default_is_recorded_too() -> None:
    raw = node("n1", {"pool": "a"}, gpu="rtx4090")
    body = {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "a"}}}
    policies = with_on_delete_default(parsed([policy("p", body)]), "Retain")
    plan = plan_cluster([node_facts(raw)], policies)
    patch = plan.plans["n1"].patch
    assert patch is not None
    owned = Owned.from_annotation(patch["metadata"]["annotations"][contract.ANN_OWNED])
    assert owned.on_delete == "Retain"


def test_an_existing_node_gets_retain_recorded_once_and_delete_costs_no_write() -> None:
    """After an upgrade: a node configured before `onDelete` was recorded."""
    body = {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "a"}}}
    [configured], _ = reconcile([node("n1", {"pool": "a"}, gpu="rtx4090")], [policy("p", body)])
    [same], plan = reconcile([configured], [policy("p", body)])
    assert plan.patches == {}
    retain = {**body, "onDelete": "Retain"}
    [recorded], plan = reconcile([same], [policy("p", retain)])
    assert set(plan.patches["n1"]["metadata"]) == {"resourceVersion", "annotations"}
    assert Owned.from_annotation(annotations_of(recorded)[contract.ANN_OWNED]).on_delete == (
        "Retain"
    )
    [left], plan = reconcile([recorded], [])  # gone without a finalizer pass
    assert plan.plans["n1"].action == "release"
    assert annotations_of(left)[contract.ANN_RETAINED] == "p"
    assert labels_of(left)["volcano.sh/vgpu.enabled"] == "true"


def test_cleanup_reads_the_record_for_a_policy_that_no_longer_exists() -> None:
    body = {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "a"}}}
    raw = node("n1", {"pool": "a"}, gpu="rtx4090")
    [retain], _ = reconcile([raw], [policy("p", {**body, "onDelete": "Retain"})])
    [delete], _ = reconcile([raw], [policy("p", {**body, "onDelete": "Delete"})])
    [plain], _ = reconcile([raw], [policy("p", body)])
    assert retaining_node(retain, frozenset(), frozenset(), "Delete")
    assert not retaining_node(delete, frozenset(), frozenset(), "Retain")
    assert retaining_node(plain, frozenset(), frozenset(), "Retain")  # says nothing: default
    assert not retaining_node(plain, frozenset(), frozenset(), "Delete")
    # a policy that still exists decides, whatever the node recorded
    assert not retaining_node(retain, frozenset(), frozenset({"p"}), "Delete")

"""A static-MIG node another MIG owner reaches (NVIDIA's DRA kubelet plugin, seen by the
controller in its snapshot, `core.volcano.dra_kubelet_plugin.layout_owners`): the planner writes
its labels, taints and records but releases no static layout (`vgpu.volcano.sh/config` stays as
the node has it), the node's problem names the component, the node and the fix, and the layout
goes out in the first pass after the owner has left; the rollout starts no transition for it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.kit.nodekit import (
    DEFAULT_TAINT,
    annotations_of,
    apply,
    labels_of,
    node,
    parsed,
    policy,
    taints_of,
)
from vgpu_operator import contract
from vgpu_operator.core.nodes.events import node_events
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.gpu_owners import (
    DRA_FIX,
    LAYOUT_HELD,
    OtherOwner,
    dra_kubelet_plugin,
    layout_held,
)
from vgpu_operator.core.nodes.planner import ClusterPlan, plan_cluster
from vgpu_operator.core.nodes.status import compute_status
from vgpu_operator.core.rollout.decide import decide_cluster
from vgpu_operator.models.node import NodeConfig

POOL = {"matchLabels": {"pool": "a"}}
STATIC = {
    "mode": "mig",
    "nodeSelector": POOL,
    "mig": {"partitioning": "static", "layout": [{"gpus": "all", "profiles": {"1g.10gb": 7}}]},
}
DYNAMIC = {"mode": "mig", "nodeSelector": POOL, "mig": {"partitioning": "dynamic"}}
DS = "dra-driver-nvidia-gpu/dra-driver-nvidia-gpu-kubelet-plugin"
OWNER = dra_kubelet_plugin(DS, dynamic_mig=True)
NOW = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def plan(nodes: list[dict[str, Any]], spec: dict[str, Any], owners: Any) -> ClusterPlan:
    return plan_cluster([node_facts(n) for n in nodes], parsed([policy("p", spec)]), owners=owners)


def written(raw: dict[str, Any], cluster: ClusterPlan) -> dict[str, Any]:
    patch = cluster.plans[raw["metadata"]["name"]].patch
    return apply(raw, patch) if patch is not None else raw


def test_a_joining_node_gets_its_labels_and_taint_but_no_layout_while_the_plugin_reaches_it() -> (
    None
):
    n1 = node("n1", {"pool": "a"})
    first = plan([n1], STATIC, {"n1": OWNER})
    out = written(n1, first)
    annotations = annotations_of(out)
    assert contract.ANN_CONFIG not in annotations  # nothing released to the agent
    assert NodeConfig.from_annotation(annotations[contract.ANN_TARGET]).gpu_mig is not None
    assert labels_of(out)[contract.LABEL_MODE] == "mig"
    assert contract.LABEL_DEVICE_PLUGIN not in labels_of(out)  # no layout, no plugin for it
    assert taints_of(out) == [DEFAULT_TAINT]  # the taint that keeps the shipped plugin off
    [problem] = first.plans["n1"].problems
    assert problem.reason == LAYOUT_HELD == "AnotherMIGManager" and problem.node == "n1"
    assert problem.message.startswith(
        "the kubelet plugin of NVIDIA's DRA driver reaches this node "
        f"(DaemonSet {DS}, DynamicMIG on: it creates and destroys MIG devices itself): the "
        "operator releases no static MIG layout to n1 while it does (none released yet"
    )
    assert problem.fix == DRA_FIX and "kubeletPlugin.nodeSelector" in problem.fix

    # one Warning on the Node, though the pass hands its plan in twice (written, and with the
    # problem the status reports)
    events, _ = node_events([first.plans["n1"], first.plans["n1"]])
    assert [(e.type, e.reason) for e in events] == [
        ("Warning", LAYOUT_HELD),
        ("Normal", "ModeChanged"),
    ]
    assert events[0].message == problem.describe()

    # the same pass again: nothing more to write, the problem stays
    again = plan([out], STATIC, {"n1": OWNER})
    assert again.plans["n1"].patch is None and again.plans["n1"].problems == (problem,)

    # the policy's status says so: Stalled, NodeProblems, the node and the reason
    facts = node_facts(out)
    status = compute_status(parsed([policy("p", STATIC)])[0], again, {"n1": facts}, None, NOW)
    assert [(p.node, p.reason) for p in status.problem_nodes] == [("n1", LAYOUT_HELD)]
    stalled = {c.type: c for c in status.conditions}["Stalled"]
    assert stalled.status == "True" and "DRA driver" in stalled.message

    # the plugin no longer reaches it (the taint keeps new pods off): the layout goes out
    freed = plan([out], STATIC, {})
    released = written(out, freed)
    config = NodeConfig.from_annotation(annotations_of(released)[contract.ANN_CONFIG])
    assert config is not None and config.gpu_mig is not None
    assert config.gpu_mig.partitioning == "static" and freed.plans["n1"].problems == ()


def test_a_configured_node_keeps_its_released_layout_and_gets_no_new_one() -> None:
    n1 = node("n1", {"pool": "a"})
    configured = written(n1, plan([n1], STATIC, {}))
    before = annotations_of(configured)[contract.ANN_CONFIG]
    changed = {
        **STATIC,
        "mig": {"partitioning": "static", "layout": [{"gpus": "all", "profiles": {"3g.40gb": 2}}]},
    }
    held = plan([configured], changed, {"n1": OWNER})
    out = written(configured, held)
    assert annotations_of(out)[contract.ANN_CONFIG] == before  # the old layout, not the new one
    assert "3g.40gb" in annotations_of(out)[contract.ANN_TARGET]  # what the policy wants
    [problem] = held.plans["n1"].problems
    assert "the configuration released before stays, no change is released" in problem.message


def test_pools_the_agent_does_not_partition_are_not_held() -> None:
    for spec in (DYNAMIC, {"mode": "hami-core", "nodeSelector": POOL}):
        n1 = node("n1", {"pool": "a"})
        cluster = plan([n1], spec, {"n1": OWNER})
        assert cluster.plans["n1"].problems == ()
        assert contract.ANN_CONFIG in annotations_of(written(n1, cluster))
    # a dra pool's nodes are the driver's own, whatever layout they carry
    dra = NodeConfig.model_validate(
        {"mode": "dra", "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]}}
    )
    assert layout_held("n1", dra, {"n1": OWNER}) is None
    static = NodeConfig.model_validate({"mode": "mig", "mig": STATIC["mig"]})
    assert layout_held("n1", static, {"n1": OWNER}) is OWNER
    assert (
        layout_held("n1", static, {"n2": OWNER}) is None and layout_held("n1", static, None) is None
    )


def test_the_rollout_starts_no_transition_on_a_held_node() -> None:
    n1 = node("n1", {"pool": "a"})
    configured = written(n1, plan([n1], STATIC, {}))
    changed = {
        **STATIC,
        "mig": {"partitioning": "static", "layout": [{"gpus": "all", "profiles": {"3g.40gb": 2}}]},
    }
    policies = parsed([policy("p", changed, generation=2)])
    facts = [node_facts(configured)]
    free = decide_cluster(facts, policies, NOW)
    assert free.steps["n1"].rollout is not None  # a layout change: cordon, drain, apply
    owners: dict[str, OtherOwner] = {"n1": OWNER}
    held = decide_cluster(facts, policies, NOW, owners=owners)
    assert "n1" not in held.steps and held.policies["p"].in_transition == ()

"""A change the device plugin cannot apply is refused, not rolled (`core.volcano.plugin_refusal`):
in the node planner and the rollout (its nodes held, none taken), in the policy's status, and in
`plan`; and `plan` shows a node leaving a pool under running GPU pods paced by the leaving
policy's rollout, as the controller does (`core.rollout.leave`)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from tests.kit.nodekit import node, policy
from tests.kit.plan_world import LATER, PRESENT, a100_cluster, run
from vgpu_devcluster import upstream
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.status import compute_status
from vgpu_operator.core.nodes.validate import REFUSED_REASON, parse_policy
from vgpu_operator.core.plan import plan, proposed
from vgpu_operator.core.rollout.decide import decide_cluster
from vgpu_operator.core.volcano.plugin_refusal import refuse_ignored, snapshot_plugin_values
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import load_config


def v11_cluster() -> tuple[ClusterSnapshot, dict[str, Any]]:
    """`a100_cluster` with HAMi's v1.11.0 manifest (its plugin takes the split count from
    --device-split-count only), converged, GPU pods on two of the three nodes."""
    docs = upstream.hami_vgpu_documents("v1.11.0")
    steady, live = a100_cluster()
    plugin = [d for d in docs if d["kind"] == "DaemonSet"]
    others = [d for d in steady.daemonsets if d["metadata"]["name"] != "volcano-device-plugin"]
    placed = run(replace(steady, daemonsets=[*others, *plugin]), [live], LATER).after
    assert placed is not None  # the v1.11.0 DaemonSet placed and given its flags
    assert not run(placed, [live], LATER).changes
    return placed, live


def split_5(live: dict[str, Any]) -> dict[str, Any]:
    change = json.loads(json.dumps(live))
    change["spec"]["hamiCore"] = {"deviceSplitCount": 5}
    return change


def test_plan_says_the_change_is_refused_and_takes_no_node() -> None:
    s, live = v11_cluster()
    p = plan(s, [parse_policy(proposed({"a100-pool": live}, split_5(live)))], LATER)
    assert not p.changes and not p.nodes and not p.rollout and not p.restarts
    [note] = [n for n in p.notes if "refused" in n]
    assert "policy a100-pool: the change is refused (its nodes are held)" in note
    assert "spec.hamiCore.deviceSplitCount: 5 cannot take effect" in note
    assert "--device-split-count=10" in note and "v1.12.0" in note
    # the value the plugin uses is no change that needs refusing
    same = json.loads(json.dumps(live))
    same["spec"]["hamiCore"] = {"deviceSplitCount": 10}
    p = plan(s, [parse_policy(proposed({"a100-pool": live}, same))], LATER)
    assert not [n for n in p.notes if "refused" in n]
    assert {n.change for n in p.nodes} == {"restart"}


def test_the_same_change_rolls_on_plugin_v1_12() -> None:
    steady, live = a100_cluster()  # HAMi's v1.12.0 manifest
    p = plan(steady, [parse_policy(proposed({"a100-pool": live}, split_5(live)))], LATER)
    assert {n.change for n in p.nodes} == {"restart"}
    assert p.rollout and not [n for n in p.notes if "refused" in n]


def test_refused_policy_holds_its_nodes_and_says_why_in_its_status() -> None:
    s, live = v11_cluster()
    joining = node("a100-new", PRESENT)  # selected, never configured: waits too
    s = replace(s, nodes=[*s.nodes, joining])
    raw = proposed({"a100-pool": live}, split_5(live))
    parsed = refuse_ignored([parse_policy(raw)], snapshot_plugin_values(s))
    facts = [node_facts(n) for n in s.nodes]
    cluster = plan_cluster(facts, parsed)
    assert {p.action for p in cluster.plans.values()} == {"held"}
    assert all(p.patch is None and not p.problems for p in cluster.plans.values())
    decision = decide_cluster(facts, parsed, LATER)
    assert not decision.steps  # no node taken, cordoned or drained
    status = compute_status(parsed[0], cluster, {f.name: f for f in facts}, None, LATER, None, None)
    conditions = {c.type: c for c in status.conditions}
    stalled = conditions["Stalled"]
    assert (stalled.status, stalled.reason) == ("True", REFUSED_REASON)
    assert "spec.hamiCore.deviceSplitCount" in stalled.message
    assert "--device-split-count=10" in stalled.message and "fix:" in stalled.message
    assert conditions["Reconciling"].reason == REFUSED_REASON
    assert conditions["Ready"].status == "False"


def test_observe_mode_refuses_against_the_daemonsets_own_flag() -> None:
    s, live = v11_cluster()
    observe = replace(s, config=load_config("mode: observe\ngpuMemoryFactor: 11\n"))
    p = plan(observe, [parse_policy(proposed({"a100-pool": live}, split_5(live)))], LATER)
    [note] = [n for n in p.notes if "refused" in n]
    # HAMi's v1.11.0 manifest gives --device-split-count=10; the fix names that flag
    assert "--device-split-count=10" in note and "on kube-system/volcano-device-plugin" in note


# --- leaving nodes -----------------------------------------------------------------------------


def test_plan_paces_nodes_leaving_under_running_gpu_pods() -> None:
    steady, live = a100_cluster()  # a100-0 and a100-2 run GPU pods, a100-1 none
    narrowed = json.loads(json.dumps(live))
    narrowed["spec"]["rollout"] = {"maxUnavailable": 1}
    deleting = parse_policy(policy("a100-pool", narrowed["spec"], generation=2, deleting=True))
    p = plan(steady, [deleting], LATER)
    by_node = {n.node: n for n in p.nodes}
    # the idle node leaves at once
    assert by_node["a100-1"].action == "release" and by_node["a100-1"].step is None
    assert by_node["a100-1"].disruptive is None
    # the first busy node is cordoned and drained before its release, keeping its pool's labels
    first = by_node["a100-0"]
    assert first.leaves and first.new_owner is None
    assert first.step is not None and first.step.startswith("leave change, phase Draining")
    assert "cordon" in first.step
    assert first.disruptive is not None and "paced" in first.disruptive
    assert first.gpu_pods == ("team-a/train-0",)
    assert first.patch is not None and first.patch["spec"] == {"unschedulable": True}
    assert "vgpu.volcano.sh/policy" not in (first.patch["metadata"].get("labels") or {})
    # the other waits for room in the budget (maxUnavailable 1)
    assert by_node["a100-2"].step == "held: waits for room in the rollout budget"
    assert by_node["a100-2"].patch is None
    assert [(w.policy, w.nodes, w.now) for w in p.rollout] == [
        ("a100-pool", ("a100-0",), True),
        ("a100-pool", ("a100-2",), False),
    ]
    assert any("the rollout paces" in n for n in p.notes)


def test_a_leave_to_no_pool_under_a_live_policy_is_paced_too() -> None:
    steady, live = a100_cluster()
    other = json.loads(json.dumps(live))
    other["spec"]["nodeSelector"] = {"matchLabels": {"pool": "elsewhere"}}
    p = plan(steady, [parse_policy(proposed({"a100-pool": live}, other))], LATER)
    steps = {n.node: n.step for n in p.nodes}
    assert steps["a100-1"] is None  # idle: released at once
    assert all(
        (steps[n] or "").startswith("leave change, phase Draining") for n in ("a100-0", "a100-2")
    )  # maxUnavailable 2: both busy nodes at once

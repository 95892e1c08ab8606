"""`mode: observe`, the pure part (core.observe): what enforce would do, said per object."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tests.kit.nodekit import DEFAULT_TAINT, node, parsed, policy
from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.observe import (
    configuration_would_do,
    describe_patch,
    disruptive,
    node_would_do,
    observed_condition,
)
from vgpu_operator.core.plan import ConfigMapWrite, Plan, Restart, WorkloadPatch
from vgpu_operator.core.volcano.restarts import RestartAction
from vgpu_operator.models.config import load_config

HAMI = {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "a"}}}


def test_each_node_write_is_said_in_words() -> None:
    fresh = node("fresh", {"pool": "a"}, gpu="rtx4090")
    by_hand = node(
        "by-hand",
        {"pool": "a", "volcano.sh/vgpu.enabled": "true"},
        taints=[DEFAULT_TAINT],
        gpu="rtx4090",
    )
    clash = node("clash", {"pool": "a", "volcano.sh/vgpu.enabled": "no"}, gpu="rtx4090")
    facts = {n["metadata"]["name"]: node_facts(n) for n in (fresh, by_hand, clash)}
    cluster = plan_cluster(facts.values(), parsed([policy("p", HAMI)]))
    would = {w.name: w for w in node_would_do(cluster, facts)}
    assert set(would) == {"fresh", "by-hand", "clash"}
    assert would["fresh"].verb == "write" and would["fresh"].policy == "p"
    assert "+label volcano.sh/vgpu.enabled=true" in would["fresh"].what
    assert "+taint volcano.sh/vgpu=hami:NoSchedule" in would["fresh"].what
    # what a person already set is not written again: only the operator's own bookkeeping
    hand = would["by-hand"].what
    assert "volcano.sh/vgpu.enabled" not in hand and "taint" not in hand
    assert f"+label {contract.LABEL_POLICY}=p" in hand
    assert would["clash"].verb == "blocked" and "volcano.sh/vgpu.enabled=no" in would["clash"].what
    assert {w.name for w in disruptive(would.values())} == {"fresh", "clash"}


def test_describe_patch_removals_swaps_and_cordon() -> None:
    raw = node("n", {"a": "1"}, taints=[{"key": "k", "value": "x", "effect": "NoSchedule"}])
    patch = {
        "metadata": {"labels": {"a": None, "b": "2"}, "annotations": {"x/y": "z"}},
        "spec": {
            "taints": [{"key": "k", "value": "y", "effect": "NoSchedule"}],
            "unschedulable": True,
        },
    }
    assert describe_patch(node_facts(raw), patch) == (
        "-label a, +label b=2, +annotation x/y, ~taint k=y:NoSchedule, cordon"
    )


def test_condition_true_when_nothing_would_change_false_listing_it_otherwise() -> None:
    assert observed_condition("p", [], []) == (
        "True",
        "NothingToChange",
        "observe mode: enforce would change nothing",
    )
    status, reason, message = observed_condition("p", [], None)
    assert status == "True" and "not read yet" in message
    plan = Plan(
        configmaps=(
            ConfigMapWrite(
                "volcano-system",
                "volcano-vgpu-device-config",
                create=False,
                body={},
                diff="--- a"
                "\n+++ b\n-  resourceCountName: nvidia.com/gpu\n+  resourceCountName: y\n",
            ),
        ),
        workloads=(
            WorkloadPatch("DaemonSet", "kube-system", "volcano-device-plugin", ("placement",), {}),
        ),
        restarts=(
            Restart(
                RestartAction(
                    "rollout-deployment",
                    "volcano-system",
                    "volcano-scheduler",
                    "deployment/volcano-system/volcano-scheduler",
                    "its device config changed",
                )
            ),
        ),
    )
    cfg = configuration_would_do(plan)
    assert [(w.kind, w.namespace, w.name, w.verb) for w in cfg] == [
        ("ConfigMap", "volcano-system", "volcano-vgpu-device-config", "write"),
        ("DaemonSet", "kube-system", "volcano-device-plugin", "write"),
        ("Deployment", "volcano-system", "volcano-scheduler", "restart"),
    ]
    assert cfg[0].what == "rewrite, 2 changed lines"
    status, reason, message = observed_condition("p", [], cfg)
    assert (status, reason) == ("False", "WouldRestart")
    assert "restart 1" in message and "Deployment volcano-system/volcano-scheduler" in message


def test_observe_is_a_mode_of_the_operator_config() -> None:
    assert load_config("mode: observe\nonDelete: Retain\n").mode == "observe"
    assert load_config("onDelete: Retain").on_delete == "Retain"
    assert load_config("").on_delete == "Delete"


def test_a_deferred_restart_names_its_object_and_its_due_time() -> None:
    # the write plan's restarts, as core.volcano.restarts plans them: one due later, one plugin
    # pod (said on its node) due later, one due now
    due = datetime(2026, 11, 23, 11, 55, 7, tzinfo=UTC)
    scheduler = RestartAction(
        "rollout-deployment",
        "volcano-system",
        "volcano-scheduler",
        "deployment/volcano-system/volcano-scheduler",
        "1 pod(s) started before what the scheduler reads once changed at 2026-11-23T11:55:01Z",
    )
    reason = "started before the node-config entry of gpu-3 changed at 2026-11-23T11:55:01Z"
    pod = RestartAction(
        "delete-pod", "kube-system", "volcano-device-plugin-x2", "plugin-pod/gpu-3", reason, "gpu-3"
    )
    scheduler_now = replace(scheduler, name="other-scheduler")
    plan = Plan(
        restarts=(
            Restart(scheduler, due),
            Restart(pod, due + timedelta(seconds=2)),
            Restart(scheduler_now, None, {"spec": {}}),
        )
    )
    cfg = configuration_would_do(plan)
    assert [(w.kind, w.namespace, w.name, w.verb) for w in cfg] == [
        ("Deployment", "volcano-system", "volcano-scheduler", "restart"),
        ("Node", "", "gpu-3", "restart"),
        ("Deployment", "volcano-system", "other-scheduler", "restart"),
    ]
    assert cfg[0].message == (
        "restart: 1 pod(s) started before what the scheduler reads once changed at "
        "2026-11-23T11:55:01Z (due 2026-11-23T11:55:07Z)"
    )
    assert cfg[1].message == (
        f"restart its device plugin pod volcano-device-plugin-x2: {reason} "
        "(due 2026-11-23T11:55:09Z)"
    )
    assert cfg[2].message == cfg[2].what  # due now: no due time
    assert cfg[2].what.startswith("restart: 1 pod(s) started before")


def test_the_same_deferred_restart_planned_again_later_is_the_same_report() -> None:
    # observe writes nothing, so each pass plans the writes before a restart from its own now,
    # and the restart's due time moves with it: it is still the one restart (posted once)
    action = RestartAction("rollout-deployment", "volcano-system", "s", "deployment/x", "why")
    t = datetime(2026, 11, 23, 11, 55, 7, tzinfo=UTC)
    [first] = configuration_would_do(Plan(restarts=(Restart(action, t),)))
    [again] = configuration_would_do(Plan(restarts=(Restart(action, t + timedelta(seconds=5)),)))
    assert first == again and first.message != again.message

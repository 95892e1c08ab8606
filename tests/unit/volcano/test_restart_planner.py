"""Restart planning: what must re-read what changed restarts, coalesced and rate-limited; nothing
restarts for an unrelated change."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_operator.core.restarts import (
    PluginPod,
    RestartInputs,
    RestartSettings,
    Workload,
    daemonset_key,
    deployment_key,
    node_pod_key,
    plan_restarts,
    prune,
    record,
)
from vgpu_operator.models.config import load_config

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
FAST = RestartSettings(allowed=True, min_interval=timedelta(seconds=300), settle=timedelta(0))


def s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def sched(*starts: float, restarted: float | None = None) -> Workload:
    return Workload(
        "volcano-system",
        "volcano-scheduler",
        s(restarted) if restarted is not None else None,
        tuple(s(t) for t in starts),
    )


def plugin(*starts: float, restarted: float | None = None) -> Workload:
    return Workload(
        "kube-system",
        "volcano-device-plugin",
        s(restarted) if restarted is not None else None,
        tuple(s(t) for t in starts),
    )


def pods(**started: float) -> tuple[PluginPod, ...]:
    return tuple(
        PluginPod("kube-system", f"volcano-device-plugin-{n}", n, s(t)) for n, t in started.items()
    )


def kinds(plan: object) -> list[tuple[str, str]]:
    return [(a.kind, a.name) for a in plan.actions]  # type: ignore[attr-defined]


def test_device_config_change_restarts_scheduler_and_plugin_daemonset_not_single_pods() -> None:
    inputs = RestartInputs(
        scheduler_reads_changed=s(100),
        plugin_reads_changed=s(100),
        node_entries_changed={"a": s(100)},  # covered by the DaemonSet rollout
        scheduler=sched(0),
        plugin=plugin(0, 0),
        plugin_pods=pods(a=0, b=0),
    )
    plan = plan_restarts(inputs, {}, FAST, s(101))
    assert kinds(plan) == [
        ("rollout-deployment", "volcano-scheduler"),
        ("rollout-daemonset", "volcano-device-plugin"),
    ]
    assert plan.deferred == ()


def test_node_entry_change_restarts_only_that_nodes_plugin_pod() -> None:
    inputs = RestartInputs(
        scheduler_reads_changed=s(0),
        plugin_reads_changed=s(0),
        node_entries_changed={"a": s(100), "b": s(-50)},
        scheduler=sched(10),
        plugin=plugin(10, 10, 10),
        plugin_pods=pods(a=10, b=10, c=10),
    )
    plan = plan_restarts(inputs, {}, FAST, s(101))
    assert [(a.kind, a.node) for a in plan.actions] == [("delete-pod", "a")]
    assert plan.actions[0].name == "volcano-device-plugin-a"
    assert plan.actions[0].key == node_pod_key("a")


def test_unrelated_change_restarts_nothing() -> None:
    # everything was read after the last change of what it reads
    inputs = RestartInputs(
        scheduler_reads_changed=s(0),
        plugin_reads_changed=s(0),
        node_entries_changed={"a": s(0)},
        scheduler=sched(10),
        plugin=plugin(10),
        plugin_pods=pods(a=10),
    )
    assert plan_restarts(inputs, {}, FAST, s(1000)).actions == ()
    # nothing known to have changed at all
    blank = RestartInputs(scheduler=sched(10), plugin=plugin(10), plugin_pods=pods(a=10))
    assert plan_restarts(blank, {}, FAST, s(1000)).actions == ()


def test_changes_arriving_together_give_one_restart_after_the_last() -> None:
    slow = RestartSettings(min_interval=timedelta(seconds=300), settle=timedelta(seconds=5))
    ledger: dict[str, datetime] = {}
    restarted: dict[str, int] = {}
    sched_w, plugin_w = sched(0), plugin(0)
    # five changes one second apart; the planner runs after each (as the controller would)
    for i in range(5):
        change = s(100 + i)
        inputs = RestartInputs(
            scheduler_reads_changed=change,
            plugin_reads_changed=change,
            scheduler=sched_w,
            plugin=plugin_w,
        )
        plan = plan_restarts(inputs, ledger, slow, change)
        assert plan.actions == ()  # still settling
        assert plan.wake_at == change + timedelta(seconds=5)
    last = s(104)
    inputs = RestartInputs(
        scheduler_reads_changed=last,
        plugin_reads_changed=last,
        scheduler=sched_w,
        plugin=plugin_w,
    )
    plan = plan_restarts(inputs, ledger, slow, s(109))
    assert len(plan.actions) == 2
    for a in plan.actions:
        restarted[a.key] = restarted.get(a.key, 0) + 1
    ledger = record(ledger, plan.actions, s(109))
    # the rollout is under way (old pods still there): no second restart
    still_old = RestartInputs(
        scheduler_reads_changed=last,
        plugin_reads_changed=last,
        scheduler=sched(0, 110, restarted=109),
        plugin=plugin(0, 110, restarted=109),
    )
    assert plan_restarts(still_old, ledger, slow, s(120)).actions == ()
    assert plan_restarts(still_old, {}, slow, s(120)).actions == ()  # restartedAt alone suffices
    assert restarted == {
        deployment_key("volcano-system", "volcano-scheduler"): 1,
        daemonset_key("kube-system", "volcano-device-plugin"): 1,
    }


def test_rate_limit_defers_a_second_restart_until_the_interval_has_passed() -> None:
    ledger = {deployment_key("volcano-system", "volcano-scheduler"): s(100)}
    inputs = RestartInputs(scheduler_reads_changed=s(150), scheduler=sched(101))
    plan = plan_restarts(inputs, ledger, FAST, s(160))
    assert plan.actions == ()
    assert [d.until for d in plan.deferred] == [s(400)]
    assert plan.wake_at == s(400)
    later = plan_restarts(inputs, ledger, FAST, s(400))
    assert kinds(later) == [("rollout-deployment", "volcano-scheduler")]


def test_rate_limit_per_node_and_restart_under_way_not_repeated() -> None:
    inputs = RestartInputs(
        node_entries_changed={"a": s(200), "b": s(200)},
        plugin=plugin(0, 0),
        plugin_pods=pods(a=0, b=0),
    )
    ledger = {node_pod_key("a"): s(150)}  # a's pod was replaced 50 s before
    plan = plan_restarts(inputs, ledger, FAST, s(201))
    assert [a.node for a in plan.actions] == ["b"]
    assert [(d.key, d.until) for d in plan.deferred] == [(node_pod_key("a"), s(450))]
    ledger = record(ledger, plan.actions, s(201))
    # b's old pod is still listed (deletion not yet seen): not deleted twice
    again = plan_restarts(inputs, ledger, FAST, s(202))
    assert [a.node for a in again.actions] == []


def test_daemonset_rollout_under_way_covers_nodes_changed_before_it() -> None:
    inputs = RestartInputs(
        plugin_reads_changed=s(100),
        node_entries_changed={"a": s(100), "b": s(300)},
        plugin=plugin(0, 0, restarted=150),
        plugin_pods=pods(a=0, b=0),
    )
    plan = plan_restarts(inputs, {}, FAST, s(301))
    # a is replaced by the rollout; b's entry changed after the rollout was requested
    assert [a.node for a in plan.actions] == ["b"]


def test_deferred_daemonset_rollout_holds_back_single_pods() -> None:
    slow = RestartSettings(settle=timedelta(seconds=10))
    inputs = RestartInputs(
        plugin_reads_changed=s(100),
        node_entries_changed={"a": s(100)},
        plugin=plugin(0),
        plugin_pods=pods(a=0),
    )
    plan = plan_restarts(inputs, {}, slow, s(101))
    assert plan.actions == ()
    assert [d.key for d in plan.deferred] == [daemonset_key("kube-system", "volcano-device-plugin")]


def test_restarts_not_allowed_plans_nothing() -> None:
    cfg = load_config("restarts: {allowed: false}")
    off = RestartSettings.from_config(cfg, settle_seconds=0)
    inputs = RestartInputs(
        scheduler_reads_changed=s(100), scheduler=sched(0), plugin_reads_changed=s(100)
    )
    assert plan_restarts(inputs, {}, off, s(1000)).actions == ()
    on = RestartSettings.from_config(load_config("restarts: {minIntervalSeconds: 60}"), 2.5)
    assert on.min_interval == timedelta(seconds=60) and on.settle == timedelta(seconds=2.5)


def test_record_and_prune() -> None:
    inputs = RestartInputs(scheduler_reads_changed=s(10), scheduler=sched(0))
    plan = plan_restarts(inputs, {}, FAST, s(20))
    ledger = record({"old": s(-1000)}, plan.actions, s(20))
    assert ledger[deployment_key("volcano-system", "volcano-scheduler")] == s(20)
    assert prune(ledger, s(30), timedelta(seconds=600)) == {
        deployment_key("volcano-system", "volcano-scheduler"): s(20)
    }


@settings(max_examples=200, deadline=None)
@given(
    changes=st.lists(st.integers(min_value=0, max_value=120), min_size=1, max_size=12),
    settle=st.integers(min_value=0, max_value=30),
    interval=st.integers(min_value=0, max_value=600),
)
def test_any_burst_restarts_each_component_at_most_once_per_interval(
    changes: list[int], settle: int, interval: int
) -> None:
    """Simulate the controller: the planner runs at every change and at every wake-up; a
    restart replaces the pods a few seconds later. Each component restarts, its restarts are
    at least `interval` apart, and after the last one every pod has read the last change."""
    cfg = RestartSettings(
        min_interval=timedelta(seconds=interval), settle=timedelta(seconds=settle)
    )
    changes = sorted(changes)
    ledger: dict[str, datetime] = {}
    starts = {"sched": s(-10), "plugin": s(-10)}
    restarted: dict[str, list[datetime]] = {"sched": [], "plugin": []}
    restarted_at: dict[str, datetime | None] = {"sched": None, "plugin": None}
    t = s(changes[0])
    end = s(changes[-1] + settle + interval + 10)
    while t <= end:
        seen = [c for c in changes if s(c) <= t]
        last = s(seen[-1]) if seen else None
        inputs = RestartInputs(
            scheduler_reads_changed=last,
            plugin_reads_changed=last,
            scheduler=Workload("v", "sched", restarted_at["sched"], (starts["sched"],)),
            plugin=Workload("k", "plugin", restarted_at["plugin"], (starts["plugin"],)),
        )
        plan = plan_restarts(inputs, ledger, cfg, t)
        for a in plan.actions:
            which = "sched" if a.kind == "rollout-deployment" else "plugin"
            restarted[which].append(t)
            restarted_at[which] = t
            starts[which] = t + timedelta(seconds=1)  # the new pod starts a second later
        ledger = record(ledger, plan.actions, t)
        t += timedelta(seconds=1)
    final = s(changes[-1])
    for which in ("sched", "plugin"):
        times = restarted[which]
        assert times, "a change must lead to a restart"
        assert all(b - a >= timedelta(seconds=interval) for a, b in itertools.pairwise(times))
        assert starts[which] >= final  # the last pod read the last change

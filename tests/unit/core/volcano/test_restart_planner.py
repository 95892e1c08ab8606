"""Restart planning: what must re-read what changed restarts, coalesced and rate-limited; nothing
restarts for an unrelated change."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_operator.core.nodes.status import change_stamp
from vgpu_operator.core.volcano.restarts import (
    PluginPod,
    RestartInputs,
    RestartPlan,
    RestartSettings,
    Workload,
    daemonset_key,
    deployment_key,
    node_pod_key,
    plan_restarts,
    prune,
    record,
)
from vgpu_operator.core.volcano.times import parse_time
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


def plugin_at(*starts: datetime) -> Workload:
    return Workload("kube-system", "volcano-device-plugin", None, starts)


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
        # settle counted from the end of the change's second (pod starts are whole seconds)
        assert plan.wake_at == change + timedelta(seconds=6)
    last = s(104)
    inputs = RestartInputs(
        scheduler_reads_changed=last,
        plugin_reads_changed=last,
        scheduler=sched_w,
        plugin=plugin_w,
    )
    assert plan_restarts(inputs, ledger, slow, s(109)).actions == ()
    plan = plan_restarts(inputs, ledger, slow, s(110))
    assert len(plan.actions) == 2
    for a in plan.actions:
        restarted[a.key] = restarted.get(a.key, 0) + 1
    ledger = record(ledger, plan.actions, s(110))
    # the rollout is under way (old pods still there): no second restart
    still_old = RestartInputs(
        scheduler_reads_changed=last,
        plugin_reads_changed=last,
        scheduler=sched(0, 111, restarted=110),
        plugin=plugin(0, 111, restarted=110),
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


def test_a_pod_started_in_the_second_of_a_change_counts_as_started_before_it() -> None:
    """Pod start times are whole seconds: a pod that "started at :00" of the change's second
    may have started before the change (the race CI hit: a policy edit landed 0.x s after the
    plugin pod started, and the pod was taken as up to date)."""
    entry = parse_time(change_stamp(s(100.4)))
    assert entry == s(100.4)
    same_second = RestartInputs(node_entries_changed={"a": entry}, plugin_pods=pods(a=100))
    plan = plan_restarts(same_second, {}, FAST, s(110))
    assert kinds(plan) == [("delete-pod", "volcano-device-plugin-a")]
    next_second = RestartInputs(node_entries_changed={"a": entry}, plugin_pods=pods(a=101))
    assert kinds(plan_restarts(next_second, {}, FAST, s(110))) == []


def test_a_whole_second_change_time_takes_pods_of_that_second_as_newer() -> None:
    """A foreign edit (or a creation) is dated in whole seconds, like the pods: a fresh install
    whose pods start in the second its ConfigMaps are created is not restarted."""
    inputs = RestartInputs(
        scheduler_reads_changed=s(100),
        plugin_reads_changed=s(100),
        scheduler=sched(100),
        plugin=plugin(100, 100),
    )
    assert plan_restarts(inputs, {}, FAST, s(110)) == RestartPlan()
    older = RestartInputs(plugin_reads_changed=s(100), plugin=plugin(99, 100))
    assert kinds(plan_restarts(older, {}, FAST, s(110))) == [
        ("rollout-daemonset", "volcano-device-plugin")
    ]


def test_a_restart_waits_until_the_second_of_the_change_is_over() -> None:
    """Even with no settle time: a replacement started in the change's second could not be told
    from a stale pod, and would be restarted again."""
    inputs = RestartInputs(plugin_reads_changed=s(100.4), plugin=plugin(99, 100))
    early = plan_restarts(inputs, {}, FAST, s(100.9))
    assert kinds(early) == []
    assert [d.until for d in early.deferred] == [s(101)]
    assert kinds(plan_restarts(inputs, {}, FAST, s(101))) == [
        ("rollout-daemonset", "volcano-device-plugin")
    ]
    slow = RestartSettings(min_interval=timedelta(seconds=300), settle=timedelta(seconds=5))
    assert [d.until for d in plan_restarts(inputs, {}, slow, s(101)).deferred] == [s(106)]


@settings(max_examples=200, deadline=None)
@given(
    change=st.floats(min_value=0, max_value=50, allow_nan=False),
    settle=st.floats(min_value=0, max_value=5, allow_nan=False),
    lag=st.floats(min_value=0, max_value=3, allow_nan=False),
)
def test_a_replacement_is_never_taken_for_stale(change: float, settle: float, lag: float) -> None:
    """Whatever the change's sub-second time and the settle time: the pods that replace a
    restart's pods (started `lag` after it, recorded in whole seconds) are up to date, so a
    restart never repeats itself."""
    settings_ = RestartSettings(min_interval=timedelta(seconds=1), settle=timedelta(seconds=settle))
    inputs = RestartInputs(plugin_reads_changed=s(change), plugin=plugin(-1, -1))
    plan = plan_restarts(inputs, {}, settings_, s(change))
    due = plan.wake_at
    assert due is not None and not plan.actions
    done = plan_restarts(inputs, {}, settings_, due)
    assert kinds(done) == [("rollout-daemonset", "volcano-device-plugin")]
    started = (due + timedelta(seconds=lag)).replace(microsecond=0)
    after = RestartInputs(plugin_reads_changed=s(change), plugin=plugin_at(started, started))
    later = due + timedelta(seconds=lag + 60)
    assert plan_restarts(after, {}, settings_, later) == RestartPlan()


def test_a_restart_stamped_after_a_change_in_the_same_second_is_not_repeated() -> None:
    """restartedAt is written to the microsecond, so after an operator restart (empty ledger)
    a rollout requested 0.2 s after a change is still seen as covering it."""
    restarted = parse_time(change_stamp(s(100.6)))
    assert restarted is not None
    inputs = RestartInputs(
        plugin_reads_changed=s(100.4),
        plugin=Workload("kube-system", "volcano-device-plugin", restarted, (s(100),)),
    )
    assert kinds(plan_restarts(inputs, {}, FAST, s(110))) == []

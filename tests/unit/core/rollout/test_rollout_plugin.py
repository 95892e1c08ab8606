"""The rollout's waits around the device plugin (core.rollout.plugin): the pause waits for the
plugin pod to leave, the resume for the node-config entry of the released configuration, so the
plugin restarts once; and what the configuration reconciler's snapshot says of both."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from tests.kit.rollout_world import HAMI, MIG, T0, World, spec
from tests.kit.volcano_fixtures import healthy, replace
from vgpu_operator import contract
from vgpu_operator.controller.cache import ConfigurationState
from vgpu_operator.controller.rollout import PluginReadings
from vgpu_operator.core.rollout.plugin import (
    PluginReading,
    entry_rendered,
    plugin_left,
    plugin_readings,
)
from vgpu_operator.models.node import NodeConfig

DP = contract.LABEL_DEVICE_PLUGIN


def phase(w: World, node: str = "a100-0") -> str | None:
    r = w.rollout(node)
    return r.phase if r is not None else None


def to_pausing(w: World) -> None:
    """A pool of one node with its plugin running, changed to MIG, driven into Pausing."""
    w.configure(HAMI)
    w.plugin_pods_follow()
    w.entries_render()
    w.plugins_register()
    assert w.plugin_pods == {"a100-0"}
    w.set_policy("pool", spec(MIG, stepTimeoutSeconds=20), generation=2)
    w.run()  # cordon
    w.run()  # no pods: pause
    assert phase(w) == "Pausing" and DP not in w.labels("a100-0")


def test_the_release_waits_for_the_plugin_pod_to_leave() -> None:
    w = World.pool(1)
    w.plugin_pods = set()
    to_pausing(w)
    for _ in range(5):  # the DaemonSet controller has not removed the pod yet
        w.run()
        assert phase(w) == "Pausing"
        assert w.config("a100-0").mode == "hami-core"  # type: ignore[union-attr]
    w.plugin_pods_follow()  # the pod left
    w.run()
    assert phase(w) == "Applying" and w.config("a100-0").mode == "mig"  # type: ignore[union-attr]


def test_a_plugin_pod_that_never_leaves_fails_the_step_and_resumes_everything() -> None:
    w = World.pool(1)
    w.plugin_pods = set()
    to_pausing(w)
    for _ in range(25):
        w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.phase == "Failed" and r.reason == "PauseTimeout"
    assert "stepTimeoutSeconds (20s)" in r.message
    assert w.labels("a100-0")[DP] == "hami"  # not left paused
    assert w.config("a100-0").mode == "hami-core"  # type: ignore[union-attr]  # never released


def test_the_resume_waits_for_the_node_config_entry_of_the_release() -> None:
    w = World.pool(1)
    w.plugin_pods = set()
    to_pausing(w)
    w.plugin_pods_follow()
    w.run()  # released
    assert phase(w) == "Applying"
    w.agents_apply()  # the agent finished before the configuration pass rewrote the entry
    for _ in range(3):
        w.run()
        assert phase(w) == "Applying" and DP not in w.labels("a100-0")
    w.entries_render()
    w.run()  # the entry renders the release: the plugin resumes, reading it
    assert phase(w) == "Verifying" and w.labels("a100-0")[DP] == "hami"
    w.plugin_pods_follow()
    w.plugins_register()
    w.run()
    assert w.rollout("a100-0") is None and not w.cordoned("a100-0")


def test_the_resume_waits_for_the_second_after_the_entry_changed() -> None:
    w = World.pool(1)
    w.plugin_pods = set()
    to_pausing(w)
    w.plugin_pods_follow()
    w.run(advance=0.3)
    w.agents_apply()
    w.entries_render()
    # written just now: a plugin pod started in this second may count as having read the old
    # entry (pod start times are whole seconds) and be restarted once more
    w.entry_changed["a100-0"] = w.now.replace(microsecond=200_000)
    w.now = w.now.replace(microsecond=700_000)
    plan = w.run(advance=0.1)
    assert phase(w) == "Applying" and DP not in w.labels("a100-0")
    second = w.entry_changed["a100-0"].replace(microsecond=0) + timedelta(seconds=1)
    assert plan.due == second  # woken then, no watch event needed
    w.now = second
    w.run()
    assert phase(w) == "Verifying" and w.labels("a100-0")[DP] == "hami"


def test_an_entry_never_rewritten_fails_with_the_reason() -> None:
    w = World.pool(1)
    w.plugin_pods = set()
    to_pausing(w)
    w.plugin_pods_follow()
    w.run()
    w.agents_apply()
    for _ in range(25):
        w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.phase == "Failed" and r.reason == "NodeConfigTimeout"
    assert "node-config-rendered" in r.message
    assert w.labels("a100-0")[DP] == "hami"  # resumed on failure: no node is left paused


def test_with_the_plugin_simulated_each_node_pauses_and_resumes_once() -> None:
    w = World.pool(6)
    w.plugin_pods = set()
    w.configure(HAMI)
    w.set_policy("pool", spec(MIG, maxUnavailable=2), generation=2)
    resumes: dict[str, int] = {}
    before = {n: DP in w.labels(n) for n in w.nodes}
    for i in range(200):
        w.run()
        now = {n: DP in w.labels(n) for n in w.nodes}
        for n in w.nodes:
            if now[n] and not before[n]:
                resumes[n] = resumes.get(n, 0) + 1
                # resumed only with the entry of the released configuration in place
                assert w.entries.get(n) == w.annotations(n)[contract.ANN_CONFIG]
        before = now
        w.agents_apply()  # the agents are fast; the DaemonSet and the configuration pass lag
        if i % 2:
            w.plugin_pods_follow()
        if i % 3 == 2:
            w.entries_render()
        w.plugins_register()
        if not w.in_transition() and w.released("mig") == sorted(w.nodes):
            break
    assert w.released("mig") == sorted(w.nodes) and not w.in_transition()
    assert resumes == dict.fromkeys(w.nodes, 1)


def test_a_reading_older_than_the_pause_says_nothing() -> None:
    since = T0
    old = PluginReading(read_at=T0 - timedelta(seconds=1), running=False, entry=None)
    fresh = PluginReading(read_at=T0 + timedelta(seconds=1), running=False, entry=None)
    busy = PluginReading(read_at=T0 + timedelta(seconds=1), running=True, entry=None)
    assert (
        not plugin_left(old, since) and plugin_left(fresh, since) and not plugin_left(busy, since)
    )
    assert plugin_left(None, since)  # no configuration reconciler: nothing to wait for
    text = NodeConfig(mode="mig", policy="pool", generation=2).to_annotation()
    assert entry_rendered(None, text)
    assert not entry_rendered(fresh, text)
    assert entry_rendered(PluginReading(read_at=T0, running=False, entry=text), text)
    # report mode: nobody writes the entry, the resume does not wait for it
    assert entry_rendered(
        PluginReading(read_at=T0, running=False, entry=None, enforced=False), text
    )


def _node(snap: Any, name: str) -> dict[str, Any]:
    return next(n for n in snap.nodes if n["metadata"]["name"] == name)


def test_readings_from_the_configuration_snapshot() -> None:
    snap = healthy()
    got = plugin_readings(snap, T0, ["gpu-a", "gpu-b"], enforced=True)
    for name in ("gpu-a", "gpu-b"):
        assert got[name].running and got[name].read_at == T0
        assert got[name].entry == _node(snap, name)["metadata"]["annotations"][contract.ANN_CONFIG]
    # gpu-a released to mig: its entry still says hami-core until the pass rewrites it
    nodes = copy.deepcopy(snap.nodes)
    mig = NodeConfig(mode="mig", policy="pool", generation=2).to_annotation()
    next(n for n in nodes if n["metadata"]["name"] == "gpu-a")["metadata"]["annotations"][
        contract.ANN_CONFIG
    ] = mig
    # gpu-a's plugin pod is terminating (still there), gpu-b's gone
    pods = copy.deepcopy(snap.pods)
    for p in pods:
        if p["metadata"]["name"] == "volcano-device-plugin-gpu-a":
            p["metadata"]["deletionTimestamp"] = "2026-03-01T12:00:00Z"
    pods = [p for p in pods if p["metadata"]["name"] != "volcano-device-plugin-gpu-b"]
    later = plugin_readings(
        replace(snap, nodes=nodes, pods=pods), T0, ["gpu-a", "gpu-b"], enforced=True
    )
    assert later["gpu-a"].entry is None and later["gpu-a"].running
    assert later["gpu-b"].entry is not None and not later["gpu-b"].running
    assert plugin_readings(snap, T0, [], enforced=True) == {}
    # no plugin DaemonSet: no pod can come, nothing reads the entry; neither is waited for
    bare = plugin_readings(replace(snap, daemonsets=[], nodes=nodes), T0, ["gpu-a"], enforced=True)
    assert not bare["gpu-a"].served
    assert plugin_left(bare["gpu-a"], T0 + timedelta(hours=1)) and entry_rendered(
        bare["gpu-a"], mig
    )


def test_the_controller_reads_nothing_before_the_first_configuration_pass() -> None:
    snap = healthy()
    # no configuration reconciler: nothing waited for
    assert PluginReadings(None, enforced=True)(["gpu-a"]) == {}
    published = ConfigurationState()  # it runs, but has not finished a pass yet
    readings = PluginReadings(published, enforced=True)
    unknown = readings(["gpu-a"])["gpu-a"]
    assert unknown.running and unknown.entry is None
    assert not plugin_left(unknown, T0) and not entry_rendered(unknown, "{}")
    published.snapshot, published.read_at = snap, T0
    got = readings(["gpu-a", "gpu-new"])
    assert got["gpu-a"].read_at == T0 and got["gpu-a"].running
    assert got["gpu-new"].running  # a node the snapshot does not have yet: unknown
    assert readings(["gpu-a"])["gpu-a"] is got["gpu-a"]  # computed once per snapshot

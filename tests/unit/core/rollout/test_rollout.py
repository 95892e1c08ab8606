"""Safe transitions (core.rollout.decide): every step, the budget, the timeouts and failures,
resuming."""

from __future__ import annotations

from datetime import timedelta

from tests.kit.rollout_world import HAMI, MIG, World, pods, register, spec
from vgpu_operator import contract
from vgpu_operator.core.nodes.step import OPERAND_LABELS, PAUSED_VALUE
from vgpu_operator.core.rollout.arrive import change_kind, registration_problem
from vgpu_operator.models.node import NodeConfig

DP = contract.LABEL_DEVICE_PLUGIN
GFD = OPERAND_LABELS[1]


def cfg(raw: dict[str, object]) -> NodeConfig:
    return NodeConfig.model_validate(raw)


def test_change_kinds() -> None:
    hami = cfg({"mode": "hami-core", "policy": "p", "generation": 1})
    assert change_kind(hami, None) == "trivial"  # the first configuration
    assert change_kind(None, hami) == "trivial"  # leaving every pool
    assert change_kind(hami, hami) == "none"
    assert change_kind(hami.model_copy(update={"generation": 2}), hami) == "trivial"
    split = cfg({"mode": "hami-core", "hamiCore": {"deviceSplitCount": 4}})
    assert change_kind(split, hami) == "restart"
    assert change_kind(cfg({"mode": "mig"}), hami) == "disruptive"
    assert change_kind(cfg({"mode": "whole-gpu"}), hami) == "disruptive"  # a mode change
    static = {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]}
    other = {"partitioning": "static", "layout": [{"profiles": {"3g.40gb": 2}}]}
    assert change_kind(cfg({"mode": "mig", "mig": static}), cfg({"mode": "mig", "mig": other})) == (
        "disruptive"
    )


def test_a_disruptive_change_goes_through_every_step_in_order() -> None:
    w = World.pool(1, operands=True)
    w.configure(HAMI)
    w.plugins_register()
    w.pods["a100-0"] = pods("a100-0", "train-0", "train-1")
    w.set_policy("pool", MIG, generation=2)

    w.run()  # cordon; nothing released yet
    r = w.rollout("a100-0")
    assert r is not None and r.phase == "Draining" and r.cordoned
    assert w.cordoned("a100-0") and w.config("a100-0").mode == "hami-core"  # type: ignore[union-attr]
    w.run()  # evict
    assert w.evicted == ["team/train-0", "team/train-1"]
    assert w.config("a100-0").mode == "hami-core"  # type: ignore[union-attr]
    w.run()  # pods gone: pause the plugin and the GPU Operator's operands
    assert w.rollout("a100-0").phase == "Pausing"  # type: ignore[union-attr]
    assert DP not in w.labels("a100-0")
    assert w.labels("a100-0")[GFD] == PAUSED_VALUE
    assert w.rollout("a100-0").paused == {GFD: "true", OPERAND_LABELS[2]: "true"}  # type: ignore[union-attr]
    assert w.config("a100-0").mode == "hami-core"  # type: ignore[union-attr]
    w.run()  # release
    assert w.rollout("a100-0").phase == "Applying"  # type: ignore[union-attr]
    assert w.config("a100-0").mode == "mig"  # type: ignore[union-attr]
    assert DP not in w.labels("a100-0")  # the plugin stays off while the GPUs change
    w.run()  # the agent has not answered: nothing moves
    assert w.rollout("a100-0").phase == "Applying"  # type: ignore[union-attr]
    w.agents_apply()
    w.run()  # the agent reports success for it: resume the plugin
    assert w.rollout("a100-0").phase == "Verifying"  # type: ignore[union-attr]
    assert w.labels("a100-0")[DP] == "hami"
    w.run()  # the plugin still registers the old mode: wait
    assert w.rollout("a100-0").phase == "Verifying"  # type: ignore[union-attr]
    w.plugins_register()
    w.run()  # verified: operands back, uncordoned, the record gone
    assert w.rollout("a100-0") is None
    assert not w.cordoned("a100-0")
    assert w.labels("a100-0")[GFD] == "true"
    reasons = [e[1] for e in w.events if e[0] == "a100-0"]
    assert reasons == ["TransitionStarted", "ConfigurationReleased", "TransitionComplete"]
    # exactly one PATCH released the new configuration
    released = [
        p
        for _, p in w.patches
        if '"mode":"mig"' in p["metadata"].get("annotations", {}).get(contract.ANN_CONFIG, "")
    ]
    assert len(released) == 1


def test_max_unavailable_bounds_the_nodes_in_transition_and_is_reached() -> None:
    w = World.pool(10)
    w.configure(HAMI)
    for i in range(10):
        w.pods[f"a100-{i}"] = pods(f"a100-{i}", f"job-{i}")
    w.set_policy("pool", spec(MIG, maxUnavailable=3), generation=2)
    seen = w.settle(passes=200)
    assert max(len(s) for s in seen) == 3
    assert w.released("mig") == sorted(w.nodes)
    assert not w.in_transition() and not any(w.cordoned(n) for n in w.nodes)
    assert len(w.evicted) == 10


def test_a_percent_is_rounded_up() -> None:
    w = World.pool(10)
    w.configure(HAMI)
    w.set_policy("pool", spec(MIG, maxUnavailable="25%"), generation=2)
    w.run()
    assert len(w.in_transition()) == 3
    assert w.last is not None and w.last.policies["pool"].budget == 3
    assert len(w.last.policies["pool"].waiting) == 7


def test_nodes_are_released_only_after_their_pods_are_gone() -> None:
    w = World.pool(4)
    w.configure(HAMI)
    for i in range(4):
        w.pods[f"a100-{i}"] = pods(f"a100-{i}", f"job-{i}")
    w.set_policy("pool", spec(MIG, maxUnavailable=2), generation=2)
    for _ in range(60):
        w.run()
        for name in w.released("mig"):
            assert not w.pods[name], f"{name} released with pods"
        w.agents_apply()
        w.plugins_register()
    assert w.released("mig") == sorted(w.nodes)


def test_wait_mode_evicts_nothing_and_releases_after_the_pods_end() -> None:
    w = World.pool(1)
    w.configure(HAMI)
    w.pods["a100-0"] = pods("a100-0", "train-0")
    w.set_policy("pool", spec(MIG, drain={"mode": "Wait", "timeoutSeconds": 30}), generation=2)
    for _ in range(5):
        w.run()
    assert w.evicted == [] and w.rollout("a100-0").phase == "Draining"  # type: ignore[union-attr]
    assert w.config("a100-0").mode == "hami-core"  # type: ignore[union-attr]
    w.pods["a100-0"] = []  # the job ends
    w.settle()
    assert w.config("a100-0").mode == "mig"  # type: ignore[union-attr]
    assert not w.cordoned("a100-0")


def test_a_pdb_holds_the_node_until_the_drain_times_out_then_no_new_nodes() -> None:
    w = World.pool(3)
    w.configure(HAMI)
    w.pods["a100-0"] = pods("a100-0", "db-0")
    w.pdb_refuses["team/db-0"] = "Cannot evict pod as it would violate the pod's disruption budget."
    w.set_policy("pool", spec(MIG, drain={"timeoutSeconds": 10}, maxUnavailable=1), generation=2)
    for _ in range(9):
        w.run()
        assert w.rollout("a100-0").phase == "Draining"  # type: ignore[union-attr]
    for _ in range(3):
        w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.phase == "Failed" and r.reason == "DrainTimeout"
    assert "team/db-0" in r.message and "disruption budget" in r.message
    assert w.cordoned("a100-0")  # KeepCordoned, the default
    assert w.config("a100-0").mode == "hami-core"  # type: ignore[union-attr]
    assert ("a100-0", "DrainTimeout") in [(e[0], e[1]) for e in w.events]
    assert w.last is not None and w.last.policies["pool"].halted
    for _ in range(10):  # the rollout takes no new nodes
        w.run()
        w.agents_apply()
    assert w.in_transition() == ["a100-0"]
    assert w.released("mig") == []
    # a spec change (a new generation) resets it: the node is tried again
    del w.pdb_refuses["team/db-0"]
    w.set_policy("pool", spec(MIG, drain={"timeoutSeconds": 10}, maxUnavailable=1), generation=3)
    w.settle(passes=100)
    assert w.released("mig") == sorted(w.nodes)
    assert not any(w.cordoned(n) for n in w.nodes)


def test_empty_dir_pods_are_not_evicted_unless_allowed() -> None:
    w = World.pool(1)
    w.configure(HAMI)
    w.pods["a100-0"] = pods("a100-0", "cache-0", empty_dir=True)
    w.set_policy("pool", spec(MIG, drain={"timeoutSeconds": 3}), generation=2)
    for _ in range(6):
        w.run()
    r = w.rollout("a100-0")
    assert w.evicted == [] and r is not None and r.reason == "DrainTimeout"
    assert "deleteEmptyDirData" in r.message
    w.set_policy("pool", spec(MIG, drain={"deleteEmptyDirData": True}), generation=3)
    w.settle()
    assert w.evicted == ["team/cache-0"] and w.released("mig") == ["a100-0"]


def test_an_agent_failure_follows_on_failure_uncordon() -> None:
    w = World.pool(2, operands=True)
    w.configure(HAMI)
    w.set_policy("pool", spec(MIG, onFailure="Uncordon"), generation=2)
    for _ in range(4):
        w.run()
    assert w.rollout("a100-0").phase == "Applying"  # type: ignore[union-attr]
    w.agent("a100-0", "failed")
    w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.phase == "Failed" and r.reason == "AgentFailed"
    assert not w.cordoned("a100-0")
    assert w.labels("a100-0")[DP] == "hami" and w.labels("a100-0")[GFD] == "true"  # resumed
    assert w.last is not None and w.last.policies["pool"].failed[0][:2] == ("a100-0", "AgentFailed")
    for _ in range(5):
        w.run()
    assert w.in_transition() == ["a100-0"]  # a failed node counts; a100-1 is not taken


def test_an_agent_failure_keeps_the_node_cordoned_by_default() -> None:
    w = World.pool(1)
    w.configure(HAMI)
    w.set_policy("pool", MIG, generation=2)
    for _ in range(4):
        w.run()
    w.agent("a100-0", "failed")
    w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.reason == "AgentFailed" and w.cordoned("a100-0")
    assert w.labels("a100-0")[DP] == "hami"  # never left paused


def test_step_timeout_and_progress_deadline() -> None:
    w = World.pool(1)
    w.configure(HAMI)
    w.set_policy("pool", spec(MIG, stepTimeoutSeconds=5), generation=2)
    for _ in range(12):
        w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.reason == "ApplyTimeout"
    w2 = World.pool(1)
    w2.configure(HAMI)
    w2.pods["a100-0"] = pods("a100-0", "slow")
    w2.set_policy(
        "pool", spec(MIG, drain={"mode": "Wait"}, progressDeadlineSeconds=4), generation=2
    )
    for _ in range(8):
        w2.run()
    r2 = w2.rollout("a100-0")
    assert r2 is not None and r2.reason == "ProgressDeadlineExceeded"
    assert w2.last is not None and w2.last.due is None  # nothing left to wake up for


def test_a_user_cordon_is_left_in_place() -> None:
    w = World.pool(1)
    w.configure(HAMI)
    w.nodes["a100-0"]["spec"]["unschedulable"] = True  # cordoned by a person
    w.set_policy("pool", MIG, generation=2)
    w.settle()
    assert w.released("mig") == ["a100-0"] and w.cordoned("a100-0")


def test_drain_disabled_releases_under_the_budget_and_verifies() -> None:
    w = World.pool(4)
    w.configure(HAMI)
    w.pods["a100-0"] = pods("a100-0", "train-0")
    w.set_policy("pool", spec(MIG, maxUnavailable=2, drain={"enabled": False}), generation=2)
    w.run()
    assert w.released("mig") == ["a100-0", "a100-1"]
    assert not any(w.cordoned(n) for n in w.nodes) and w.evicted == []
    assert w.labels("a100-0")[DP] == "hami"  # not paused
    w.run()
    assert w.released("mig") == ["a100-0", "a100-1"]  # waits for the agents' success
    seen = w.settle()
    assert max(len(s) for s in seen) <= 2
    assert w.released("mig") == sorted(w.nodes)


def test_a_split_count_change_restarts_at_most_the_budget_without_cordon() -> None:
    w = World.pool(10)
    w.configure(HAMI)
    w.plugins_register()
    w.set_policy(
        "pool", spec({**HAMI, "hamiCore": {"deviceSplitCount": 4}}, maxUnavailable=3), generation=2
    )
    w.run()
    assert len(w.in_transition()) == 3
    changed = [n for n in w.nodes if (c := w.config(n)) and c.hami_core.device_split_count == 4]  # type: ignore[union-attr]
    assert len(changed) == 3 and not any(w.cordoned(n) for n in w.nodes)
    w.run()  # the plugin has not registered the new split count: nothing new
    assert len(w.in_transition()) == 3
    seen = w.settle()
    assert max(len(s) for s in seen) == 3
    assert all(w.config(n).hami_core.device_split_count == 4 for n in w.nodes)  # type: ignore[union-attr]


def test_trivial_changes_and_first_configurations_are_released_at_once() -> None:
    w = World.pool(5)
    w.set_policy("pool", spec(MIG, maxUnavailable=1))
    w.run()  # a new pool: everything at once, no cordon
    assert w.released("mig") == sorted(w.nodes) and not w.in_transition()
    w.set_policy("pool", spec({**MIG, "priority": 5}, maxUnavailable=1), generation=2)
    w.run()
    assert all(w.config(n).generation == 2 for n in w.nodes)  # type: ignore[union-attr]
    assert not w.in_transition()


def test_a_restarted_operator_resumes_and_never_releases_twice() -> None:
    """Every pass reads only the nodes: stopping after any pass and starting again (a new
    process) gives the same steps; the release is written exactly once."""
    w = World.pool(3)
    w.configure(HAMI)
    w.pods["a100-1"] = pods("a100-1", "job")
    w.set_policy("pool", spec(MIG, maxUnavailable=2), generation=2)
    for _ in range(40):
        w.run()  # the same pass twice in a row: what a restart between them does
        w.run(advance=0)
        w.agents_apply()
        w.plugins_register()
    assert w.released("mig") == sorted(w.nodes)
    for name in w.nodes:
        releases = [
            p
            for n, p in w.patches
            if n == name
            and '"mode":"mig"' in p["metadata"].get("annotations", {}).get(contract.ANN_CONFIG, "")
        ]
        assert len(releases) == 1, name


def test_a_change_withdrawn_before_its_release_uncordons() -> None:
    w = World.pool(1)
    w.configure(HAMI)
    w.pods["a100-0"] = pods("a100-0", "db")
    w.pdb_refuses["team/db"] = "429"
    w.set_policy("pool", MIG, generation=2)
    w.run()
    assert w.cordoned("a100-0")
    w.set_policy("pool", HAMI, generation=3)  # back to what is released
    w.run()
    assert w.rollout("a100-0") is None and not w.cordoned("a100-0")
    assert w.config("a100-0").mode == "hami-core"  # type: ignore[union-attr]
    assert w.config("a100-0").generation == 3  # type: ignore[union-attr]


def test_an_unreadable_record_holds_the_node_and_says_so() -> None:
    w = World.pool(1)
    w.configure(HAMI)
    w.nodes["a100-0"]["metadata"]["annotations"][contract.ANN_ROLLOUT] = "{not json"
    w.set_policy("pool", MIG, generation=2)
    w.run()
    assert w.annotations("a100-0")[contract.ANN_ROLLOUT] == "{not json"
    assert w.config("a100-0").mode == "hami-core"  # type: ignore[union-attr]
    assert ("a100-0", "RolloutStateUnreadable") in [(e[0], e[1]) for e in w.events]


def test_a_node_moving_between_policies_counts_against_the_destination() -> None:
    w = World.pool(2)
    w.configure(HAMI, name="old")
    w.nodes["a100-0"]["metadata"]["labels"]["pool"] = "mig"
    dest = {"nodeSelector": {"matchLabels": {"pool": "mig"}}, "mode": "mig"}
    w.set_policy("new", spec(dest, maxUnavailable=1))
    w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.policy == "new"
    assert w.last is not None and w.last.policies["new"].in_transition == ("a100-0",)
    assert w.last.policies["old"].in_transition == ()


def test_registration_checks() -> None:
    mig = cfg({"mode": "mig"})
    assert registration_problem(mig, register("mig")) is None
    assert "mode hami-core" in (registration_problem(mig, register("hami-core")) or "")
    assert "not registered" in (registration_problem(mig, "") or "")
    split = cfg({"mode": "hami-core", "hamiCore": {"deviceSplitCount": 4}})
    assert "split count [10]" in (registration_problem(split, register("hami-core", 10)) or "")
    assert registration_problem(cfg({"mode": "whole-gpu"}), None) is None  # NVIDIA's plugin


def test_a_progress_deadline_halts_the_policy_until_a_spec_change_resets_it() -> None:
    w = World.pool(3)
    w.configure(HAMI)
    w.pods["a100-0"] = pods("a100-0", "slow")  # Wait mode: this pod does not end in time
    rollout = {"drain": {"mode": "Wait", "timeoutSeconds": 60}, "maxUnavailable": 1}
    w.set_policy("pool", spec(MIG, progressDeadlineSeconds=5, **rollout), generation=2)
    for _ in range(8):
        w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.phase == "Failed" and r.reason == "ProgressDeadlineExceeded"
    assert w.last is not None and w.last.policies["pool"].halted
    for _ in range(20):  # time passes, nothing else happens: halted, no new node taken
        w.run()
        w.agents_apply()
    assert w.in_transition() == ["a100-0"] and w.released("mig") == []
    assert w.last.policies["pool"].waiting == ("a100-1", "a100-2")
    # a spec change that leaves the target's content alone (only the deadline) is a new
    # generation: the failed node starts over with a new deadline, and the rollout goes on
    w.pods["a100-0"] = []
    w.set_policy("pool", spec(MIG, progressDeadlineSeconds=600, **rollout), generation=3)
    w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.phase == "Draining" and r.generation == 3
    assert r.started == w.now - timedelta(seconds=1)  # the deadline counts from the new start
    w.settle(passes=100)
    assert w.released("mig") == sorted(w.nodes)
    assert not w.in_transition() and not any(w.cordoned(n) for n in w.nodes)

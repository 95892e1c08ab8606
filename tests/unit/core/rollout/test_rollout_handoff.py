"""A node's slot under `maxUnavailable` frees only once its end has been written: the PATCHes of
one pass go out concurrently, so a node started in the pass another one ends in could land
first, and the apiserver would show one node too many in transition."""

from __future__ import annotations

from tests.kit.rollout_world import HAMI, World, spec


def test_a_node_ending_its_transition_frees_its_slot_for_the_next_pass() -> None:
    w = World.pool(2)
    w.configure(HAMI)
    w.plugins_register()
    split = {**HAMI, "hamiCore": {"deviceSplitCount": 4}}
    w.set_policy("pool", spec(split, maxUnavailable=1), generation=2)
    w.run()  # the first node released (a restart: no cordon), its registration awaited
    assert w.in_transition() == ["a100-0"]
    w.plugins_register()
    plan = w.run()  # verified: it ends in this pass; the next node must wait for that write
    assert w.in_transition() == []
    assert plan.policies["pool"].waiting == ("a100-1",)
    w.run()  # the end has landed: the next node starts
    assert w.in_transition() == ["a100-1"]

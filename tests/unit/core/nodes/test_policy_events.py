"""One summary Event per policy per reconcile; node Events only for mode changes and failures."""

from __future__ import annotations

from tests.kit.nodekit import node, policy, reconcile
from vgpu_operator.core.nodes.events import node_events, policy_event, summarize

HAMI = {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "a"}}}


def test_one_event_summarises_a_reconcile() -> None:
    nodes = [node(f"n{i}", {"pool": "a"}) for i in range(3)]
    nodes.append(node("blocked", {"pool": "a", "volcano.sh/vgpu.enabled": "no"}))
    _, plan = reconcile(nodes, [policy("p", HAMI)])
    event = policy_event("p", plan.plans.values())
    assert event is not None
    assert (event.kind, event.name, event.type) == ("VGPUNodePolicy", "p", "Warning")
    assert event.message == (
        "3 nodes configured, 0 nodes updated, 0 nodes released, 0 conflicts, 1 node blocked"
    )


def test_release_and_update_counts() -> None:
    pols = [policy("p", HAMI)]
    nodes, _ = reconcile([node("a1", {"pool": "a"}), node("a2", {"pool": "a"})], pols)
    nodes[0]["metadata"]["labels"]["pool"] = "b"
    edited = [policy("p", {**HAMI, "nodeLabels": {"x": "y"}}, generation=2)]
    _, plan = reconcile(nodes, edited)
    summary = summarize("p", plan.plans.values())
    assert (summary.configured, summary.updated, summary.released) == (0, 1, 1)
    event = policy_event("p", plan.plans.values())
    assert event is not None and event.type == "Normal"
    assert event.message.startswith("0 nodes configured, 1 node updated, 1 node released")


def test_no_event_when_nothing_changed() -> None:
    pols = [policy("p", HAMI)]
    nodes, _ = reconcile([node("n1", {"pool": "a"})], pols)
    _, plan = reconcile(nodes, pols)
    assert policy_event("p", plan.plans.values()) is None
    assert node_events(plan.plans.values()) == ([], 0)


def test_conflicts_are_counted_for_both_policies() -> None:
    pols = [
        policy("a", HAMI),
        policy("b", HAMI),
        policy("c", {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "c"}}}),
    ]
    _, plan = reconcile([node("n1", {"pool": "a"}), node("n2", {"pool": "c"})], pols)
    assert summarize("a", plan.plans.values()).conflicts == 1
    assert summarize("b", plan.plans.values()).conflicts == 1
    assert policy_event("a", plan.plans.values()) is None  # nothing of a's changed
    event = policy_event("c", plan.plans.values())
    assert event is not None and "1 node configured" in event.message


def test_node_events_only_for_mode_changes_and_failures() -> None:
    pols = [policy("p", HAMI)]
    nodes = [node("n1", {"pool": "a"}), node("bad", {"pool": "a", "volcano.sh/vgpu.enabled": "x"})]
    nodes, plan = reconcile(nodes, pols)
    events, left_out = node_events(plan.plans.values())
    assert left_out == 0
    assert [(e.name, e.type, e.reason) for e in events] == [
        ("bad", "Warning", "LabelCollision"),
        ("n1", "Normal", "ModeChanged"),
    ]
    assert "none -> hami-core (policy p)" in events[1].message
    # a standing failure is reported once
    _, plan = reconcile(nodes, pols)
    assert node_events(plan.plans.values(), already_reported={("bad", "LabelCollision")}) == (
        [],
        0,
    )
    # an edit that keeps n1's mode gives n1 no event; "bad" is no longer blocked and joins
    edited = [policy("p", {**HAMI, "nodeLabels": {"x": "y"}}, generation=2)]
    _, plan = reconcile(nodes, edited)
    joined, _ = node_events(plan.plans.values(), already_reported={("bad", "LabelCollision")})
    assert [(e.name, e.reason) for e in joined] == [("bad", "ModeChanged")]
    # leaving the pool is a mode change
    _, plan = reconcile(nodes, [])
    left, _ = node_events(plan.plans.values())
    assert [(e.name, e.reason) for e in left] == [("n1", "ModeChanged")]
    assert "hami-core -> none (leaving policy p)" in left[0].message


def test_node_events_are_capped_per_reconcile_with_warnings_first() -> None:
    nodes = [node(f"n{i:03}", {"pool": "a"}) for i in range(50)]
    nodes.append(node("bad", {"pool": "a", "volcano.sh/vgpu.enabled": "no"}))
    _, plan = reconcile(nodes, [policy("p", HAMI)])
    events, left_out = node_events(plan.plans.values(), limit=10)
    assert len(events) == 10
    assert left_out == 41  # 50 joins + 1 collision, 10 shown
    assert events[0].type == "Warning"
    assert events[0].name == "bad"

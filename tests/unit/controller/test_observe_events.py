"""`mode: observe` reports each object once (controller.observe.Observer): one Event per object
and change, not one per pass, at most `MAX_EVENTS` a pass, the rest on the passes after."""

from __future__ import annotations

from typing import Any

from tests.kit.nodekit import node, parsed, policy
from vgpu_operator.controller import observe
from vgpu_operator.controller.observe import Observer
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster

HAMI = {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "a"}}}


def test_one_event_per_node_and_change_capped_per_pass(monkeypatch: Any) -> None:
    posted: list[tuple[str, str, str]] = []

    def post(ref: Any, kind: str, reason: str, message: str) -> None:
        posted.append((ref["metadata"]["name"], reason, message))

    monkeypatch.setattr(observe, "MAX_EVENTS", 2)
    seen = Observer(post, node_uid=lambda name: f"uid-{name}")
    raws = [node(f"n{i}", {"pool": "a"}, gpu="rtx4090") for i in range(3)]
    facts = {r["metadata"]["name"]: node_facts(r) for r in raws}
    cluster = plan_cluster(facts.values(), parsed([policy("p", HAMI)]))
    seen.nodes(cluster, facts)
    assert [(n, r) for n, r, _ in posted] == [("n0", "WouldWrite"), ("n1", "WouldWrite")]
    seen.nodes(cluster, facts)  # the next pass: only the one left over
    assert [n for n, _, _ in posted] == ["n0", "n1", "n2"]
    seen.nodes(cluster, facts)  # nothing new: nothing posted
    assert len(posted) == 3
    assert all(m.startswith("observe mode: enforce would configure: ") for _, _, m in posted)
    status, reason, message = seen.condition("p")
    assert (status, reason) == ("False", "WouldChange")
    assert "enforce would write 3 node(s) (0 refused)" in message

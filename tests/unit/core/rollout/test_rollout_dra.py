"""Moves into and out of a dra pool through the rollout gate (core.rollout): a busy node is drained
first (pods holding ResourceClaims count as GPU pods, core.rollout.gpu_pods), the plugin it had
leaves before the release (its placement label off, its pod gone), the other plugin comes after;
`maxUnavailable` holds; a node leaves DRA only once no pod holding a claim remains on it."""

from __future__ import annotations

from typing import Any

from tests.kit.rollout_world import HAMI, POOL, World, pods, spec
from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.rollout.arrival import arrival_kind
from vgpu_operator.core.rollout.arrive import NodeView
from vgpu_operator.models.node import NodeConfig

DRA = {"nodeSelector": POOL, "mode": "dra"}
DP = contract.LABEL_DEVICE_PLUGIN


def busy_pool(count: int, body: dict[str, Any]) -> World:
    w = World.pool(count)
    w.plugin_pods = set()  # the configuration reconciler reads the plugin pods
    w.configure(body)
    for name in w.nodes:
        w.pods[name] = pods(name, f"job-{name}")
    return w


def watch_moves(w: World, mode: str, passes: int = 80) -> list[dict[str, str | None]]:
    """Passes with agents and plugins doing their part; checks on every pass that at most one
    node is in transition, no node runs with another mode's pods once released, and no node
    ever has two plugins; returns each node's plugin label after every pass."""
    labels: list[dict[str, str | None]] = []
    pods_before = {n: [p.key for p in w.pods[n]] for n in w.nodes}
    for _ in range(passes):
        w.run()
        w.agents_apply()
        w.plugin_pods_follow()
        w.entries_render()
        w.plugins_register()
        assert len(w.in_transition()) <= 1, w.in_transition()
        for name in w.nodes:
            config = w.config(name)
            if config is not None and config.mode == mode:
                left = set(pods_before[name]) & {p.key for p in w.pods[name]}
                assert not left, f"{name} released into {mode} with {left} still on it"
        labels.append({n: w.labels(n).get(DP) for n in w.nodes})
        if all((c := w.config(n)) and c.mode == mode for n in w.nodes) and not w.in_transition():
            break
    return labels


def test_a_busy_hami_core_pool_moves_to_dra_one_node_at_a_time_drained_first() -> None:
    w = busy_pool(3, spec(HAMI, maxUnavailable=1))
    w.set_policy("pool", spec(DRA, maxUnavailable=1), generation=2)
    seen = watch_moves(w, "dra")
    assert w.released("dra") == sorted(w.nodes) and not w.in_transition()
    for name in w.nodes:
        sequence = [s[name] for s in seen]
        # HAMi's plugin leaves before the release, the DRA kubelet plugin comes after it
        assert sequence[-1] == "dra" and None in sequence
        first_dra = sequence.index("dra")
        assert "hami" not in sequence[first_dra:] and None in sequence[:first_dra]
        labels = w.labels(name)
        assert labels[contract.LABEL_MODE] == "dra" and "volcano.sh/vgpu.enabled" not in labels
        assert not w.nodes[name].get("spec", {}).get("taints") and not w.cordoned(name)
    assert sorted(w.evicted) == [f"team/job-a100-{i}" for i in range(3)]


def test_a_busy_dra_pool_moves_back_to_hami_core_its_claim_pods_drained_first() -> None:
    w = busy_pool(2, spec(DRA, maxUnavailable=1))
    assert w.released("dra") == sorted(w.nodes)
    w.set_policy("pool", spec(HAMI, maxUnavailable=1), generation=2)
    seen = watch_moves(w, "hami-core")
    assert w.released("hami-core") == sorted(w.nodes)
    for name in w.nodes:
        sequence = [s[name] for s in seen]
        assert sequence[-1] == "hami" and "dra" not in sequence[sequence.index("hami") :]


def test_a_dra_node_leaves_its_pool_only_once_no_pod_holding_a_claim_remains() -> None:
    w = busy_pool(2, spec(DRA, maxUnavailable=2))
    w.pods["a100-1"] = []  # idle: leaves at once
    claim_pod = w.pods["a100-0"][0].key
    w.pdb_refuses[claim_pod] = "Cannot evict pod as it would violate the pod's disruption budget."
    w.set_policy("pool", {**DRA, "nodeSelector": {"matchLabels": {"pool": "other"}}}, 2)
    for _ in range(5):
        w.run()
        w.plugin_pods_follow()
    assert contract.LABEL_POLICY not in w.labels("a100-1")
    assert w.labels("a100-0")[DP] == "dra"  # kept: its claims are still prepared by the plugin
    assert w.labels("a100-0")[contract.LABEL_MODE] == "dra" and w.cordoned("a100-0")
    r = w.rollout("a100-0")
    assert r is not None and r.kind == "leave" and r.phase == "Draining"
    del w.pdb_refuses[claim_pod]
    for _ in range(10):
        w.run()
        w.plugin_pods_follow()
    assert contract.LABEL_POLICY not in w.labels("a100-0") and DP not in w.labels("a100-0")
    assert not w.cordoned("a100-0") and w.rollout("a100-0") is None
    assert claim_pod in w.evicted


def test_a_busy_node_arriving_in_a_dra_pool_goes_through_the_gate() -> None:
    w = World.pool(1)
    facts = node_facts(w.nodes["a100-0"])
    busy = NodeView(facts=facts, owner="pool", pods=tuple(pods("a100-0", "whole-gpu-job")))
    idle = NodeView(facts=facts, owner="pool")
    target = NodeConfig(mode="dra", policy="pool", generation=1)
    assert arrival_kind(target, busy) == "disruptive"  # its GPUs would get a second owner
    assert arrival_kind(target, idle) == "trivial"

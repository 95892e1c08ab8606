"""A node with no released configuration (its first configuration, a lost
`vgpu.volcano.sh/config`, a selector widened over it) goes through the rollout gate when it is
busy and the release may change its GPUs (`core.rollout.arrival.arrival_kind`); an idle one, or
one whose GPUs stay as they are, is released at once."""

from __future__ import annotations

from tests.kit.nodekit import node
from tests.kit.rollout_world import HAMI, POOL, World, pods, register, spec
from vgpu_operator import contract
from vgpu_operator.core.mig.partition import synthetic_inventory
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.rollout.arrival import arrival_kind
from vgpu_operator.core.rollout.arrive import NodeView
from vgpu_operator.models.gpu_catalog import GPU_MODELS
from vgpu_operator.models.node import NodeConfig

A100 = GPU_MODELS["A100-SXM4-80GB"]
STATIC = {
    "nodeSelector": POOL,
    "mode": "mig",
    "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]},
}


def busy_a100s(count: int, *, mig: bool) -> World:
    """`count` A100 nodes, each with its agent's inventory (8 GPUs, MIG on or off, no
    instances) and two GPU pods; no policy has configured them yet."""
    w = World.pool(count, agent=False)
    for name in w.nodes:
        inventory = synthetic_inventory(A100, 8, mig=mig).to_annotation()
        w.nodes[name]["metadata"].setdefault("annotations", {})[contract.ANN_INVENTORY] = inventory
        w.pods[name] = pods(name, f"{name}-train-0", f"{name}-train-1")
    return w


def watch(w: World, passes: int = 80) -> None:
    """Run the rollout until it settles; assert at every pass that no node is released to MIG
    while a GPU pod is still on it, and that at most one node is in transition."""
    for _ in range(passes):
        w.run()
        w.agents_apply()
        w.plugins_register()
        assert len(w.in_transition()) <= 1, w.in_transition()
        for name in w.nodes:
            config = w.config(name)
            if config is not None and config.mode == "mig":
                assert w.pods.get(name) == [], (name, w.pods.get(name))
                assert name in w.in_transition() or not w.cordoned(name)
        if not w.in_transition() and w.released("mig") == sorted(w.nodes):
            return
    raise AssertionError(f"did not settle: {w.in_transition()}")


def test_busy_nodes_adopted_by_a_static_layout_are_cordoned_and_drained_one_at_a_time() -> None:
    w = busy_a100s(10, mig=False)
    w.set_policy("pool", spec(STATIC, maxUnavailable=1))
    w.run()
    assert w.released("mig") == [] and len(w.in_transition()) == 1
    first = w.in_transition()[0]
    assert w.cordoned(first) and w.rollout(first).phase == "Draining"  # type: ignore[union-attr]
    watch(w)
    assert sorted(w.evicted) == sorted(f"team/{n}-train-{i}" for n in w.nodes for i in (0, 1))


def test_a_lost_config_annotation_on_a_busy_node_goes_through_the_gate_again() -> None:
    w = busy_a100s(3, mig=False)
    for name in w.nodes:
        w.pods[name] = []
    w.set_policy("pool", spec(STATIC, maxUnavailable=1))
    w.run()  # idle: every node released at once
    assert w.released("mig") == sorted(w.nodes) and not w.in_transition()
    lost = "a100-1"
    del w.nodes[lost]["metadata"]["annotations"][contract.ANN_CONFIG]
    # its inventory shows MIG off again (reset by hand) and pods run there
    w.pods[lost] = pods(lost, "late-0")
    w.run()
    assert w.in_transition() == [lost] and w.cordoned(lost)
    assert w.config(lost) is None
    watch(w)
    assert w.evicted == ["team/late-0"]


def test_a_selector_widened_over_busy_nodes_takes_them_within_the_budget() -> None:
    w = busy_a100s(4, mig=False)
    for name in ("a100-2", "a100-3"):
        w.nodes[name]["metadata"]["labels"]["pool"] = "other"
    w.set_policy("pool", spec(STATIC, maxUnavailable=1))
    for _ in range(30):
        w.run()
        w.agents_apply()
        assert len(w.in_transition()) <= 1
    assert w.released("mig") == ["a100-0", "a100-1"]
    widened = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a100", "other"]}]}
    w.set_policy("pool", spec({**STATIC, "nodeSelector": widened}, maxUnavailable=1), 2)
    watch(w)
    assert {"team/a100-2-train-0", "team/a100-3-train-1"} <= set(w.evicted)


def test_idle_nodes_and_unchanged_gpus_are_released_at_once() -> None:
    # idle: nothing to protect
    w = busy_a100s(3, mig=False)
    for name in w.nodes:
        w.pods[name] = []
    w.set_policy("pool", spec(STATIC, maxUnavailable=1))
    w.run()
    assert w.released("mig") == sorted(w.nodes) and not w.in_transition()
    # busy, but the agent would only create instances on GPUs already in MIG mode
    w = busy_a100s(3, mig=True)
    w.set_policy("pool", spec(STATIC, maxUnavailable=1))
    w.run()
    assert w.released("mig") == sorted(w.nodes) and not w.in_transition()
    # busy hand-configured HAMi-core nodes without an agent and no MIG resources (seed 000)
    w = World.pool(3, agent=False)
    for name in w.nodes:
        w.pods[name] = pods(name, "infer-0")
    w.set_policy("pool", spec(HAMI, maxUnavailable=1))
    w.run()
    assert w.released("hami-core") == sorted(w.nodes) and not w.in_transition()


def test_without_an_inventory_a_busy_node_is_gated_whenever_mig_is_involved() -> None:
    hami = NodeConfig.model_validate({"mode": "hami-core"})
    mig = NodeConfig.model_validate({"mode": "mig", "mig": {"partitioning": "dynamic"}})
    busy = pods("n", "train-0")
    plain = node_facts(node("n"))
    raw = node("n")
    raw["status"] = {"capacity": {"nvidia.com/mig-1g.10gb": "7"}}
    with_mig = node_facts(raw)
    assert arrival_kind(mig, NodeView(plain, "p", busy)) == "disruptive"
    assert arrival_kind(hami, NodeView(plain, "p", busy)) == "trivial"
    assert arrival_kind(hami, NodeView(with_mig, "p", busy)) == "disruptive"
    assert arrival_kind(hami, NodeView(with_mig, "p", ())) == "trivial"  # idle
    # HAMi's plugin registers the GPUs in mode mig (its dynamic MIG, seed 001): MIG is on, and
    # dynamic MIG over it keeps the instances; a static layout still may not
    hami_mig = register("mig")
    assert arrival_kind(mig, NodeView(plain, "p", busy, registration=hami_mig)) == "trivial"
    static = NodeConfig.model_validate({"mode": "mig", "mig": STATIC["mig"]})
    assert arrival_kind(static, NodeView(plain, "p", busy, registration=hami_mig)) == ("disruptive")
    assert arrival_kind(hami, NodeView(plain, "p", busy, registration=hami_mig)) == "disruptive"

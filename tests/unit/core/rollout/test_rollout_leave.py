"""A node leaving every pool (core.rollout.leave): paced by the policy it leaves while GPU pods run
on it, at once when idle, nothing at all for `onDelete: Retain`."""

from __future__ import annotations

from typing import Any

from tests.kit.nodekit import parsed, policy
from tests.kit.rollout_world import HAMI, MIG, World, pods, spec
from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.status import compute_status
from vgpu_operator.core.nodes.step import OPERAND_LABELS, PAUSED_VALUE
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy import VGPUNodePolicyStatus

DP = contract.LABEL_DEVICE_PLUGIN
GFD = OPERAND_LABELS[1]


def delete(w: World, body: dict[str, Any], generation: int = 1, name: str = "pool") -> None:
    """The policy gets its deletionTimestamp (its finalizer keeps it)."""
    w.policies = [p for p in w.policies if p["metadata"]["name"] != name]
    w.policies.append(policy(name, body, generation=generation, deleting=True))


def busy(w: World) -> list[str]:
    """Nodes in transition as a watcher sees them: a record, or a cordon."""
    return sorted(n for n in w.nodes if w.rollout(n) is not None or w.cordoned(n))


def in_pool(w: World, name: str) -> bool:
    return contract.LABEL_POLICY in w.labels(name)


def with_pods(w: World) -> None:
    for name in w.nodes:
        w.pods[name] = pods(name, f"job-{name}")


def test_a_deleted_pool_leaves_max_unavailable_nodes_at_a_time_each_drained_first() -> None:
    w = World.pool(6, operands=True)
    body = spec(HAMI, maxUnavailable=2)
    w.configure(body)
    with_pods(w)
    delete(w, body)
    most = 0
    for _ in range(80):
        w.run()
        most = max(most, len(busy(w)))
        for name in w.nodes:
            if not in_pool(w, name):
                assert not w.pods[name], f"{name} left its pool with GPU pods on it"
    assert most == 2, most
    for name in w.nodes:
        assert not in_pool(w, name) and w.rollout(name) is None and not w.cordoned(name)
        assert DP not in w.labels(name) and contract.ANN_OWNED not in w.annotations(name)
        assert w.labels(name)[GFD] == "true", "the GPU Operator's operands resumed"
        assert not any(t.get("key") == contract.DEFAULT_TAINT_KEY for t in taints(w, name))
    assert len(w.evicted) == 6
    reasons = [e[1] for e in w.events if e[0] == "a100-0"]
    assert reasons == ["TransitionStarted", "ConfigurationReleased", "TransitionComplete"]


def test_a_deleted_pools_percent_budget_is_of_the_pool_it_had_not_of_what_is_left() -> None:
    # 10 % of 20 nodes is 2 until the last of them; taken of the nodes still leaving it fell to
    # 1 once half had left (bench/rollout.py's leave at 100 nodes ran 2-5 at a time, not 10).
    w = World.pool(20)
    body = spec(HAMI, maxUnavailable="10%")
    w.configure(body)
    with_pods(w)
    delete(w, body)
    counts = []
    for _ in range(200):
        plan = w.run()
        waiting = sum(len(p.waiting) for p in plan.policies.values())
        if waiting:
            counts.append(len(busy(w)))
        if not any(in_pool(w, n) for n in w.nodes):
            break
    assert not any(in_pool(w, n) for n in w.nodes)
    # (0: the pass that ends two nodes' leaves; their slots free on the next)
    assert 2 in counts and set(counts) <= {0, 2}, counts
    assert len(w.evicted) == 20


def taints(w: World, name: str) -> list[dict[str, Any]]:
    return list(w.nodes[name].get("spec", {}).get("taints") or [])


def test_until_its_release_a_leaving_node_keeps_its_pool_and_only_the_step_is_written() -> None:
    w = World.pool(1, operands=True)
    body = spec(HAMI, maxUnavailable=1)
    w.configure(body)
    w.pods["a100-0"] = pods("a100-0", "train-0")
    delete(w, body)
    plan = w.run()  # cordon
    assert plan.held == {"a100-0": "pool"}
    r = w.rollout("a100-0")
    assert r is not None and r.kind == "leave" and r.phase == "Draining" and r.cordoned
    assert in_pool(w, "a100-0") and w.labels("a100-0")[DP] == "hami"
    assert any(t["key"] == contract.DEFAULT_TAINT_KEY for t in taints(w, "a100-0"))
    w.run()  # evict
    assert w.evicted == ["team/train-0"] and in_pool(w, "a100-0")
    w.run()  # pods gone: pause
    r = w.rollout("a100-0")
    assert r is not None and r.phase == "Pausing"
    assert DP not in w.labels("a100-0") and w.labels("a100-0")[GFD] == PAUSED_VALUE
    assert in_pool(w, "a100-0"), "still the pool's until its release"
    w.run()  # release: the operator's labels and taints off, still cordoned
    r = w.rollout("a100-0")
    assert r is not None and r.phase == "Applying" and r.released
    assert not in_pool(w, "a100-0") and w.cordoned("a100-0")
    assert not taints(w, "a100-0") and w.config("a100-0") is None
    w.run()  # no MIG to turn off: done
    assert w.rollout("a100-0") is None and not w.cordoned("a100-0")
    assert w.labels("a100-0")[GFD] == "true"


def test_idle_nodes_leave_at_once_and_whole_gpu_pods_are_not_drained() -> None:
    w = World.pool(3)
    body = spec(HAMI, maxUnavailable=1)
    w.configure(body)
    delete(w, body)
    plan = w.run()
    assert not plan.held and not any(in_pool(w, n) for n in w.nodes)
    assert not any(w.cordoned(n) for n in w.nodes)
    whole = World.pool(2)
    gpu = {"nodeSelector": HAMI["nodeSelector"], "mode": "whole-gpu"}
    whole.configure(gpu)
    with_pods(whole)
    delete(whole, gpu)
    whole.run()
    assert not any(in_pool(whole, n) or whole.cordoned(n) for n in whole.nodes)
    assert whole.evicted == []


def test_labels_that_no_longer_match_leave_the_same_way() -> None:
    w = World.pool(2)
    body = spec(HAMI, maxUnavailable=1)
    w.configure(body)
    with_pods(w)
    for name in w.nodes:
        w.nodes[name]["metadata"]["labels"]["pool"] = "other"
    w.run()
    assert busy(w) == ["a100-0"] and all(in_pool(w, n) for n in w.nodes)
    w.settle(passes=40)
    assert not any(in_pool(w, n) or w.cordoned(n) for n in w.nodes)


def test_retain_leaves_every_node_as_it_is() -> None:
    w = World.pool(2)
    body = spec(HAMI, maxUnavailable=1, drain={"enabled": True})
    body["onDelete"] = "Retain"
    w.configure(body)
    with_pods(w)
    before = {n: (w.labels(n), taints(w, n)) for n in w.nodes}
    delete(w, body)
    plan = w.run()
    assert not plan.steps and w.evicted == []
    for name in w.nodes:
        labels, kept = before[name]
        assert w.annotations(name)[contract.ANN_RETAINED] == "pool"
        assert taints(w, name) == kept and not w.cordoned(name)
        assert {k: v for k, v in labels.items() if k != contract.LABEL_POLICY} == w.labels(name)


def test_a_mig_node_waits_for_its_agent_to_turn_mig_off() -> None:
    w = World.pool(1)
    body = spec(MIG, maxUnavailable=1)
    w.configure(body)
    w.agents_apply()
    w.pods["a100-0"] = pods("a100-0", "train-0")
    delete(w, body)
    for _ in range(4):  # cordon, evict, pause, release
        w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.phase == "Applying" and r.agent
    parked = w.config("a100-0")
    assert parked is not None and parked.mode == "whole-gpu"
    w.run()
    assert w.rollout("a100-0") is not None, "the agent has not turned MIG off yet"
    w.agent("a100-0", "success", NodeConfig(mode="whole-gpu"))
    w.run()
    assert w.rollout("a100-0") is None and not w.cordoned("a100-0")


def test_a_refused_drain_fails_keeps_the_pool_and_a_spec_change_tries_again() -> None:
    w = World.pool(3)
    body = spec(HAMI, maxUnavailable=1, drain={"timeoutSeconds": 5})
    w.configure(body)
    with_pods(w)
    w.pdb_refuses["team/job-a100-0"] = "Cannot evict pod: it would violate a disruption budget."
    delete(w, body)
    for _ in range(10):
        w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.failed and r.reason == "DrainTimeout"
    assert in_pool(w, "a100-0") and w.labels("a100-0")[DP] == "hami" and w.cordoned("a100-0")
    assert busy(w) == ["a100-0"], "halted: no new node leaves"
    assert w.last is not None and w.last.policies["pool"].halted
    del w.pdb_refuses["team/job-a100-0"]
    delete(w, spec(HAMI, maxUnavailable=1, drain={"timeoutSeconds": 20}), generation=2)
    w.settle(passes=60)
    assert not any(in_pool(w, n) or w.cordoned(n) for n in w.nodes)
    assert w.rollout("a100-0") is None


def test_a_node_selected_again_ends_its_leave() -> None:
    w = World.pool(1)
    body = spec(HAMI, maxUnavailable=1, drain={"mode": "Wait"})
    w.configure(body)
    w.pods["a100-0"] = pods("a100-0", "train-0")
    w.nodes["a100-0"]["metadata"]["labels"]["pool"] = "other"
    w.run()
    assert w.cordoned("a100-0")
    w.nodes["a100-0"]["metadata"]["labels"]["pool"] = "a100"
    w.run()
    assert w.rollout("a100-0") is None and not w.cordoned("a100-0")
    assert in_pool(w, "a100-0") and w.labels("a100-0")[DP] == "hami"


def test_a_transition_under_way_becomes_a_leave_and_its_cordon_is_undone() -> None:
    w = World.pool(1)
    w.configure(spec(HAMI, maxUnavailable=1, drain={"mode": "Wait"}))
    w.pods["a100-0"] = pods("a100-0", "train-0")
    mig = spec(MIG, maxUnavailable=1, drain={"mode": "Wait"})
    w.set_policy("pool", mig, generation=2)
    w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.kind == "disruptive" and r.cordoned
    delete(w, mig, generation=2)
    w.run()
    r = w.rollout("a100-0")
    assert r is not None and r.kind == "leave" and r.cordoned and in_pool(w, "a100-0")
    w.pods["a100-0"] = []  # the job ends
    w.settle(passes=20)
    assert w.rollout("a100-0") is None and not w.cordoned("a100-0")
    assert not in_pool(w, "a100-0")


def test_a_deleted_policys_status_shows_the_leave_and_a_failed_node() -> None:
    w = World.pool(4)
    body = spec(HAMI, maxUnavailable=2, drain={"timeoutSeconds": 3})
    w.configure(body)
    with_pods(w)
    w.pdb_refuses["team/job-a100-0"] = "Cannot evict pod: it would violate a disruption budget."
    delete(w, body)
    w.run()
    status = status_now(w)
    reconciling = next(c for c in status.conditions if c.type == "Reconciling")
    assert reconciling.reason == "Deleting"
    assert reconciling.message == (
        "releasing 4 nodes: 2 in transition, 2 waiting, 0 failed (spec.rollout paces nodes "
        "that run GPU pods)"
    )
    for _ in range(8):
        w.run()
    status = status_now(w)
    assert [(p.node, p.reason) for p in status.problem_nodes] == [("a100-0", "DrainTimeout")]
    stalled = next(c for c in status.conditions if c.type == "Stalled")
    assert stalled.status == "True" and "1 failed" in stalled.message
    assert status.matched_nodes == 3, "a100-1 has left; a100-0 failed, the other two wait"


def status_now(w: World) -> VGPUNodePolicyStatus:
    facts = [node_facts(n) for n in w.nodes.values()]
    cluster = plan_cluster(facts, parsed(w.policies))
    name = "pool"
    return compute_status(cluster.policies[name], cluster, {f.name: f for f in facts}, None, w.now)


def test_retain_in_the_middle_of_a_transition_uncordons_and_resumes() -> None:
    w = World.pool(1, operands=True)
    base = {**spec(HAMI, maxUnavailable=1, drain={"mode": "Wait"}), "onDelete": "Retain"}
    w.configure(base)
    w.pods["a100-0"] = pods("a100-0", "train-0")
    mig = {**spec(MIG, maxUnavailable=1, drain={"mode": "Wait"}), "onDelete": "Retain"}
    w.set_policy("pool", mig, generation=2)
    w.run()  # cordoned, waiting for the pod
    w.pods["a100-0"] = []
    w.run()  # paused
    assert w.cordoned("a100-0") and w.labels("a100-0")[GFD] == PAUSED_VALUE
    delete(w, mig, generation=2)
    w.run()
    assert w.annotations("a100-0")[contract.ANN_RETAINED] == "pool"
    assert w.rollout("a100-0") is None and not w.cordoned("a100-0")
    assert w.labels("a100-0")[GFD] == "true" and w.labels("a100-0")[DP] == "hami"
    assert w.config("a100-0").mode == "hami-core"  # type: ignore[union-attr]


def test_an_unreadable_record_holds_a_leaving_node_as_it_is() -> None:
    w = World.pool(1)
    body = spec(HAMI, maxUnavailable=1)
    w.configure(body)
    w.pods["a100-0"] = pods("a100-0", "train-0")
    w.nodes["a100-0"]["metadata"]["annotations"][contract.ANN_ROLLOUT] = "{not json"
    before = w.nodes["a100-0"]["metadata"]["resourceVersion"]
    delete(w, body)
    plan = w.run()
    assert plan.held == {"a100-0": "pool"}
    assert w.nodes["a100-0"]["metadata"]["resourceVersion"] == before, "nothing written"
    assert ("a100-0", "RolloutStateUnreadable") in [(e[0], e[1]) for e in w.events]

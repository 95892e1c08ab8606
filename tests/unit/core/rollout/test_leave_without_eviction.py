"""A deletion that evicts nothing (`vgpu.volcano.sh/evict-gpu-pods: "false"`, what `vgpu-operator
cleanup` sets unless `--evict-gpu-pods`): idle nodes leave through the gate as ever, a node that
runs GPU pods keeps its configuration and its pods (no cordon, no eviction) until they end, a
leave not released yet is withdrawn, and the policy's status says why (core.rollout.decide,
core.rollout.leave, core.nodes.status)."""

from __future__ import annotations

from typing import Any

from tests.kit.nodekit import policy
from tests.kit.rollout_world import HAMI, MIG, World, pods, spec
from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.status import compute_status
from vgpu_operator.core.nodes.validate import parse_policy


def delete(w: World, body: dict[str, Any], *, evict: str | None, generation: int = 1) -> None:
    deleted = policy("pool", body, generation=generation, deleting=True)
    if evict is not None:
        deleted["metadata"]["annotations"] = {contract.ANN_EVICT_GPU_PODS: evict}
    w.policies = [deleted]


def in_pool(w: World, name: str) -> bool:
    return w.labels(name).get(contract.LABEL_POLICY) == "pool"


def test_the_annotation_reads_false_only_when_it_says_so() -> None:
    body = {"metadata": {"name": "p"}, "spec": {"mode": "hami-core", **spec(HAMI)}}
    for value, evict in ((None, True), ("true", True), ("false", False), ("no", True)):
        raw = {**body, "metadata": {"name": "p", "annotations": {}}}
        if value is not None:
            raw["metadata"]["annotations"][contract.ANN_EVICT_GPU_PODS] = value
        parsed = parse_policy(raw)
        assert parsed.policy is not None and parsed.policy.evict_gpu_pods is evict, value


def test_busy_nodes_keep_their_configuration_and_pods_idle_ones_leave() -> None:
    w = World.pool(3)
    body = spec(MIG, maxUnavailable=3)
    w.configure(body)
    w.agents_apply()
    w.pods["a100-0"] = pods("a100-0", "train-0")
    before = (w.labels("a100-0"), w.config("a100-0"), w.nodes["a100-0"]["spec"].get("taints"))
    delete(w, body, evict="false")
    for _ in range(8):
        plan = w.run()
        w.agents_apply()
    assert w.evicted == []
    assert plan.policies["pool"].kept == ("a100-0",)
    assert not in_pool(w, "a100-1") and not in_pool(w, "a100-2")  # idle: left through the gate
    assert (w.labels("a100-0"), w.config("a100-0"), w.nodes["a100-0"]["spec"].get("taints")) == (
        before
    )
    assert not w.cordoned("a100-0") and w.rollout("a100-0") is None
    # the status says why the finalizer waits
    facts = [node_facts(n) for n in w.nodes.values()]
    policies = [parse_policy(p) for p in w.policies]
    cluster = plan_cluster(facts, policies)
    status = compute_status(policies[0], cluster, {f.name: f for f in facts}, None, w.now)
    [reconciling] = [c for c in status.conditions if c.type == "Reconciling"]
    assert contract.ANN_EVICT_GPU_PODS in reconciling.message
    # the pod ends: the node leaves at once
    w.pods["a100-0"] = []
    w.settle(passes=10)
    assert not in_pool(w, "a100-0")


def test_a_leave_under_way_is_withdrawn_uncordoned_and_nothing_more_evicted() -> None:
    w = World.pool(1, operands=True)
    body = spec(HAMI, maxUnavailable=1, drain={"mode": "Wait"})
    w.configure(body)
    w.pods["a100-0"] = pods("a100-0", "train-0")
    delete(w, body, evict=None)  # a plain deletion: drained
    w.run()
    assert w.cordoned("a100-0") and w.rollout("a100-0") is not None
    delete(w, body, evict="false")  # then the uninstall says: evict nothing
    w.run()
    assert not w.cordoned("a100-0") and w.rollout("a100-0") is None
    assert in_pool(w, "a100-0") and w.evicted == []
    assert ("a100-0", "TransitionComplete") in [(n, r) for n, r, _ in w.events]
    w.settle(passes=5)
    assert in_pool(w, "a100-0") and not w.cordoned("a100-0")


def test_with_eviction_allowed_the_deletion_drains_as_ever() -> None:
    w = World.pool(1)
    body = spec(HAMI, maxUnavailable=1)
    w.configure(body)
    w.pods["a100-0"] = pods("a100-0", "train-0")
    delete(w, body, evict="true")
    w.settle(passes=12)
    assert w.evicted == ["team/train-0"]
    assert not in_pool(w, "a100-0")

"""A node whose `nvidia.com/gpu.count` is over what a node may have is refused by the policy
planner (core.nodes.node_hardware `gpu_count_out_of_bounds`): blocked, nothing written to it, the
problem naming the node and the field; the other nodes of the pool are configured in the same
pass."""

from __future__ import annotations

import time

import pytest

from tests.kit import hostile
from tests.kit.nodekit import EVERY_NODE, node, policy, reconcile
from vgpu_operator import bounds, contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.validate import gpu_count_out_of_bounds, node_problems
from vgpu_operator.models.policy import VGPUNodePolicySpec

HOSTILE = [*hostile.GPU_COUNTS, "-5"]
STATIC = {
    "mode": "mig",
    "mig": {"partitioning": "static", "layout": [{"gpus": [0, 1], "profiles": {"1g.10gb": 7}}]},
}


def spec_of(spec: dict[str, object]) -> VGPUNodePolicySpec:
    return VGPUNodePolicySpec.model_validate({"nodeSelector": EVERY_NODE, **spec})


@pytest.mark.parametrize("count", HOSTILE)
@pytest.mark.parametrize("spec", [{"mode": "hami-core"}, STATIC], ids=["hami-core", "static"])
def test_a_node_over_the_bound_is_blocked_and_the_others_are_configured(
    count: str, spec: dict[str, object]
) -> None:
    bad = node("bad", {contract.GFD_COUNT: count})
    good = node("good")
    started = time.perf_counter()
    _, plan = reconcile([bad, good], [policy("p", spec)])
    assert time.perf_counter() - started < 2
    refused = plan.plans["bad"]
    assert refused.action == "blocked" and refused.patch is None
    [problem] = refused.problems
    assert (problem.field, problem.reason, problem.node) == (
        "metadata.labels",
        "GpuCountOutOfBounds",
        "bad",
    )
    assert contract.GFD_COUNT in problem.message and "bad" in problem.message
    assert plan.plans["good"].action == "configure"


def test_a_count_within_the_bound_is_no_problem() -> None:
    for count in ("0", "8", str(bounds.MAX_GPUS_PER_NODE)):
        facts = node_facts(node("n", {contract.GFD_COUNT: count}))
        assert gpu_count_out_of_bounds(facts) is None
    # the index check still reads the count: GPU 1 on a one-GPU node
    facts = node_facts(node("n", {contract.GFD_COUNT: "1"}))
    problems = node_problems(facts, spec_of(STATIC))
    assert [p.reason for p in problems] == ["GpuIndexOutOfRange"]


def test_an_ascend_node_is_not_judged_by_an_nvidia_label() -> None:
    raw = node("npu", {contract.GFD_COUNT: "9" * 63, contract.ASCEND_CHIP_LABEL: "910B"})
    assert node_problems(node_facts(raw), spec_of({"mode": "ascend-vnpu"})) == []

"""Generated policy specs through the models and the pure core: no spec makes either raise, and
what the core plans for the nodes of a small cluster only ever writes valid labels, never to a
node without GPU evidence, never removes a system label (a forged ownership record naming one
included: that entry is dropped with a notice, never acted on).

The count: `PROPERTY_EXAMPLES`, 2,000 by default (about 6 s of CPU); `make test` (the CI run)
sets 10,000 (about 27 s of CPU, measured on two cores).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings

from tests.kit import specgen
from tests.kit.nodekit import node
from vgpu_operator import contract
from vgpu_operator.core.nodes.events import node_events, policy_event
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.ownership import invalid_writes
from vgpu_operator.core.nodes.patch import desired_for
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.status import compute_status
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.models.labels import system_key

EXAMPLES = int(os.environ.get("PROPERTY_EXAMPLES", "2000"))
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def cluster() -> list[dict[str, Any]]:
    """GPU nodes, a CPU-only node, an Ascend node, a node with a forged ownership record and a
    node labelled with everything a generated selector may ask for."""
    everything = {k: "true" for k in specgen.GOOD_KEYS}
    forged = json.dumps({"labels": {"kubernetes.io/hostname": "forged", "pool": "a"}})
    ascend = node("ascend", {contract.ASCEND_CHIP_LABEL: "910B3", "pool": "a"}, gpu="cpu")
    ascend["status"] = {"capacity": {"huawei.com/Ascend910B3": "8"}}
    return [
        node("a100", {"pool": "a"}),
        node("rtx", {"pool": "a"}, gpu="rtx4090"),
        node("cpu", {"pool": "a"}, gpu="cpu"),
        ascend,
        node("forged", {"pool": "a"}, annotations={contract.ANN_OWNED: forged}),
        node("all", {**everything, "pool": "a"}),
    ]


NODES = [node_facts(n) for n in cluster()]
BY_NAME = {f.name: f for f in NODES}


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(raw=specgen.spec(), name=specgen.name)
def test_no_generated_spec_makes_the_models_or_the_core_raise(
    raw: dict[str, Any], name: str
) -> None:
    parsed = parse_policy({"metadata": {"name": name, "generation": 2, "uid": "u"}, "spec": raw})
    assert parsed.policy is not None or parsed.problems  # refused: always with a reason
    if parsed.policy is None and specgen.typeless_gpus(raw):
        assert any(
            p.field.startswith(("spec.mig.layout", "spec.dra.layout")) for p in parsed.problems
        )
    if parsed.policy is not None:
        assert len(name) <= 63
        desired_for(parsed.policy)
    plan = plan_cluster(NODES, [parsed])
    status = compute_status(parsed, plan, BY_NAME, None, NOW)
    assert status.observed_generation == 2
    policy_event(parsed.name, plan.plans.values())
    node_events(plan.plans.values(), limit=5)
    for node_name, p in plan.plans.items():
        if p.patch is None:
            continue
        assert node_name != "cpu", p  # no GPU evidence
        if node_name == "forged":  # the record's system key is disowned, named, never removed
            assert [n.reason for n in p.notices] == ["OwnedEntriesDisowned"], p
        assert p.action not in ("blocked", "conflict", "held")
        assert invalid_writes(node_name, p.patch) == []
        labels = p.patch["metadata"].get("labels") or {}
        assert not any(system_key(k) for k in labels), labels  # never set nor removed

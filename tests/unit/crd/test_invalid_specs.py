"""The invalid-spec catalogue against the generated schema, the models and the operator core.

The real apiserver verdict is the lead's cluster test; here: OpenAPI cases fail the generated
schema at the named field, CEL cases pass the schema and have a rule at the named field, the
models reject every apiserver-caught spec too, and operator cases are reported by the core with
the field and the fix while nothing is written to the node concerned.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.kit.invalid_specs import INVALID_SPECS, InvalidSpec
from tests.kit.openapi_check import cel_rules, generic, validate
from vgpu_devcluster.nodes import NodeSpec, gpu_node_manifest
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.status import compute_status
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.crdgen import policy_crd

SCHEMA = policy_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
SPEC = SCHEMA["properties"]["spec"]
RULES = list(cel_rules(SPEC, "spec"))

APISERVER = [c for c in INVALID_SPECS if c.by_apiserver]
OPENAPI = [c for c in INVALID_SPECS if c.caught_by == "openapi"]
CEL = [c for c in INVALID_SPECS if c.caught_by == "cel"]
OPERATOR = [c for c in INVALID_SPECS if c.caught_by == "operator"]

GPUS = {"matchLabels": {"nvidia.com/gpu.present": "true"}}
VALID_SPECS: list[dict[str, Any]] = [
    {"mode": "hami-core", "nodeSelector": GPUS},
    {
        "mode": "hami-core",
        "nodeSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
        "allowNoExecute": True,
        "nodeTaints": [{"key": "example.com/gpu", "effect": "NoExecute"}],
        "nodeLabels": {"kubernetes.example.com/x": "y", "k8s.iox/y": "z"},
    },
    {
        "mode": "hami-core",
        "priority": -3,
        "nodeSelector": {
            "matchLabels": {"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090"},
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a", "b"]},
                {"key": "vgpu.volcano.sh/exclude", "operator": "DoesNotExist"},
            ],
        },
        "hamiCore": {
            "deviceSplitCount": 10,
            "deviceMemoryScaling": 1.5,
            "deviceCoreScaling": 1,
            "filterDevices": {"uuid": ["GPU-1"], "index": [3]},
        },
        "nodeLabels": {"volcano.sh/vgpu.enabled": "true", "example.com/pool": "a"},
        "nodeTaints": [{"key": "volcano.sh/vgpu", "value": "hami", "effect": "NoSchedule"}],
        "disableNvidiaDevicePlugin": True,
        "rollout": {"maxUnavailable": "25%", "drain": {"timeoutSeconds": 0}},
        "suspend": False,
    },
    {
        "mode": "mig",
        "nodeSelector": GPUS,
        "mig": {"partitioning": "dynamic"},
        "disableNvidiaDevicePlugin": True,
    },
    {
        "mode": "mig",
        "nodeSelector": GPUS,
        "mig": {
            "partitioning": "static",
            "layout": [
                {"gpus": "all", "profiles": {"1g.10gb": 7}},
            ],
        },
    },
    {
        "mode": "mig",
        "nodeSelector": GPUS,
        "mig": {
            "partitioning": "static",
            "layout": [
                {"gpus": [0, 1], "profiles": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb+me": 1}},
                {"gpus": [2], "profiles": {"7g.80gb": 1}},
            ],
        },
    },
    {"mode": "whole-gpu", "nodeSelector": GPUS, "nodeLabels": {"pool": "exclusive"}},
    {
        "mode": "ascend-vnpu",
        "nodeSelector": {"matchLabels": {"accelerator": "huawei-Ascend910"}},
        "ascendVnpu": {"vDeviceCount": 4, "hamiVnpuCore": True},
    },
]


def names_field(found: str, expected: str) -> bool:
    """Equal, or one path is the other plus a deeper `.x` / `[i]` part."""
    longer, shorter = sorted((found, expected), key=len, reverse=True)
    return longer == shorter or (longer.startswith(shorter) and longer[len(shorter)] in ".[")


def test_the_catalogue_has_what_the_issue_asks_for() -> None:
    assert len(INVALID_SPECS) >= 12
    assert len({c.name for c in INVALID_SPECS}) == len(INVALID_SPECS)
    assert len(CEL) >= 3
    assert len(OPERATOR) >= 2
    node_level = [c for c in OPERATOR if c.node is not None]
    reasons = {c.reason for c in node_level}
    assert {"MigNotSupported", "UnknownMigProfile", "TaintCollision"} <= reasons


@pytest.mark.parametrize("spec", VALID_SPECS)
def test_valid_specs_pass_schema_and_models(spec: dict[str, Any]) -> None:
    assert validate(spec, SPEC, "spec") == []
    parsed = parse_policy({"metadata": {"name": "ok"}, "spec": spec})
    assert parsed.usable, parsed.problems


@pytest.mark.parametrize("case", APISERVER, ids=lambda c: c.name)
def test_models_reject_every_apiserver_rejected_spec(case: InvalidSpec) -> None:
    parsed = parse_policy({"metadata": {"name": case.name}, "spec": case.spec})
    assert parsed.policy is None
    fields = [p.field for p in parsed.problems]
    assert any(names_field(f, case.field) for f in fields), (fields, case.field)


@pytest.mark.parametrize("case", OPENAPI, ids=lambda c: c.name)
def test_openapi_cases_fail_the_generated_schema_at_the_field(case: InvalidSpec) -> None:
    errors = validate(case.spec, SPEC, "spec", strict=True)
    assert [path for path, _ in errors] == [case.field], errors
    if case.message:
        assert case.message in errors[0][1]
    if case.strict:
        assert validate(case.spec, SPEC, "spec", strict=False) == []


@pytest.mark.parametrize("case", CEL, ids=lambda c: c.name)
def test_cel_cases_pass_the_schema_and_a_rule_names_the_field(case: InvalidSpec) -> None:
    assert validate(case.spec, SPEC, "spec") == []
    at_field = [r for path, r in RULES if path == generic(case.field)]
    assert any(case.message in r["message"] for r in at_field), (case.field, at_field)


@pytest.mark.parametrize("case", OPERATOR, ids=lambda c: c.name)
def test_operator_cases_pass_the_apiserver_schema(case: InvalidSpec) -> None:
    assert validate(case.spec, SPEC, "spec") == []


@pytest.mark.parametrize("case", [c for c in OPERATOR if c.node is None], ids=lambda c: c.name)
def test_operator_spec_cases_stall_the_policy_naming_the_field(case: InvalidSpec) -> None:
    raw = {"metadata": {"name": case.name, "generation": 2}, "spec": case.spec}
    parsed = parse_policy(raw)
    assert not parsed.usable
    assert [(p.field, p.reason) for p in parsed.problems][:1] == [(case.field, case.reason)]
    cluster = plan_cluster([], [parsed])
    status = compute_status(parsed, cluster, {}, None, datetime(2026, 1, 1, tzinfo=UTC))
    stalled = next(c for c in status.conditions if c.type == "Stalled")
    assert (stalled.status, stalled.reason) == ("True", "InvalidSpec")
    assert case.field in stalled.message and case.message in stalled.message


@pytest.mark.parametrize("case", [c for c in OPERATOR if c.node is not None], ids=lambda c: c.name)
def test_operator_node_cases_block_only_that_node_and_show_on_status(case: InvalidSpec) -> None:
    assert case.node is not None
    raw_node = gpu_node_manifest(NodeSpec(**case.node))
    raw_policy = {"metadata": {"name": case.name, "generation": 1}, "spec": case.spec}
    parsed = parse_policy(raw_policy)
    assert parsed.usable
    facts = node_facts(raw_node)
    cluster = plan_cluster([facts], [parsed])
    plan = cluster.plans[facts.name]
    assert plan.action == "blocked" and plan.patch is None  # nothing half-applied
    problem = plan.problems[0]
    assert (problem.field, problem.reason) == (case.field, case.reason)
    assert case.message in problem.message and problem.fix
    status = compute_status(
        parsed, cluster, {facts.name: facts}, None, datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert [(p.node, p.reason) for p in status.problem_nodes] == [(facts.name, case.reason)]
    assert case.field in status.problem_nodes[0].message
    stalled = next(c for c in status.conditions if c.type == "Stalled")
    assert stalled.status == "True" and case.field in stalled.message

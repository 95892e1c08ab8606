"""`vgpu-operator plan`'s input and output without a cluster: the policy file, the policies
the operator would see, bad input named with its fix, and the text and JSON of a plan (the
command against a cluster: tests/cluster/test_plan.py and test_demo.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kit.nodekit import policy
from tests.kit.plan_world import A100_POOL, LATER, NOTHING_TO_DO, a100_cluster
from vgpu_operator.commands import plan as plan_cli
from vgpu_operator.core.plan import plan

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_policy_documents_of_an_example() -> None:
    text = (EXAMPLES / "demo" / "policies.yaml").read_text()
    docs = plan_cli.policy_documents(text, "policies.yaml")
    assert [d["metadata"]["name"] for d in docs] == [
        "rtx4090-hami-core",
        "a100-dynamic-mig",
        "h100-static-mig",
        "a30-dra",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [", "not YAML"),
        ("", "no document"),
        ("kind: ConfigMap\nmetadata: {name: x}\n", "document 1 is a ConfigMap"),
        ("kind: VGPUNodePolicy\nmetadata: {}\n", "document 1 has no metadata.name"),
    ],
)
def test_bad_files_are_named(text: str, message: str) -> None:
    with pytest.raises(plan_cli.PlanError, match=message):
        plan_cli.policy_documents(text, "f.yaml")


def test_an_invalid_policy_names_the_field() -> None:
    bad = policy("p", {**A100_POOL, "mode": "mig", "mig": {"partitioning": "static"}})
    with pytest.raises(plan_cli.PlanError, match=r"would refuse policy p:\n  spec\.mig"):
        plan_cli.planned_policies([], None, [bad])


def test_unknown_live_policy_says_to_use_a_file() -> None:
    with pytest.raises(plan_cli.PlanError, match=r"no VGPUNodePolicy 'nope'.*plan -f FILE"):
        plan_cli.planned_policies([policy("a", A100_POOL)], "nope", [])


def test_a_file_replaces_the_live_version_with_the_next_generation() -> None:
    live = policy("a", A100_POOL, generation=4)
    changed = policy("a", {**A100_POOL, "mode": "whole-gpu"})
    parsed, names = plan_cli.planned_policies([live, policy("b", A100_POOL)], None, [changed])
    assert names == ["a"]
    by_name = {p.name: p for p in parsed}
    assert set(by_name) == {"a", "b"}
    assert by_name["a"].generation == 5
    assert by_name["a"].policy is not None and by_name["a"].policy.spec.mode == "whole-gpu"


def test_text_and_json_of_a_mode_change() -> None:
    steady, live = a100_cluster()
    changed = json.loads(json.dumps(live))
    changed["spec"]["mode"] = "mig"
    changed["spec"]["mig"] = {"partitioning": "dynamic"}
    policies, names = plan_cli.planned_policies([live], None, [changed])
    p = plan(steady, policies, LATER)
    text = plan_cli.format_text(p, names)
    assert text.startswith("Plan for a100-pool:")
    assert (
        "a100-0: update a100-pool/hami-core -> a100-pool/mig  DISRUPTIVE: mode hami-core -> mig; "
        "1 GPU pod(s) running: team-a/train-0"
    ) in text
    assert "  1. a100-pool: a100-0, a100-1 (now)\n  2. a100-pool: a100-2 (then)\n" in text
    assert "a100-2: held: waits for room in the rollout budget" not in text  # it has a PATCH
    assert "    rollout: held: waits for room in the rollout budget" in text
    assert "ConfigMap kube-system/volcano-vgpu-node-config: change (entries: a100-0" in text
    assert "(the device plugin pod on a100-1) (due " in text
    data = plan_cli.to_json(p, names)
    assert data["changes"] is True
    assert [(w["nodes"], w["now"]) for w in data["rollout"]] == [
        (["a100-0", "a100-1"], True),
        (["a100-2"], False),
    ]
    assert {n["disruptive"] for n in data["nodes"]} == {"mode hami-core -> mig"}
    json.dumps(data)  # serialisable as it is printed


def test_nothing_to_do_says_so() -> None:
    steady, live = a100_cluster()
    policies, names = plan_cli.planned_policies([live], "a100-pool", [])
    p = plan(steady, policies, LATER)
    assert not p.changes
    assert plan_cli.format_text(p, names) == NOTHING_TO_DO  # and the unit of a request


def test_name_or_file_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_cli.main([]) == plan_cli.EXIT_USAGE
    assert "give a live policy's NAME or -f FILE" in capsys.readouterr().err


def test_a_file_without_the_defaults_the_apiserver_added_is_the_same_spec() -> None:
    # the live object has every default the CRD filled in; the file has only what a person wrote
    live = policy("a", {**A100_POOL, "priority": 0, "suspend": False}, generation=3)
    parsed, _ = plan_cli.planned_policies([live], None, [policy("a", A100_POOL)])
    assert [p.generation for p in parsed] == [3]
    parsed, _ = plan_cli.planned_policies([live], None, [policy("a", {**A100_POOL, "priority": 1})])
    assert [p.generation for p in parsed] == [4]

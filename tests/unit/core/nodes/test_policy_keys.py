"""Which node label and taint keys a policy may ask for (`core.nodes.policy_keys`): a key listed
exactly or under a prefix passes, any other refuses the whole policy (held, status Stalled
`PolicyKeyNotListed`, the finding naming the policy, the key and the chart value), the rest of
the cluster proceeds, and a key that left the list is still released once the policy no longer
asks for it."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from tests.kit.nodekit import HAMI, node, policy
from tests.kit.plan_world import LATER, a100_cluster
from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.policy_keys import (
    KEY_NOT_LISTED,
    key_listed,
    refuse_unlisted,
    unlisted_keys,
)
from vgpu_operator.core.nodes.status import compute_status
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.core.plan import plan, proposed
from vgpu_operator.models.node import Owned
from vgpu_operator.models.policy import Taint
from vgpu_operator.models.policy_keys import PolicyKeys

NOW = datetime(2026, 11, 26, tzinfo=UTC)
# the chart's default (charts/vgpu-operator/values.yaml config.policyKeys)
CHART = PolicyKeys(labels=["volcano.sh/", "ascend"], taints=["volcano.sh/", "vgpu.volcano.sh/"])
FOREIGN = {"key": "example.com/gpu-pool", "value": "x", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("key", "listed", "expected"),
    [
        ("ascend", ["ascend"], True),  # an exact entry
        ("volcano.sh/vgpu", ["volcano.sh/"], True),  # under a prefix
        ("volcano.sh/vgpu.enabled", ["ascend", "volcano.sh/"], True),
        ("vgpu.volcano.sh/x", ["volcano.sh/"], False),  # a subdomain is another prefix
        ("team/pool", ["team"], False),  # an exact entry is no prefix
        ("example.com/pool", ["example.com"], False),
        ("example.com/pool", [], False),
        ("ascend", ["ascend/"], False),
    ],
)
def test_a_key_is_listed_exactly_or_under_a_prefix(
    key: str, listed: list[str], expected: bool
) -> None:
    assert key_listed(key, listed) is expected


def test_the_finding_names_the_policy_the_key_the_field_and_the_chart_value() -> None:
    pool = parse_policy(policy("pool-a", {**HAMI, "nodeTaints": [FOREIGN]}))
    assert pool.policy is not None
    [problem] = unlisted_keys(pool.policy, CHART)
    assert problem.reason == KEY_NOT_LISTED
    assert problem.field == "spec.nodeTaints"
    assert problem.message.startswith(
        "policy pool-a asks for the taint key example.com/gpu-pool (spec.nodeTaints), which the "
        "operator config's policyKeys.taints does not list (volcano.sh/, vgpu.volcano.sh/)"
    )
    assert "none of its changes is made" in problem.message
    assert problem.fix.startswith(
        "add example.com/gpu-pool (or its prefix example.com/) to the chart value "
        "config.policyKeys.taints"
    )
    assert "spec.nodeTaints" in problem.fix


def test_every_unlisted_label_and_taint_key_is_named_and_listed_ones_are_not() -> None:
    spec = {
        **HAMI,
        "nodeLabels": {"volcano.sh/vgpu.enabled": "true", "team": "ml", "tier": "a"},
        "nodeTaints": [
            {"key": "volcano.sh/vgpu", "value": "hami", "effect": "NoSchedule"},
            FOREIGN,
            {**FOREIGN, "effect": "PreferNoSchedule"},  # one key, named once
        ],
    }
    pool = parse_policy(policy("pool-a", spec))
    assert pool.policy is not None
    found = unlisted_keys(pool.policy, CHART)
    assert [(p.field, p.message.split(" (")[0]) for p in found] == [
        ("spec.nodeLabels", "policy pool-a asks for the label key team"),
        ("spec.nodeLabels", "policy pool-a asks for the label key tier"),
        ("spec.nodeTaints", "policy pool-a asks for the taint key example.com/gpu-pool"),
    ]
    assert "add team to the chart value config.policyKeys.labels" in found[0].fix


def test_a_modes_default_key_outside_the_list_says_it_is_the_default() -> None:
    ascend = parse_policy(
        policy("npu", {"mode": "ascend-vnpu", "nodeSelector": {"matchLabels": {"pool": "n"}}})
    )
    assert ascend.policy is not None
    assert unlisted_keys(ascend.policy, CHART) == []  # the chart's default lists `ascend`
    [problem] = unlisted_keys(ascend.policy, PolicyKeys(labels=["volcano.sh/"]))
    assert "label key ascend (the mode's default labels (spec.nodeLabels unset))" in (
        problem.message
    )


def test_a_refused_policy_is_held_whole_while_another_policys_node_converges() -> None:
    nodes = [
        node("n-bad", {"pool": "a"}),
        node("n-good", {"pool": "b"}),
    ]
    bad = policy("bad", {**HAMI, "nodeTaints": [FOREIGN]})
    good = policy("good", {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "b"}}})
    parsed_policies = refuse_unlisted([parse_policy(bad), parse_policy(good)], CHART)
    by_name = {p.name: p for p in parsed_policies}
    assert by_name["bad"].suspended and not by_name["good"].refused
    facts = [node_facts(n) for n in nodes]
    cluster = plan_cluster(facts, parsed_policies)
    assert cluster.plans["n-bad"].action == "held" and cluster.plans["n-bad"].patch is None
    assert cluster.plans["n-good"].action == "configure"
    status = compute_status(
        by_name["bad"], cluster, {f.name: f for f in facts}, None, NOW, None, None
    )
    conditions = {c.type: c for c in status.conditions}
    assert (conditions["Stalled"].status, conditions["Stalled"].reason) == (
        "True",
        KEY_NOT_LISTED,
    )
    assert "example.com/gpu-pool" in conditions["Stalled"].message
    assert "config.policyKeys.taints" in conditions["Stalled"].message
    assert conditions["Reconciling"].reason == KEY_NOT_LISTED


def test_nothing_is_refused_without_a_list_nor_a_policy_being_deleted() -> None:
    raw = policy("bad", {**HAMI, "nodeTaints": [FOREIGN]})
    [unlimited] = refuse_unlisted([parse_policy(raw)], None)
    assert not unlimited.refused
    [deleting] = refuse_unlisted([parse_policy(policy("bad", raw["spec"], deleting=True))], CHART)
    assert not deleting.refused


def test_a_key_that_left_the_list_is_released_once_the_policy_no_longer_asks_for_it() -> None:
    """A node configured when example.com/gpu-pool was listed: while the policy still asks for
    it, the policy is held and the node keeps it; once the policy drops it, the release removes
    the taint the ownership record lists (the admission policy allows that removal)."""
    record = Owned(
        labels={"volcano.sh/vgpu.enabled": "true"},
        taints=[Taint(key=FOREIGN["key"], value="x", effect="NoSchedule")],
    )
    configured = node(
        "n1",
        {
            "pool": "a",
            "volcano.sh/vgpu.enabled": "true",
            contract.LABEL_POLICY: "pool-a",
            contract.LABEL_MODE: "hami-core",
        },
        taints=[FOREIGN],
        annotations={contract.ANN_OWNED: record.to_annotation()},
    )
    facts = [node_facts(configured)]
    asking = refuse_unlisted(
        [parse_policy(policy("pool-a", {**HAMI, "nodeTaints": [FOREIGN]}))], CHART
    )
    assert plan_cluster(facts, asking).plans["n1"].action == "held"
    dropped = refuse_unlisted(
        [parse_policy(policy("pool-a", {**HAMI, "nodeTaints": []}, generation=2))], CHART
    )
    plan = plan_cluster(facts, dropped).plans["n1"]
    assert plan.patch is not None
    assert plan.patch["spec"]["taints"] is None  # the recorded taint removed


def test_plan_says_the_policy_is_refused_for_its_key_and_takes_no_node() -> None:
    steady, live = a100_cluster()
    limited = replace(steady, config=steady.config.model_copy(update={"policy_keys": CHART}))
    tainted = json.loads(json.dumps(live))
    tainted["spec"]["nodeTaints"] = [FOREIGN]
    p = plan(limited, [parse_policy(proposed({"a100-pool": live}, tainted))], LATER)
    assert not p.changes and not p.nodes and not p.rollout and not p.restarts
    [note] = [n for n in p.notes if "refused" in n]
    assert note.startswith("policy a100-pool: the change is refused (its nodes are held)")
    assert "the taint key example.com/gpu-pool" in note and "config.policyKeys.taints" in note
    # the same change with the key listed is planned
    listed = CHART.model_copy(update={"taints": [*CHART.taints, "example.com/"]})
    opened = replace(steady, config=steady.config.model_copy(update={"policy_keys": listed}))
    p = plan(opened, [parse_policy(proposed({"a100-pool": live}, tainted))], LATER)
    assert not [n for n in p.notes if "refused" in n] and p.nodes

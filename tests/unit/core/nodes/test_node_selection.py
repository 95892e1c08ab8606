"""Label selectors exactly as Kubernetes defines them, exclusion, priority and conflicts."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.selection import assign, matches_selector, nodes_of, select
from vgpu_operator.models.policy import LabelSelector, VGPUNodePolicy, VGPUNodePolicySpec

LABELS = {"pool": "a", "zone": "z1", "gpu": "a100"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({"matchLabels": {"pool": "a"}}, True),
        ({"matchLabels": {"pool": "b"}}, False),
        ({"matchLabels": {"missing": "a"}}, False),
        ({"matchLabels": {"pool": "a", "zone": "z2"}}, False),  # ANDed
        ({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]}, True),
        ({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]}, False),
        ({"matchExpressions": [{"key": "absent", "operator": "In", "values": ["a"]}]}, False),
        ({"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]}, False),
        ({"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["b"]}]}, True),
        # NotIn holds for a node without the key at all (Kubernetes semantics)
        ({"matchExpressions": [{"key": "absent", "operator": "NotIn", "values": ["a"]}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "absent", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "absent", "operator": "DoesNotExist"}]}, True),
        (
            {
                "matchLabels": {"gpu": "a100"},
                "matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["z1"]},
                    {"key": "pool", "operator": "NotIn", "values": ["b"]},
                ],
            },
            True,
        ),
        (
            {
                "matchLabels": {"gpu": "a100"},
                "matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}],
            },
            False,
        ),
    ],
)
def test_selector_semantics(selector: dict[str, Any], expected: bool) -> None:
    assert matches_selector(LabelSelector.model_validate(selector), LABELS) is expected


@pytest.mark.parametrize("selector", [{}, {"matchLabels": {}, "matchExpressions": []}])
def test_an_empty_selector_is_refused(selector: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="nodeSelector must not be empty"):
        LabelSelector.model_validate(selector)


def pol(
    name: str,
    priority: int = 0,
    deleting: bool = False,
    suspend: bool = False,
    pool: str | None = None,
) -> VGPUNodePolicy:
    every = {"matchExpressions": [{"key": "absent", "operator": "DoesNotExist"}]}
    selector = {"matchLabels": {"pool": pool}} if pool else every
    spec = VGPUNodePolicySpec.model_validate(
        {"mode": "hami-core", "priority": priority, "suspend": suspend, "nodeSelector": selector}
    )
    return VGPUNodePolicy(name=name, deleting=deleting, spec=spec)


def test_excluded_node_is_selected_by_nobody() -> None:
    labels = {**LABELS, contract.LABEL_EXCLUDE: "true"}
    a = assign("n", labels, [pol("p")])
    assert a.owner is None and a.excluded and a.candidates == ()


def test_exclude_label_must_be_exactly_true() -> None:
    labels = {**LABELS, contract.LABEL_EXCLUDE: "false"}
    assert assign("n", labels, [pol("p")]).owner == "p"


def test_deleting_policy_selects_nothing_and_the_next_one_takes_over() -> None:
    policies = [pol("gone", priority=9, deleting=True), pol("next", priority=1)]
    assert assign("n", LABELS, policies).owner == "next"


def test_suspended_policy_still_owns_its_nodes() -> None:
    policies = [pol("frozen", priority=9, suspend=True), pol("other", priority=1)]
    assert assign("n", LABELS, policies).owner == "frozen"


def test_highest_priority_wins() -> None:
    a = assign("n", LABELS, [pol("low", 1), pol("high", 5), pol("mid", 3)])
    assert a.owner == "high" and a.candidates == ("high", "mid", "low")
    assert a.outranked("low") and not a.outranked("high")


def test_equal_top_priority_is_a_conflict_naming_the_others() -> None:
    a = assign("n", LABELS, [pol("b", 5), pol("a", 5), pol("c", 1)])
    assert a.owner is None and a.conflict == ("a", "b")
    assert a.others_in_conflict("a") == ("b",)
    assert "c" in a.candidates and not a.outranked("c")


def test_equal_priority_below_the_top_is_no_conflict() -> None:
    a = assign("n", LABELS, [pol("b", 1), pol("a", 1), pol("top", 2)])
    assert a.owner == "top" and not a.conflicted


def test_select_over_nodes() -> None:
    nodes = [
        node_facts({"metadata": {"name": f"n{i}", "labels": {"pool": "a" if i < 3 else "b"}}})
        for i in range(5)
    ]
    result = select(nodes, [pol("pa", pool="a"), pol("pb", pool="b")])
    assert nodes_of("pa", result) == ["n0", "n1", "n2"]
    assert nodes_of("pb", result) == ["n3", "n4"]


def pol_sel(name: str, selector: dict[str, Any]) -> VGPUNodePolicy:
    spec = VGPUNodePolicySpec.model_validate({"mode": "mig", "nodeSelector": selector})
    return VGPUNodePolicy(name=name, spec=spec)


def test_match_labels_via_alias() -> None:
    p = pol_sel("x", {"matchLabels": {"pool": "a"}})
    assert assign("n", LABELS, [p]).owner == "x"
    assert assign("n", {"pool": "b"}, [p]).owner is None

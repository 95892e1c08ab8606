"""spec.rollout: the budget arithmetic and the rules, as the operator checks them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from vgpu_operator.models.policy import VGPUNodePolicySpec
from vgpu_operator.models.policy_rollout import RolloutSpec, max_unavailable_count

SELECTOR = {"matchLabels": {"pool": "a100"}}


def spec(rollout: dict[str, Any]) -> VGPUNodePolicySpec:
    return VGPUNodePolicySpec.model_validate(
        {"nodeSelector": SELECTOR, "mode": "mig", "rollout": rollout}
    )


@pytest.mark.parametrize(
    ("value", "nodes", "count"),
    [
        (3, 10, 3),
        ("3", 10, 3),
        ("10%", 10, 1),
        ("25%", 10, 3),  # 2.5 rounded up
        ("1%", 10, 1),  # at least 1
        ("100%", 7, 7),
        ("50%", 0, 1),  # an empty pool still has a budget of 1
        (5, 2, 5),  # more than the pool: everything at once
    ],
)
def test_budget(value: int | str, nodes: int, count: int) -> None:
    assert max_unavailable_count(value, nodes) == count
    assert spec({"maxUnavailable": value}).rollout.budget(nodes) == count


def test_defaults_are_conservative() -> None:
    r = RolloutSpec()
    assert r.max_unavailable == 1
    assert r.drain.enabled and r.drain.mode == "Evict" and not r.drain.delete_empty_dir_data
    assert r.drain.timeout_seconds == 600
    assert r.step_timeout_seconds == 600 and r.progress_deadline_seconds == 3600
    assert r.on_failure == "KeepCordoned"


def test_every_field_reads_from_the_crd_names() -> None:
    r = spec(
        {
            "maxUnavailable": "20%",
            "drain": {
                "enabled": False,
                "mode": "Wait",
                "timeoutSeconds": 30,
                "deleteEmptyDirData": True,
            },
            "stepTimeoutSeconds": 40,
            "progressDeadlineSeconds": 90,
            "onFailure": "Uncordon",
        }
    ).rollout
    assert (r.max_unavailable, r.drain.enabled, r.drain.mode) == ("20%", False, "Wait")
    assert (r.drain.timeout_seconds, r.drain.delete_empty_dir_data) == (30, True)
    assert (r.step_timeout_seconds, r.progress_deadline_seconds, r.on_failure) == (
        40,
        90,
        "Uncordon",
    )


@pytest.mark.parametrize(
    ("rollout", "words"),
    [
        ({"maxUnavailable": 0}, "maxUnavailable"),
        ({"maxUnavailable": "0"}, "maxUnavailable must be at least 1"),
        ({"maxUnavailable": "0%"}, "maxUnavailable must be at least 1"),
        ({"maxUnavailable": "lots"}, "maxUnavailable"),
        ({"maxUnavailable": "101%"}, "maxUnavailable"),
        ({"drain": {"mode": "Delete"}}, "drain.mode"),
        ({"drain": {"timeoutSeconds": -1}}, "drain.timeoutSeconds"),
        ({"stepTimeoutSeconds": 0}, "stepTimeoutSeconds"),
        ({"progressDeadlineSeconds": 0}, "progressDeadlineSeconds"),
        ({"onFailure": "Delete"}, "onFailure"),
        ({"maxUnavailable": True}, "maxUnavailable"),
    ],
)
def test_bad_rollouts_are_refused_naming_the_field(rollout: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as err:
        spec(rollout)
    assert words in str(err.value)

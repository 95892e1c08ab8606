"""A policy's `spec.rollout`: how configuration changes reach the pool's nodes, a few at a time
(`maxUnavailable`), each drained (`drain`) and bounded in time (`core.rollout.decide` carries it
out)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from vgpu_operator.models.admission import AdmissionRule, PolicyModel, cel_rules

MAX_UNAVAILABLE_PATTERN = r"^([0-9]+|[0-9]{1,2}%|100%)$"


class DrainSpec(PolicyModel):
    """How a node is emptied before a disruptive change (a mode or MIG layout change)."""

    enabled: bool = Field(
        default=True,
        description="Cordon the node, drain its GPU pods and pause its GPU clients before a "
        "disruptive change. false: none of that, but releases are still limited by "
        "maxUnavailable and verified.",
    )
    mode: Literal["Evict", "Wait"] = Field(
        default="Evict",
        description="Evict: the node's GPU pods are evicted through the Eviction API, which "
        "respects PodDisruptionBudgets. Wait: the node is released only after its GPU pods end.",
    )
    timeout_seconds: Annotated[int, Field(ge=0, le=86400)] = Field(
        default=600,
        alias="timeoutSeconds",
        description="How long the drain may take; then the node fails (onFailure). 0: a node "
        "with GPU pods fails at once.",
    )
    delete_empty_dir_data: bool = Field(
        default=False,
        alias="deleteEmptyDirData",
        description="Evict pods with emptyDir volumes too (their data is lost). false: such a "
        "pod holds the node until the drain times out, as `kubectl drain` refuses it.",
    )


def max_unavailable_count(value: int | str, nodes: int) -> int:
    """`maxUnavailable` as a number of nodes of a pool of `nodes`: a percent rounded up, and
    never less than 1 (a rollout always makes progress)."""
    if isinstance(value, int):
        return max(1, value)
    if value.endswith("%"):
        percent = int(value[:-1])
        return max(1, -(-percent * nodes // 100))
    return max(1, int(value))


class RolloutSpec(PolicyModel):
    """How configuration changes reach the pool's nodes: a few nodes at a time, each one
    cordoned, drained, paused, released, verified and uncordoned."""

    max_unavailable: (
        Annotated[int, Field(ge=1, le=100000)]
        | Annotated[str, Field(pattern=MAX_UNAVAILABLE_PATTERN)]
    ) = Field(
        default=1,
        alias="maxUnavailable",
        description="Nodes in transition at once (from cordon to uncordon; a failed node still "
        "counts): a count, or a percent of the pool's nodes rounded up; at least 1.",
    )
    drain: DrainSpec = Field(default_factory=DrainSpec)
    step_timeout_seconds: Annotated[int, Field(ge=1, le=86400)] = Field(
        default=600,
        alias="stepTimeoutSeconds",
        description="How long each other step (pause, the agent's apply, the plugin's "
        "registration, resume) may take; then the node fails (onFailure).",
    )
    progress_deadline_seconds: Annotated[int, Field(ge=1, le=604800)] = Field(
        default=3600,
        alias="progressDeadlineSeconds",
        description="How long one node's whole transition may take; then it fails. After any "
        "failure the rollout takes no new nodes until the spec changes (a new generation).",
    )
    on_failure: Literal["KeepCordoned", "Uncordon"] = Field(
        default="KeepCordoned",
        alias="onFailure",
        description="What a failed node does: stay cordoned for a person to look at, or be "
        "uncordoned (only if the operator cordoned it) with its GPU clients resumed.",
    )

    RULES = (
        AdmissionRule(
            "type(self.maxUnavailable) == int ? self.maxUnavailable >= 1 : "
            "!self.maxUnavailable.matches('^0+%?$')",
            "maxUnavailable must be at least 1 (or 1%): with 0 no node could ever change",
            lambda r: (
                r.max_unavailable >= 1
                if isinstance(r.max_unavailable, int)
                else not re.fullmatch(r"0+%?", r.max_unavailable)
            ),
            ".maxUnavailable",
        ),
    )
    model_config = ConfigDict(json_schema_extra=cel_rules(RULES))

    def budget(self, nodes: int) -> int:
        return max_unavailable_count(self.max_unavailable, nodes)

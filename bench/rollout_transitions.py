"""The transitions bench/rollout.py measures: the policy each pool starts from, the change
that starts the transition, what the node's GPU pod holds and how its fake GPUs start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout_group import GROUP_LABEL, Group
from vgpu_operator import contract, kubeapi

MAX_UNAVAILABLE = "10%"
LAYOUT_A = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
LAYOUT_B = {"3g.40gb": 1, "1g.10gb": 4}


def static(profiles: dict[str, int]) -> dict[str, Any]:
    layout = [{"gpus": "all", "profiles": profiles}]
    return {"mode": "mig", "mig": {"partitioning": "static", "layout": layout}}


@dataclass(frozen=True)
class Transition:
    key: str
    title: str
    start: dict[str, Any]  # the policy's spec it starts from (without selector and rollout)
    target: dict[str, Any] | None  # merged into the spec; None: the policy is deleted
    mig: bool  # the fake GPUs start with MIG on
    resource: str  # what the node's GPU pod holds (the start pool's resource)


TRANSITIONS = {
    t.key: t
    for t in (
        Transition(
            "hami-mig",
            "hami-core to dynamic mig",
            {"mode": "hami-core"},
            {"mode": "mig", "mig": {"partitioning": "dynamic"}},
            False,
            "volcano.sh/vgpu-number",
        ),
        Transition(
            "layout",
            "static MIG layout change",
            static(LAYOUT_A),
            static(LAYOUT_B),
            True,
            "nvidia.com/mig-1g.10gb",
        ),
        Transition(
            "whole-hami",
            "whole-gpu to hami-core",
            {"mode": "whole-gpu"},
            {"mode": "hami-core"},
            False,
            "nvidia.com/gpu",
        ),
        Transition(
            "leave",
            "leaving a pool (static MIG)",
            static(LAYOUT_A),
            None,
            True,
            "nvidia.com/mig-1g.10gb",
        ),
    )
}


def policy_body(name: str, group: Group, t: Transition) -> dict[str, Any]:
    """The pool's policy at the start: its nodes the group's, 10 % at a time."""
    spec = {
        **t.start,
        "nodeSelector": {"matchLabels": {GROUP_LABEL: group.name}},
        "rollout": {"maxUnavailable": MAX_UNAVAILABLE},
        "onDelete": "Delete",
    }
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


async def change(api: Any, name: str, t: Transition) -> None:
    """What starts the transition: the policy's spec merged with the target, or its deletion."""
    path = kubeapi.policy_path(name)
    if t.target is None:
        await kubeapi.request(api, "DELETE", path)
        return
    body = {"spec": t.target}
    await kubeapi.request(
        api, "PATCH", path, body=body, content_type=kubeapi.MERGE_PATCH, field_manager=None
    )

"""Nodes in a VGPUNodePolicy's pool on the real apiserver: read and relabel them, and wait until
each is configured by a policy (its labels and taint) or clean again."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from tests.cluster.helpers import eventually
from tests.kit.nodekit import labels_of
from vgpu_operator import contract
from vgpu_operator.kubeapi import MERGE_PATCH, node_path, request

VGPU_LABEL = "volcano.sh/vgpu.enabled"
VGPU_TAINT = {"key": "volcano.sh/vgpu", "value": "hami", "effect": "NoSchedule"}
labels = labels_of


async def node(api: client.ApiClient, name: str) -> dict[str, Any]:
    return await request(api, "GET", node_path(name))


def taints(obj: dict[str, Any]) -> list[dict[str, str]]:
    return [
        {k: t[k] for k in ("key", "value", "effect") if k in t}
        for t in (obj.get("spec") or {}).get("taints") or []
    ]


async def relabel(api: client.ApiClient, name: str, changes: dict[str, str | None]) -> None:
    await request(
        api,
        "PATCH",
        node_path(name),
        body={"metadata": {"labels": changes}},
        content_type=MERGE_PATCH,
        field_manager=None,
    )


def hami_policy(pool: str, **extra: Any) -> dict[str, Any]:
    return {"nodeSelector": {"matchLabels": {"test/pool": pool}}, "mode": "hami-core", **extra}


async def wait_nodes(
    api: client.ApiClient, names: list[str], check: Any, timeout: float = 30
) -> None:
    async def all_match() -> bool:
        return all([check(await node(api, n)) for n in names])

    await eventually(all_match, timeout=timeout, interval=0.3)


def configured_by(policy: str) -> Any:
    def check(obj: dict[str, Any]) -> bool:
        lab = labels(obj)
        return (
            lab.get(contract.LABEL_POLICY) == policy
            and lab.get(VGPU_LABEL) == "true"
            and VGPU_TAINT in taints(obj)
        )

    return check


def clean(obj: dict[str, Any]) -> bool:
    lab = labels(obj)
    ann = obj["metadata"].get("annotations") or {}
    return (
        contract.LABEL_POLICY not in lab
        and VGPU_LABEL not in lab
        and VGPU_TAINT not in taints(obj)
        and contract.ANN_OWNED not in ann
    )

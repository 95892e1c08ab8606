"""The agent may change only its own Node (the chart's admission policy): its token bound to a
pod on node A (TokenRequest with a Pod boundObjectRef) carries A's name, as SelfSubjectReview
shows; with it the agent may patch A's state label, and is refused patching node B, a taint on
A, and a label on A that is not the state label."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory
from tests.cluster.rbackit import agent_on
from vgpu_devcluster.install import (
    AGENT_SERVICE_ACCOUNT,
    AGENT_USER,
    OPERATOR_NAMESPACE,
    install_agent_access,
    install_agent_admission,
    remove,
)
from vgpu_operator import contract, kubeapi

pytestmark = pytest.mark.cluster

NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"


@pytest.fixture
async def agent_admission(api: client.ApiClient) -> AsyncIterator[None]:
    """The agent's admission policy, for this test only: the other tests run the agent with
    tokens bound to no pod."""
    docs = await install_agent_admission(api)
    yield
    await remove(api, docs)


def labels_patch(labels: dict[str, str | None]) -> dict[str, Any]:
    return {"metadata": {"labels": labels}}


async def patch_node(
    api: client.ApiClient, node: str, body: dict[str, Any], *, dry_run: bool = False
) -> None:
    await kubeapi.request(
        api,
        "PATCH",
        kubeapi.node_path(node),
        body=body,
        content_type=kubeapi.MERGE_PATCH,
        field_manager="vgpu-operator-agent",
        query={"dryRun": "All"} if dry_run else None,
    )


async def refused(api: client.ApiClient, node: str, body: dict[str, Any]) -> str:
    with pytest.raises(kubeapi.ApiError) as err:
        await patch_node(api, node, body)
    assert err.value.status == 403, err.value
    return str(err.value.body)


async def test_the_agent_changes_only_its_own_nodes_state(
    api: client.ApiClient,
    make_nodes: NodeFactory,
    agent_admission: None,
    tmp_path: Path,
) -> None:
    await install_agent_access(api, tmp_path)
    node_a, node_b = await make_nodes("A100-SXM4-80GB", 2, gpus=1, prefix="own")
    async with agent_on(api, node_a, OPERATOR_NAMESPACE, AGENT_SERVICE_ACCOUNT, tmp_path) as (
        _,
        agent,
    ):
        review = await kubeapi.request(
            agent,
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            field_manager=None,
        )
        user = review["status"]["userInfo"]
        assert user["username"] == AGENT_USER
        assert user["extra"][NODE_NAME_CLAIM] == [node_a]

        # The policy takes effect a moment after it is created: until B is refused (dry
        # runs: admission runs, nothing is stored).
        deadline = asyncio.get_running_loop().time() + 30
        refusal: kubeapi.ApiError | None = None
        while refusal is None:
            try:
                await patch_node(
                    agent, node_b, labels_patch({contract.LABEL_STATE: "success"}), dry_run=True
                )
            except kubeapi.ApiError as exc:
                refusal = exc
            assert asyncio.get_running_loop().time() < deadline, "node B was never refused"
            await asyncio.sleep(0.5)
        assert refusal.status == 403, refusal
        assert node_a in str(refusal.body) and node_b in str(refusal.body)
        await refused(agent, node_b, labels_patch({contract.LABEL_STATE: "success"}))

        await patch_node(agent, node_a, labels_patch({contract.LABEL_STATE: "applying"}))
        await patch_node(
            agent, node_a, {"metadata": {"annotations": {contract.ANN_INVENTORY: "{}"}}}
        )
        message = await refused(agent, node_a, labels_patch({"example.com/foreign": "x"}))
        assert contract.LABEL_STATE in message
        taint = {"key": "example.com/agent", "value": "x", "effect": "NoSchedule"}
        message = await refused(agent, node_a, {"spec": {"taints": [taint]}})
        assert "taints" in message
        await refused(agent, node_a, {"metadata": {"annotations": {contract.ANN_CONFIG: "{}"}}})
    node = await kubeapi.request(api, "GET", kubeapi.node_path(node_a))
    assert node["metadata"]["labels"][contract.LABEL_STATE] == "applying"
    assert "example.com/foreign" not in node["metadata"]["labels"]
    assert not node["spec"].get("taints")
    other = await kubeapi.request(api, "GET", kubeapi.node_path(node_b))
    assert contract.LABEL_STATE not in other["metadata"].get("labels", {})

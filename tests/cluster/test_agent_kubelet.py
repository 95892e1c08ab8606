"""The node agent (a subprocess under the chart's RBAC, the real apiserver) asks the kubelet's
PodResources API, here the double over a unix socket (tests/kit/podresources.py), before it
destroys anything: an idle MIG instance a pod holds stays, the node says `blocked` naming the pod;
once the pod is gone, the retry applies the change."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes_asyncio import client

from tests.cluster.agentkit import (
    Agents,
    agent_kubeconfig_path,
    agents,
    release,
    static,
    wait_applied,
    wait_event,
    wait_state,
)
from tests.kit.podresources import Held, PodResourcesDouble, socket_path

__all__ = ["agent_kubeconfig_path", "agents"]  # fixtures

TWO = static({"3g.40gb": 2})
SEVEN = static({"1g.10gb": 7})


@pytest.fixture
def kubelet() -> Iterator[PodResourcesDouble]:
    double = PodResourcesDouble(socket_path()).start()
    try:
        yield double
    finally:
        double.stop()


async def test_an_idle_instance_held_by_a_pod_blocks_until_the_pod_is_gone(
    api: client.ApiClient, agents: Agents, kubelet: PodResourcesDouble
) -> None:
    node = await agents.node("A100-SXM4-80GB", 1)
    agent = agents.start(node, retry=1.0, pod_resources_socket=kubelet.socket)
    await release(api, node.name, TWO)
    await wait_applied(api, node.name, TWO, agent)
    gis = sorted(node.gpus.load()["gpus"][0]["gis"], key=lambda g: g["id"])
    held = gis[1]["cis"][0]["uuid"]  # no process runs on it: nvidia-smi sees it idle
    kubelet.held = [Held("train-0", "nvidia.com/mig-3g.40gb", [held], namespace="ml")]

    await release(api, node.name, SEVEN)
    await wait_state(api, node.name, "blocked", agent)
    event = await wait_event(api, node.name, "GPUInUse")
    assert "pod ml/train-0" in event["message"] and held in event["message"]
    assert node.gpus.load()["gpus"][0]["gis"] == gis and node.effects("destroyed_gi") == []

    kubelet.held = []  # the pod ends: the next retry applies the layout
    await wait_applied(api, node.name, SEVEN, agent)
    assert len(node.gpus.load()["gpus"][0]["gis"]) == 7

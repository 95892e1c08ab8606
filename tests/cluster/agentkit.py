"""Helpers for the node agent's cluster tests: agents as subprocesses under the chart's RBAC,
configurations released on the node as the controller would, and what the node then says."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory
from vgpu_devcluster.agentproc import (
    AgentProcess,
    FakeGpus,
    fake_model,
    stop_all,
    wait_group_gone,
)
from vgpu_devcluster.install import install_agent_access
from vgpu_operator import contract
from vgpu_operator.kubeapi import MERGE_PATCH, node_path, request
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.node import NodeConfig

MIXED = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def static(profiles: dict[str, int], gpus: Any = "all") -> NodeConfig:
    layout = [{"gpus": gpus, "profiles": profiles}]
    return NodeConfig.model_validate(
        {"mode": "mig", "mig": {"partitioning": "static", "layout": layout}}
    )


@dataclass
class GpuNode:
    name: str
    gpus: FakeGpus

    def layout(self, gpu: int) -> Counter[int]:
        """Profile IDs of the GPU instances on GPU `gpu`, as the fake hardware has them."""
        return Counter(gi["profile_id"] for gi in self.gpus.load()["gpus"][gpu]["gis"])

    def effects(self, kind: str, gpu: int | None = None) -> list[list[int]]:
        """Effects of `kind` (reset, mode, created_gi, destroyed_gi, ...) in the call log."""
        found: list[list[int]] = []
        for entry in self.gpus.log():
            items: Any = (entry.get("effects") or {}).get(kind, [])
            found += [i for i in items if gpu is None or i[0] == gpu]
        return found


@dataclass
class Agents:
    """Start agents for simulated nodes; all are stopped (and checked gone) after the test."""

    directory: Path
    kubeconfig: Path
    make_nodes: NodeFactory
    started: list[AgentProcess] = field(default_factory=list)

    async def node(
        self, model: str, gpus: int, *, mig: bool = False, labels: dict[str, str] | None = None
    ) -> GpuNode:
        """A simulated node (`model` a devcluster.nodes key) and its fake GPUs."""
        [name] = await self.make_nodes(model, 1, gpus=gpus, labels=labels or {})
        fake = FakeGpus.create(self.directory / name, name, fake_model(model), gpus, mig=mig)
        return GpuNode(name, fake)

    def start(self, node: GpuNode, **options: Any) -> AgentProcess:
        n = sum(1 for a in self.started if a.node == node.name)
        log = self.directory / node.name / f"agent-{n}.log"
        agent = AgentProcess(node.name, self.kubeconfig, node.gpus, log, **options)
        self.started.append(agent.start())
        return agent

    def stop(self) -> None:
        stop_all(self.started)
        for agent in self.started:
            assert wait_group_gone(agent.pid), f"agent {agent.node} left processes"


@pytest.fixture(scope="module")
async def agent_kubeconfig_path(
    api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The agent ServiceAccount and RBAC from the chart; a kubeconfig with its token."""
    credentials = await install_agent_access(api, tmp_path_factory.mktemp("agent"))
    assert credentials.kubeconfig is not None
    return Path(credentials.kubeconfig)


@pytest.fixture
async def agents(
    agent_kubeconfig_path: Path, tmp_path: Path, make_nodes: NodeFactory
) -> AsyncIterator[Agents]:
    running = Agents(tmp_path, agent_kubeconfig_path, make_nodes)
    yield running
    running.stop()  # before make_nodes deletes the nodes


# --- the node, as the API server has it ------------------------------------------------------


async def release(api: client.ApiClient, node: str, config: NodeConfig | None) -> None:
    """Write the released configuration on the node, as the controller does."""
    value = config.to_annotation() if config is not None else None
    await request(
        api,
        "PATCH",
        node_path(node),
        body={"metadata": {"annotations": {contract.ANN_CONFIG: value}}},
        content_type=MERGE_PATCH,
        field_manager=None,
    )


async def get_node(api: client.ApiClient, node: str) -> dict[str, Any]:
    return await request(api, "GET", node_path(node))


async def state_of(api: client.ApiClient, node: str) -> str | None:
    labels = (await get_node(api, node))["metadata"].get("labels") or {}
    return labels.get(contract.LABEL_STATE)


async def inventory(api: client.ApiClient, node: str) -> Inventory:
    annotations = (await get_node(api, node))["metadata"].get("annotations") or {}
    inv = Inventory.from_annotation(annotations.get(contract.ANN_INVENTORY))
    assert inv is not None, f"{node} has no inventory"
    return inv


async def wait_state(
    api: client.ApiClient, node: str, want: str, agent: AgentProcess, timeout: float = 120.0
) -> None:
    """Until the node's state label is `want`; fails early, with its log, if the agent died."""
    deadline = time.monotonic() + timeout
    while (now := await state_of(api, node)) != want:
        assert agent.running(), (
            f"agent exited ({agent.proc and agent.proc.returncode}):\n" + (agent.output()[-4000:])
        )
        assert time.monotonic() < deadline, (
            f"{node}: state {now!r}, wanted {want!r}\n{agent.output()[-4000:]}"
        )
        await asyncio.sleep(0.3)


async def agent_events(api: client.ApiClient, node: str) -> list[dict[str, Any]]:
    """Events the agent posted about the node, oldest first."""
    body = await request(
        api,
        "GET",
        "/api/v1/namespaces/default/events",
        query={"fieldSelector": f"involvedObject.kind=Node,involvedObject.name={node}"},
    )
    items = [
        e
        for e in body.get("items", [])
        if (e.get("source") or {}).get("component") == "vgpu-operator-agent"
    ]
    return sorted(items, key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"]))


async def wait_event(
    api: client.ApiClient, node: str, reason: str, timeout: float = 30.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in await agent_events(api, node) if e["reason"] == reason]
        if found:
            return found[-1]
        assert time.monotonic() < deadline, f"no {reason} Event on {node}"
        await asyncio.sleep(0.3)


async def wait_applied(
    api: client.ApiClient,
    node: str,
    config: NodeConfig,
    agent: AgentProcess,
    timeout: float = 120.0,
) -> None:
    """Until the agent reports `config` applied (its inventory's `applied`) with `success`:
    unlike wait_state, this cannot be satisfied by the state of an earlier configuration."""
    deadline = time.monotonic() + timeout
    while True:
        obj = await get_node(api, node)
        labels = obj["metadata"].get("labels") or {}
        raw = (obj["metadata"].get("annotations") or {}).get(contract.ANN_INVENTORY)
        inv = Inventory.from_annotation(raw)
        if labels.get(contract.LABEL_STATE) == "success" and inv and inv.applied == config:
            return
        assert agent.running(), agent.output()[-4000:]
        assert time.monotonic() < deadline, f"{node}: {config} not applied\n{agent.output()}"
        await asyncio.sleep(0.3)

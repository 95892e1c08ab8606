"""The node agent with the real controller: a `mig` policy is released by the controller,
applied by the agent, and counted ready in the policy's status; leaving the pool and going back
to hami-core turn MIG off. And the agent's write discipline, from the audit log."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.agentkit import (
    Agents,
    agent_kubeconfig_path,
    agents,
    get_node,
    inventory,
    release,
    state_of,
    static,
    wait_applied,
    wait_state,
)
from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually, unique
from tests.cluster.poolkit import relabel
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.install import AGENT_USER
from vgpu_operator import contract
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi import MERGE_PATCH, policy_path, request
from vgpu_operator.models.node import NodeConfig

__all__ = ["agent_kubeconfig_path", "agents"]  # fixtures


async def policy_status(api: client.ApiClient, name: str) -> dict[str, Any]:
    return (await request(api, "GET", policy_path(name))).get("status") or {}


async def released_config(api: client.ApiClient, node: str) -> NodeConfig | None:
    annotations = (await get_node(api, node))["metadata"].get("annotations") or {}
    return NodeConfig.from_annotation(annotations.get(contract.ANN_CONFIG))


async def test_controller_releases_agent_applies_policy_ready_then_mig_off(
    api: client.ApiClient,
    operator: OperatorThread,
    policies: PolicyFactory,
    agents: Agents,
) -> None:
    pool = unique("pool")
    leaver = await agents.node("A100-SXM4-80GB", 1, labels={"test/pool": pool})
    stayer = await agents.node("A100-SXM4-80GB", 1, labels={"test/pool": pool})
    pl, ps = agents.start(leaver), agents.start(stayer)

    # no configuration yet: the inventory is reported, there is no state to report
    async def reported() -> bool:
        nodes = [await get_node(api, n.name) for n in (leaver, stayer)]
        return all(contract.ANN_INVENTORY in n["metadata"].get("annotations", {}) for n in nodes)

    await eventually(reported, timeout=60)
    assert await state_of(api, leaver.name) is None

    layout = [{"gpus": "all", "profiles": {"1g.10gb": 7}}]
    spec = {
        "nodeSelector": {"matchLabels": {"test/pool": pool}},
        "mode": "mig",
        "mig": {"partitioning": "static", "layout": layout},
    }
    name = await policies("mig", spec)
    await wait_state(api, leaver.name, "success", pl)
    await wait_state(api, stayer.name, "success", ps)
    assert leaver.layout(0) == stayer.layout(0) == Counter({19: 7})
    assert (await inventory(api, stayer.name)).applied == await released_config(api, stayer.name)

    async def both_ready() -> bool:
        return (await policy_status(api, name)).get("readyNodes") == 2

    await eventually(both_ready, timeout=30)

    # a node leaves the pool: the controller parks it as whole-gpu, the agent turns MIG off
    await relabel(api, leaver.name, {"test/pool": "elsewhere"})

    async def parked() -> bool:
        config = await released_config(api, leaver.name)
        return config is not None and config.mode == "whole-gpu"

    await eventually(parked, timeout=30)
    await wait_applied(api, leaver.name, NodeConfig(mode="whole-gpu"), pl)
    [gpu] = leaver.gpus.load()["gpus"]
    assert (gpu["mig_current"], gpu["mig_pending"], gpu["gis"]) == (False, False, [])

    # the policy goes from mig to hami-core: MIG off on its node too
    await request(
        api,
        "PATCH",
        policy_path(name),
        body={"spec": {"mode": "hami-core", "mig": None}},
        content_type=MERGE_PATCH,
        field_manager=None,
    )

    async def mig_off() -> bool:
        [g] = stayer.gpus.load()["gpus"]
        return not g["mig_current"] and await state_of(api, stayer.name) == "success"

    await eventually(mig_off, timeout=60)
    assert stayer.gpus.load()["gpus"][0]["gis"] == []
    released = await released_config(api, stayer.name)
    assert released is not None and released.mode == "hami-core"
    assert (await inventory(api, stayer.name)).applied == released

    async def one_ready() -> bool:
        return (await policy_status(api, name)).get("readyNodes") == 1

    await eventually(one_ready, timeout=30)


def agent_writes(cluster: ClusterUnderTest, offset: int) -> list[dict[str, Any]]:
    """The agent identity's successful writes since `offset` (the audit log has every write)."""
    local = cluster.require_audit()
    return [
        e
        for e in local.audit_events(user=AGENT_USER, offset=offset)
        if e["responseStatus"]["code"] < 300
    ]


async def test_idle_agent_makes_zero_writes_and_a_reboot_makes_some(
    cluster: ClusterUnderTest, api: client.ApiClient, agents: Agents
) -> None:
    local = cluster.require_audit()
    h100 = await agents.node("H100-80GB-HBM3", 2)
    await release(api, h100.name, static({"1g.10gb": 7}))
    offset = local.audit_offset()
    agent = agents.start(h100, resync=1.0)
    await wait_state(api, h100.name, "success", agent)
    await asyncio.sleep(1.0)
    converge = Counter(
        (e["verb"], e["objectRef"]["resource"]) for e in agent_writes(cluster, offset)
    )
    # to converge: applying, success + inventory, one Event; nothing else
    assert converge == Counter({("patch", "nodes"): 2, ("create", "events"): 1}), converge

    # idle: resyncs every second re-read the GPUs and the node, and write nothing
    offset = local.audit_offset()
    done = agent.output().count("outcome: ")

    async def three_resyncs_done() -> bool:
        return agent.output().count("outcome: ") >= done + 3

    await eventually(three_resyncs_done, timeout=60)
    await asyncio.sleep(0.5)  # the last one's report (a GET)
    assert agent.output().count("acting (resync)") >= 3
    assert agent_writes(cluster, offset) == []

    # positive control, same agent, same measurement: a reboot loses the instances and the
    # next resync re-applies the layout, which shows in the audit log under the agent's name
    fs.reboot(h100.gpus.state)

    async def reapplied() -> bool:
        done = h100.layout(0) == h100.layout(1) == Counter({19: 7})
        return done and await state_of(api, h100.name) == "success"

    await eventually(reapplied, timeout=60)
    await asyncio.sleep(1.0)
    writes = agent_writes(cluster, offset)
    kinds = Counter((e["verb"], e["objectRef"]["resource"]) for e in writes)
    assert kinds == Counter({("patch", "nodes"): 2, ("create", "events"): 1}), kinds
    patches = [e for e in writes if e["verb"] == "patch"]
    assert all(e["objectRef"]["name"] == h100.name for e in patches)
    assert all("fieldManager=vgpu-operator-agent" in e["requestURI"] for e in patches)

"""The agent's API layer and process behaviour on the real apiserver: the own-Node watch (its
events only, ended by the server's timeout), the ServiceAccount's limits, `--once`, and SIGTERM
during an apply (the action finishes, the process exits 0, nothing is left). The watch's 410 Gone
recovery is tested in tests/unit/agent/test_agent_loop.py: a fresh apiserver compacts nothing."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from tests.cluster.agentkit import (
    MIXED,
    Agents,
    agent_kubeconfig_path,
    agents,
    release,
    state_of,
    static,
    wait_applied,
)
from tests.cluster.helpers import NodeFactory, eventually
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.agentproc import wait_group_gone
from vgpu_devcluster.install import AGENT_USER
from vgpu_operator import contract
from vgpu_operator.agent.nodeapi import KubeNodeApi, agent_client
from vgpu_operator.kubeapi import (
    MERGE_PATCH,
    ApiError,
    Listing,
    WatchEvent,
    node_path,
    policy_path,
    request,
)
from vgpu_operator.kubeapi.lite import LiteClient, load
from vgpu_operator.kubeapi.source import Source

__all__ = ["agent_kubeconfig_path", "agents"]  # fixtures


@pytest.fixture
async def agent_api(agent_kubeconfig_path: Path) -> Any:
    """The agent's own client (kubeapi.lite), as `vgpu-operator agent` makes it."""
    settings = load(Source(kubeconfig=str(agent_kubeconfig_path)))
    async with agent_client(settings, "test-watch") as api:
        yield api


async def test_own_node_list_and_watch(
    api: client.ApiClient, agent_api: LiteClient, make_nodes: NodeFactory
) -> None:
    """The agent's identity lists and watches its own Node only (the field selector), through
    the shared list-then-watch."""
    [mine, other] = await make_nodes("A30", 2, gpus=1)
    nodes = KubeNodeApi(agent_api, mine, watch_timeout=2)
    listings: list[Listing] = []
    seen: list[WatchEvent] = []

    async def collect() -> None:
        async for update in nodes.changes():
            (listings if isinstance(update, Listing) else seen).append(update)  # type: ignore[arg-type]

    task = asyncio.create_task(collect())
    try:
        await eventually(lambda: _true(bool(listings)), timeout=15, interval=0.05)
        assert [o["metadata"]["name"] for o in listings[0].items] == [mine]
        for name in (other, mine):  # only its own Node comes through the field selector
            await request(
                api,
                "PATCH",
                node_path(name),
                body={"metadata": {"labels": {"test/marker": "1"}}},
                content_type=MERGE_PATCH,
                field_manager=None,
            )

        def marked() -> list[WatchEvent]:
            return [e for e in seen if (e.obj["metadata"].get("labels") or {}).get("test/marker")]

        await eventually(lambda: _true(bool(marked())), timeout=15, interval=0.05)
        # a few watches of 2 to 4 s each: resumed, never listed again
        await asyncio.sleep(5)
        assert {e.obj["metadata"]["name"] for e in seen} == {mine}
        assert len(listings) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _true(value: bool) -> bool:
    return value


async def test_the_agent_identity_cannot_touch_policies(
    kubeconfig: Path, agent_kubeconfig_path: Path
) -> None:
    # The admin impersonating the agent's ServiceAccount (installed with the chart's RBAC): RBAC
    # judges the agent's identity, and the audit log names the admin, so this deliberate
    # refusal is the probe's, not a call of the agent's (tests/cluster/test_rbac_audit.py).
    async with await config.new_client_from_config(config_file=str(kubeconfig)) as probe:
        probe.set_default_header("Impersonate-User", AGENT_USER)
        with pytest.raises(ApiError) as err:
            await request(probe, "GET", policy_path())
    assert err.value.status == 403


async def test_once_acts_and_exits_with_the_outcome(api: client.ApiClient, agents: Agents) -> None:
    a30 = await agents.node("A30", 1)
    await release(api, a30.name, static({"1g.6gb": 4}))
    ok = agents.start(a30, once=True)
    assert ok.wait(120) == 0, ok.output()
    assert await state_of(api, a30.name) == "success"
    assert a30.layout(0) and sum(a30.layout(0).values()) == 4

    fs.add_process(a30.gpus.state, 0, pid=77, name="job")
    await release(api, a30.name, static({"2g.12gb": 2}))
    blocked = agents.start(a30, once=True)
    assert blocked.wait(120) == 1, blocked.output()
    assert await state_of(api, a30.name) == "blocked"


async def test_sigterm_lets_the_apply_finish_and_exits_clean(
    api: client.ApiClient, agents: Agents
) -> None:
    a100 = await agents.node("A100-SXM4-80GB", 1)
    fs.hang_at(a100.gpus.state, "-cgi", skip=1, seconds=3)
    await release(api, a100.name, static(MIXED))
    agent = agents.start(a100)
    while not any("hang" in e for e in a100.gpus.log()):
        assert agent.running(), agent.output()
        await asyncio.sleep(0.1)
    assert agent.proc is not None
    agent.proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(agent.wait, 60) == 0, agent.output()
    assert wait_group_gone(agent.pid)
    # the action under way was finished and reported before the exit
    labels = (await request(api, "GET", node_path(a100.name)))["metadata"]["labels"]
    assert labels[contract.LABEL_STATE] == "success"
    assert sum(a100.layout(0).values()) == 4


async def test_second_signal_cancels_and_a_restart_finishes(
    api: client.ApiClient, agents: Agents
) -> None:
    a100 = await agents.node("A100-SXM4-80GB", 1)
    fs.hang_at(a100.gpus.state, "-cgi", skip=1, seconds=3600)
    await release(api, a100.name, static(MIXED))
    agent = agents.start(a100)
    while not any("hang" in e for e in a100.gpus.log()):
        assert agent.running(), agent.output()
        await asyncio.sleep(0.1)
    assert agent.proc is not None
    agent.proc.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.5)
    assert agent.running()  # waiting for the action
    agent.proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(agent.wait, 30) == 1
    assert wait_group_gone(agent.pid)  # the hung nvidia-smi was killed with it
    assert await state_of(api, a100.name) == "applying"
    fs.clear_knobs(a100.gpus.state)
    again = agents.start(a100)
    await wait_applied(api, a100.name, static(MIXED), again)

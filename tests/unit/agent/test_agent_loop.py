"""The agent loop against an in-memory API server (memapi) and the fake nvidia-smi run as a
subprocess: triggers, write discipline, the watch's recovery, conflicts, stop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from tests.kit.memapi import MemoryNodeApi
from tests.kit.migkit import DYN, SEVEN, static
from tests.kit.smi_samples import FakeNode
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator import contract
from vgpu_operator.agent.loop import Agent, AgentOptions
from vgpu_operator.models.inventory import Inventory

Make = Callable[..., FakeNode]


async def until(check: Callable[[], bool | Awaitable[bool]], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        assert time.monotonic() < deadline, f"not within {timeout}s: {check}"
        await asyncio.sleep(0.02)


@asynccontextmanager
async def running(agent: Agent) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(agent.run())
    try:
        yield task
    finally:
        agent.stop()
        await asyncio.wait_for(task, 30)


def applied(api: MemoryNodeApi) -> object:
    inv = Inventory.from_annotation(api.annotation(contract.ANN_INVENTORY))
    return inv.applied.to_annotation() if inv and inv.applied else None


def labels_written(api: MemoryNodeApi) -> list[str | None]:
    return [
        p["metadata"]["labels"][contract.LABEL_STATE]
        for p in api.patches
        if contract.LABEL_STATE in (p["metadata"].get("labels") or {})
    ]


async def test_start_change_and_idle(fake_node: Make) -> None:
    node = fake_node("A100-SXM4-80GB", 2)
    api = MemoryNodeApi("n1", {contract.ANN_CONFIG: DYN})
    agent = Agent(api, node.driver, AgentOptions(resync=3600))
    async with running(agent):
        await until(lambda: api.state == "success")
        # start: MIG on (a change) -> applying, then success + inventory, one Event
        assert labels_written(api) == ["applying", "success"]
        assert len(api.patches) == 2 and applied(api) == DYN
        assert [e["reason"] for e in api.events] == ["Applied"]
        assert all(g["mig_current"] for g in node.load()["gpus"])

        # its own writes and heartbeats are no reason to act
        writes, actions = api.writes, agent.actions
        for _ in range(5):
            await api.heartbeat()
        await asyncio.sleep(0.3)
        assert (api.writes, agent.actions) == (writes, actions)

        # a new released configuration: act at once, two PATCHes and one Event
        await api.release(SEVEN)
        await until(lambda: applied(api) == SEVEN)
        assert labels_written(api)[-2:] == ["applying", "success"]
        assert api.writes == writes + 3 and agent.actions == actions + 1
        assert all(len(g["gis"]) == 7 for g in node.load()["gpus"])


async def test_resync_writes_nothing_until_a_reboot_loses_the_instances(fake_node: Make) -> None:
    node = fake_node("H100 80GB HBM3", 1)
    api = MemoryNodeApi("n1", {contract.ANN_CONFIG: SEVEN})
    agent = Agent(api, node.driver, AgentOptions(resync=0.2))
    async with running(agent):
        await until(lambda: api.state == "success")
        writes, actions = api.writes, agent.actions
        await until(lambda: agent.actions >= actions + 3)  # resyncs
        assert api.writes == writes  # zero writes while nothing changes
        fs.reboot(node.state)  # MIG mode stays, instances are gone
        await until(lambda: len(node.load()["gpus"][0]["gis"]) == 7)
        await until(lambda: api.state == "success" and api.writes > writes)
        # re-applied: applying, success and an Event saying what was done
        assert labels_written(api)[-2:] == ["applying", "success"]
        assert api.events[-1]["reason"] == "Applied"


async def test_watch_lists_again_after_410_gone(fake_node: Make) -> None:
    node = fake_node("A30", 1)
    api = MemoryNodeApi("n1")
    agent = Agent(api, node.driver, AgentOptions(resync=3600))
    async with running(agent):
        await until(lambda: api.annotation(contract.ANN_INVENTORY) is not None)
        lists = api.lists
        await api.expire()
        await until(lambda: api.lists > lists)
        await api.release(DYN)  # seen through the new watch
        await until(lambda: api.state == "success")
        assert node.load()["gpus"][0]["mig_current"]


async def test_no_configuration_reports_the_inventory_without_a_state(fake_node: Make) -> None:
    node = fake_node("A30", 2, mig=True)
    api = MemoryNodeApi("n1")
    agent = Agent(api, node.driver, AgentOptions(resync=3600))
    outcome = await agent.act()
    assert outcome is not None and outcome.state == "success"
    inv = Inventory.from_annotation(api.annotation(contract.ANN_INVENTORY))
    assert inv is not None and [g.mig_current for g in inv.gpus] == [True, True]
    assert api.state is None and api.events == [] and len(api.patches) == 1
    assert not [e for e in node.log() if "-mig" in e["argv"]]  # type: ignore[operator]
    await agent.act()
    assert len(api.patches) == 1  # nothing changed: nothing written


async def test_invalid_configuration_fails_with_the_reason(fake_node: Make) -> None:
    node = fake_node("A30", 1)
    api = MemoryNodeApi("n1", {contract.ANN_CONFIG: '{"mode": "warp-drive"}'})
    agent = Agent(api, node.driver)
    outcome = await agent.act()
    assert outcome is not None and outcome.state == "failed"
    assert api.state == "failed"
    assert api.annotation(contract.ANN_INVENTORY) is not None  # the hardware is still reported
    [event] = api.events
    assert (event["type"], event["reason"]) == ("Warning", "InvalidConfiguration")
    assert contract.ANN_CONFIG in event["message"]
    await agent.act()  # the same failure again: no second Event, no write
    assert len(api.events) == 1 and len(api.patches) == 1


async def test_terminal_patch_survives_a_conflict(fake_node: Make) -> None:
    node = fake_node("H100 80GB HBM3", 1)
    api = MemoryNodeApi("n1", {contract.ANN_CONFIG: DYN})
    api.conflicts = 2  # the Node changes twice between GET and PATCH
    agent = Agent(api, node.driver)
    outcome = await agent.act()
    assert outcome is not None and outcome.state == "success"
    assert api.state == "success" and applied(api) == DYN


async def test_a_change_released_during_the_action_is_applied_next(fake_node: Make) -> None:
    node = fake_node("H100 80GB HBM3", 1, timeout=30.0)
    api = MemoryNodeApi("n1", {contract.ANN_CONFIG: SEVEN})
    fs.hang_at(node.state, "-cgi", skip=2, seconds=1.5)
    agent = Agent(api, node.driver, AgentOptions(resync=3600))
    other = static({"profiles": {"3g.40gb": 2}}).to_annotation()
    async with running(agent):
        await until(lambda: any("hang" in e for e in node.log()))
        await api.release(other)
        await until(lambda: applied(api) == other and api.state == "success")
        # the first action's result (for SEVEN) was never reported as success
        assert labels_written(api) == ["applying", "success"]
        assert agent.actions == 2
    gis = node.load()["gpus"][0]["gis"]
    assert sorted(g["size"] for g in gis) == [4, 4]


async def test_stop_returns_promptly_and_the_node_can_be_missing(fake_node: Make) -> None:
    node = fake_node("A30", 1)
    api = MemoryNodeApi("n1")
    api.obj = None  # the Node does not exist (yet)
    agent = Agent(api, node.driver)
    task = asyncio.create_task(agent.run())
    await until(lambda: api.watches >= 1)
    assert agent.actions == 0
    t0 = time.monotonic()
    agent.stop()
    await asyncio.wait_for(task, 10)
    assert time.monotonic() - t0 < 2
    assert await agent.act() is None


async def test_a_node_deleted_and_created_again_is_acted_on_afresh(fake_node: Make) -> None:
    node = fake_node("A30", 1)
    api = MemoryNodeApi("n1", {contract.ANN_CONFIG: DYN})
    agent = Agent(api, node.driver, AgentOptions(resync=3600))
    async with running(agent):
        await until(lambda: api.state == "success")
        saved = api.obj
        api.obj = None
        await api._bump("DELETED")
        await until(lambda: agent.latest is None)
        assert saved is not None
        saved["metadata"]["labels"] = {}  # a new Node: no state, no inventory, same config
        saved["metadata"]["annotations"] = {contract.ANN_CONFIG: DYN}
        api.obj = saved
        await api._bump("ADDED")
        await until(lambda: api.state == "success" and agent.actions == 2)
        assert api.annotation(contract.ANN_INVENTORY) is not None

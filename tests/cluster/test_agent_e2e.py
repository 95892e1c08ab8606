"""The node agent end to end: `vgpu-operator agent` as a subprocess under the chart's RBAC, the
fake nvidia-smi as its GPUs, the real apiserver. The released configuration is written on the
node as the controller would (test_agent_controller.py goes through the real controller); what
the hardware did is read from the fake's state and call log."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections import Counter

from kubernetes_asyncio import client

from tests.cluster.agentkit import (
    MIXED,
    Agents,
    agent_events,
    agent_kubeconfig_path,
    agents,
    inventory,
    release,
    state_of,
    static,
    wait_applied,
    wait_event,
    wait_state,
)
from tests.kit.migkit import dynamic
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.agentproc import wait_group_gone
from vgpu_operator.models.node import NodeConfig

__all__ = ["agent_kubeconfig_path", "agents"]  # fixtures

# profile IDs as `nvidia-smi mig -lgip` prints them (NVIDIA/mig-parted#97 for A100-80GB; an H100's
# in https://jbarrow.ai/field_notes/nvidia-mig/): A100-80GB 3g.40gb=9, 2g.20gb=14, 1g.10gb=19;
# H100 1g.10gb=19
A100_MIXED = Counter({9: 1, 14: 1, 19: 2})


async def test_static_layouts_on_a100_80gb_and_h100(api: client.ApiClient, agents: Agents) -> None:
    a100 = await agents.node("A100-SXM4-80GB", 2)
    h100 = await agents.node("H100-80GB-HBM3", 2)
    want_a, want_h = static(MIXED), static({"1g.10gb": 7})
    await release(api, a100.name, want_a)
    await release(api, h100.name, want_h)
    pa, ph = agents.start(a100), agents.start(h100)
    await wait_state(api, a100.name, "success", pa)
    await wait_state(api, h100.name, "success", ph)

    assert a100.layout(0) == a100.layout(1) == A100_MIXED
    assert h100.layout(0) == h100.layout(1) == Counter({19: 7})
    # Ampere: the mode stays pending until a reset of that GPU, one each; Hopper: none
    assert sorted(r[0] for r in a100.effects("reset")) == [0, 1]
    assert h100.effects("reset") == []
    # the inventory says what the hardware has and what was applied
    inv = await inventory(api, a100.name)
    assert inv.applied == want_a
    assert [g.mig_current for g in inv.gpus] == [True, True]
    names = Counter(gi.name for gi in inv.gpus[0].instances)
    assert names == Counter({"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})
    assert (await inventory(api, h100.name)).applied == want_h
    event = await wait_event(api, h100.name, "Applied")
    assert event["type"] == "Normal" and "verified" in event["message"]


async def test_dynamic_mode_on_h200_leaves_the_instances_to_the_device_plugin(
    api: client.ApiClient, agents: Agents
) -> None:
    h200 = await agents.node("H200", 2)
    await release(api, h200.name, static({"1g.18gb": 7}))
    agent = agents.start(h200, resync=1.0)
    await wait_state(api, h200.name, "success", agent)
    assert h200.layout(0) == Counter({19: 7})

    # switching INTO dynamic mode removes the static layout's instances, MIG stays on
    modes = len(h200.effects("mode"))
    await release(api, h200.name, dynamic())
    await wait_applied(api, h200.name, dynamic(), agent)
    state = h200.gpus.load()
    assert all(g["mig_current"] and g["gis"] == [] for g in state["gpus"])
    assert len(h200.effects("destroyed_gi")) == 14
    assert len(h200.effects("mode")) == modes  # MIG was on already: no mode change
    assert h200.effects("reset") == []  # Hopper: not even for the first switch

    # the device plugin creates an instance at allocation time; resyncs leave it alone
    env = {**os.environ, fs.ENV_STATE: str(h200.gpus.state)}
    made = subprocess.run(
        [str(h200.gpus.binary), "mig", "-i", "0", "-cgi", "14", "-C"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Successfully created GPU instance" in made.stdout
    destroyed = len(h200.effects("destroyed_gi"))
    before = agent.output().count("acting (resync)")
    while agent.output().count("acting (resync)") < before + 3:
        assert agent.running(), agent.output()
        await asyncio.sleep(0.3)
    assert h200.layout(0) == Counter({14: 1})
    assert len(h200.effects("destroyed_gi")) == destroyed
    assert await state_of(api, h200.name) == "success"


async def test_in_use_gpu_is_blocked_and_nothing_on_it_is_destroyed(
    api: client.ApiClient, agents: Agents
) -> None:
    a100 = await agents.node("A100-SXM4-80GB", 2)
    await release(api, a100.name, static(MIXED))
    agent = agents.start(a100, retry=1.0)
    await wait_state(api, a100.name, "success", agent)
    fs.add_process(a100.gpus.state, 0, pid=4242, name="train.py")

    await release(api, a100.name, static({"1g.10gb": 7}))
    await wait_state(api, a100.name, "blocked", agent)
    assert a100.layout(0) == A100_MIXED  # untouched
    assert a100.effects("destroyed_gi", gpu=0) == a100.effects("destroyed_ci", gpu=0) == []
    assert a100.layout(1) == Counter({19: 7})  # the free GPU was changed
    event = await wait_event(api, a100.name, "GPUInUse")
    assert event["type"] == "Warning"
    assert "train.py (pid 4242)" in event["message"] and "GPU 0" in event["message"]
    # retried every second, reported once
    await asyncio.sleep(3)
    assert len([e for e in await agent_events(api, a100.name) if e["reason"] == "GPUInUse"]) == 1

    # the job ends: the next retry finishes the change
    fs.clear_processes(a100.gpus.state)
    await wait_state(api, a100.name, "success", agent)
    assert a100.layout(0) == Counter({19: 7})


async def test_reset_unsupported_fails_with_the_reason_until_a_reboot(
    api: client.ApiClient, agents: Agents
) -> None:
    a100 = await agents.node("A100-SXM4-80GB", 1)
    with fs.edit(a100.gpus.state) as s:
        s["gpus"][0]["reset_supported"] = False  # GPU passthrough
    await release(api, a100.name, dynamic())
    agent = agents.start(a100, retry=1.0)
    await wait_state(api, a100.name, "failed", agent)
    event = await wait_event(api, a100.name, "RebootRequired")
    assert event["type"] == "Warning" and "reboot the node" in event["message"]
    [gpu] = (await inventory(api, a100.name)).gpus
    assert (gpu.mig_current, gpu.mig_pending) == (False, True)  # pending until a reboot

    fs.reboot(a100.gpus.state)  # the pending mode takes effect
    await wait_state(api, a100.name, "success", agent)
    [gpu] = (await inventory(api, a100.name)).gpus
    assert gpu.mig_current is True


async def test_agent_killed_mid_apply_converges_after_restart(
    api: client.ApiClient, agents: Agents
) -> None:
    a100 = await agents.node("A100-SXM4-80GB", 2)
    fs.hang_at(a100.gpus.state, "-cgi", skip=5)  # GPU 0 done, GPU 1 half way
    await release(api, a100.name, static(MIXED))
    first = agents.start(a100)
    while not any("hang" in e for e in a100.gpus.log()):
        assert first.running(), first.output()
        await asyncio.sleep(0.2)
    assert await state_of(api, a100.name) == "applying"
    first.kill()  # SIGKILL: the agent and the nvidia-smi it waits for
    assert wait_group_gone(first.pid)
    assert a100.layout(1) != A100_MIXED  # really interrupted half way
    assert len(a100.effects("created_gi")) == 5  # 4 on GPU 0, 1 on GPU 1; the 6th hung

    fs.clear_knobs(a100.gpus.state)
    second = agents.start(a100)
    await wait_state(api, a100.name, "success", second)
    assert a100.layout(0) == a100.layout(1) == A100_MIXED
    assert a100.effects("destroyed_gi") == []  # what was made before the kill is kept
    assert len(a100.effects("created_gi")) == 8  # the restart created only the 3 missing ones
    assert (await inventory(api, a100.name)).applied == static(MIXED)


async def test_rtx4090_in_mig_mode_is_a_clear_failure_not_a_crash(
    api: client.ApiClient, agents: Agents
) -> None:
    rtx = await agents.node("RTX-4090", 2)
    await release(api, rtx.name, dynamic())
    agent = agents.start(rtx)
    await wait_state(api, rtx.name, "failed", agent)
    event = await wait_event(api, rtx.name, "NotMIGCapable")
    assert "GPU 0 (NVIDIA GeForce RTX 4090) is not MIG-capable" in event["message"]
    inv = await inventory(api, rtx.name)
    assert [g.mig_capable for g in inv.gpus] == [False, False]
    assert not [e for e in rtx.gpus.log() if "-mig" in e["argv"]]  # type: ignore[operator]

    # still running, and a fixed configuration is applied
    await release(api, rtx.name, NodeConfig(mode="hami-core"))
    await wait_applied(api, rtx.name, NodeConfig(mode="hami-core"), agent)
    assert agent.running()

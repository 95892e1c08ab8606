"""The node agent end to end (a subprocess under the chart's RBAC, the real apiserver) on simulated
GPUs that behave as real ones do where a naive agent would go wrong: Hopper's 1g.20gb
compute instances (profile 7), a driver that hides MIG profiles while MIG is off, a call stuck in
the driver, processes of other PID namespaces, and the GPU Operator's mig-manager on the node."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.agentkit import (
    MIXED,
    Agents,
    agent_events,
    agent_kubeconfig_path,
    agents,
    get_node,
    inventory,
    release,
    state_of,
    static,
    wait_event,
    wait_state,
)
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.install import render_chart
from vgpu_operator.kubeapi import MERGE_PATCH, node_path, request
from vgpu_operator.models.node import GPU_OPERATOR_MIG_CONFIG_LABEL, GPU_OPERATOR_MIG_MANAGER_LABEL

__all__ = ["agent_kubeconfig_path", "agents"]  # fixtures

MUTATING = {"-mig", "-r", "-cgi", "-cci", "-dci", "-dgi"}
FOUR_1G20 = {"1g.20gb": 4}


def mutating(log: list[dict[str, Any]]) -> list[list[str]]:
    return [e["argv"] for e in log if MUTATING & set(e["argv"])]


async def resyncs(agent: Any, count: int, timeout: float = 60.0) -> None:
    """Until the agent has acted `count` more times on its own (resync or retry)."""
    seen = agent.output().count("acting (resync)")
    deadline = time.monotonic() + timeout
    while agent.output().count("acting (resync)") < seen + count:
        assert agent.running() and time.monotonic() < deadline, agent.output()[-3000:]
        await asyncio.sleep(0.3)


async def label(api: client.ApiClient, node: str, labels: dict[str, str | None]) -> None:
    body = {"metadata": {"labels": labels}}
    await request(
        api, "PATCH", node_path(node), body=body, content_type=MERGE_PATCH, field_manager=None
    )


async def test_h100_four_1g20gb_reaches_success_and_resyncs_change_nothing(
    api: client.ApiClient, agents: Agents
) -> None:
    h100 = await agents.node("H100-80GB-HBM3", 2)
    await release(api, h100.name, static(FOUR_1G20))
    agent = agents.start(h100, resync=1.0)
    await wait_state(api, h100.name, "success", agent)
    assert h100.layout(0) == h100.layout(1) == Counter({15: 4})
    # the compute instances `-C` made are profile 7 (real H100 output: tests/data/nvidia-smi/
    # transcripts/h100_cgi15_C.txt) and were verified as such
    cis = [c["profile_id"] for g in h100.gpus.load()["gpus"] for gi in g["gis"] for c in gi["cis"]]
    assert cis == [7] * 8
    before = len(h100.gpus.log())
    await resyncs(agent, 2)
    assert mutating(h100.gpus.log()[before:]) == []  # no instance destroyed and made again
    assert await state_of(api, h100.name) == "success"


async def test_a100_80gb_pcie_on_a_driver_that_hides_profiles_gets_mig_then_instances(
    api: client.ApiClient, agents: Agents
) -> None:
    a100 = await agents.node("A100-80GB-PCIe", 1)
    # driver 535: `mig -lgip` lists nothing while MIG is off (mig-parted discovery.go)
    fs.init_state(a100.gpus.state, "A100 80GB PCIe", 1, node=a100.name, driver_version="535.161.08")
    await release(api, a100.name, static(MIXED))
    agent = agents.start(a100)
    await wait_state(api, a100.name, "success", agent)
    assert a100.layout(0) == Counter({9: 1, 14: 1, 19: 2})
    calls = [e for e in a100.gpus.log() if {"-lgip", "-mig", "-cgi"} & set(e["argv"])]
    first_mig = next(i for i, e in enumerate(calls) if "-mig" in e["argv"])
    first_cgi = next(i for i, e in enumerate(calls) if "-cgi" in e["argv"])
    lgip = [(i, e["rc"]) for i, e in enumerate(calls) if "-lgip" in e["argv"]]
    assert all(rc == 6 for i, rc in lgip if i < first_mig)  # hidden while MIG was off
    assert any(rc == 0 and first_mig < i < first_cgi for i, rc in lgip)  # read again, then used
    [gpu] = (await inventory(api, a100.name)).gpus
    assert (gpu.name, gpu.mig_current, gpu.profiles_source) == (
        "NVIDIA A100 80GB PCIe",
        True,
        "driver",
    )


async def test_a_call_that_cannot_be_ended_ends_in_a_final_state_within_the_bound(
    api: client.ApiClient, agents: Agents
) -> None:
    h100 = await agents.node("H100-80GB-HBM3", 1, mig=True)
    # the first `-cgi` hangs and its child keeps the output pipe open from a session of its own
    fs.hang_at(h100.gpus.state, "-cgi", seconds=120, mode="detached")
    await release(api, h100.name, static({"3g.40gb": 2}))
    agent = agents.start(h100, timeout=2.0, retry=1.0)
    started = time.monotonic()
    await wait_state(api, h100.name, "failed", agent, timeout=30)
    # the call's timeout (2 s) and the kill's bound (agent.smi.KILL_GRACE, 5 s), not the hang
    assert time.monotonic() - started < 20
    event = await wait_event(api, h100.name, "GPUUnhealthy")
    assert event["type"] == "Warning" and "stuck in the driver" in event["message"]
    [gpu] = (await inventory(api, h100.name)).gpus
    assert gpu.unhealthy is not None and "stuck in the driver" in gpu.unhealthy
    assert agent.running()
    # what a reboot would do: the stuck call goes away; the next retry finishes the job
    fs.kill_strays(h100.gpus.state)
    await wait_state(api, h100.name, "success", agent, timeout=60)
    assert h100.layout(0) == Counter({9: 2})


async def test_a_process_only_the_host_pid_namespace_sees_blocks_with_the_charts_settings(
    api: client.ApiClient, agents: Agents
) -> None:
    [ds] = render_chart("agent-daemonset.yaml")
    chart_host_pid = bool(ds["spec"]["template"]["spec"]["hostPID"])
    assert chart_host_pid is True
    nodes = [await agents.node("H100-80GB-HBM3", 1, mig=True) for _ in range(2)]
    for n in nodes:
        await release(api, n.name, static({"3g.40gb": 2}))
    charted = agents.start(nodes[0], host_pid=chart_host_pid, retry=1.0)
    without = agents.start(nodes[1], host_pid=False, retry=1.0)
    for n, a in zip(nodes, (charted, without), strict=True):
        await wait_state(api, n.name, "success", a)
    # a pod's training process, in the pod's own PID namespace, on GPU 0 of each node
    for i, n in enumerate(nodes):
        fs.add_process(n.gpus.state, 0, 50983 + i, "python train.py", namespace=f"pod-{i}")
    before = [len(n.gpus.log()) for n in nodes]
    for n in nodes:
        await release(api, n.name, static(FOUR_1G20))
    await wait_state(api, nodes[0].name, "blocked", charted)
    event = await wait_event(api, nodes[0].name, "GPUInUse")
    assert "python train.py (pid 50983)" in event["message"]
    assert mutating(nodes[0].gpus.log()[before[0] :]) == []  # nothing touched
    # without the host PID namespace the agent does not see it and goes at the instances under
    # the process (the simulated driver refuses the destroy: "In use by another client")
    await wait_state(api, nodes[1].name, "failed", without)
    tried = mutating(nodes[1].gpus.log()[before[1] :])
    assert tried and tried[0][-1] == "-dci"
    said = " ".join(e["message"] for e in await agent_events(api, nodes[1].name))
    assert "python train.py" not in said and "50984" not in said  # it never knew


async def test_the_gpu_operators_mig_manager_gets_the_node_and_the_agent_says_why(
    api: client.ApiClient, agents: Agents
) -> None:
    labels = {GPU_OPERATOR_MIG_CONFIG_LABEL: "all-balanced", GPU_OPERATOR_MIG_MANAGER_LABEL: "true"}
    h100 = await agents.node("H100-80GB-HBM3", 1, labels=labels)
    await release(api, h100.name, static(FOUR_1G20))
    agent = agents.start(h100, retry=1.0)
    await wait_state(api, h100.name, "blocked", agent)
    event = await wait_event(api, h100.name, "AnotherMIGManager")
    assert "nvidia.com/mig.config=all-balanced" in event["message"]
    assert "disableNvidiaMigManager: true" in event["message"]
    assert mutating(h100.gpus.log()) == []
    assert (await inventory(api, h100.name)).gpus  # the hardware is still reported
    # the policy's switch (what disableNvidiaMigManager writes): the layout is applied
    await label(api, h100.name, {GPU_OPERATOR_MIG_MANAGER_LABEL: "false"})
    await wait_state(api, h100.name, "success", agent)
    assert h100.layout(0) == Counter({15: 4})
    node = await get_node(api, h100.name)
    assert node["metadata"]["labels"][GPU_OPERATOR_MIG_CONFIG_LABEL] == "all-balanced"

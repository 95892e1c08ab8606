"""Safe transitions with the real node agent (its GPUs the simulated nvidia-smi): a release the
agent cannot apply ends the node's transition as `onFailure` says, with the reason on the node
(its Events, `kubectl describe node`) and in the policy's status."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.agentkit import Agents, agent_kubeconfig_path, agents, get_node, wait_state
from tests.cluster.helpers import PolicyFactory, eventually, patch_spec, unique
from tests.cluster.rolloutkit import config_of, cordoned, pool_spec, rollout_of
from vgpu_devcluster import binaries
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator import contract
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi import policy_path, request

__all__ = ["agent_kubeconfig_path", "agents"]  # fixtures


async def operator_events(api: client.ApiClient, node: str) -> list[dict[str, Any]]:
    """The operator's Events about a node (what `kubectl describe node` lists)."""
    body = await request(
        api,
        "GET",
        "/api/v1/namespaces/default/events",
        query={"fieldSelector": f"involvedObject.kind=Node,involvedObject.name={node}"},
    )
    return [
        e
        for e in body.get("items", [])
        if (e.get("source") or {}).get("component") == "vgpu-operator"
    ]


async def describe(kubeconfig: Path, kind: str, name: str) -> str:
    """`kubectl describe KIND NAME`, the real binary."""
    kubectl = binaries.ensure("kubectl")
    proc = await asyncio.create_subprocess_exec(
        str(kubectl),
        f"--kubeconfig={kubeconfig}",
        "describe",
        kind,
        name,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_an_agent_failure_follows_on_failure_with_the_reason_everywhere(
    api: client.ApiClient,
    kubeconfig: Path,
    operator: OperatorThread,
    policies: PolicyFactory,
    agents: Agents,
) -> None:
    pool = unique("pool")
    one = await agents.node("A100-SXM4-80GB", 1, labels={"test/pool": pool})
    two = await agents.node("A100-SXM4-80GB", 1, labels={"test/pool": pool})
    failing, waiting = sorted([one, two], key=lambda n: n.name)  # the rollout takes by name
    process = agents.start(failing)
    agents.start(waiting)
    rollout = {"maxUnavailable": 1, "onFailure": "Uncordon", "stepTimeoutSeconds": 60}
    name = await policies("fail", pool_spec(pool, **rollout))
    await wait_state(api, failing.name, "success", process)

    # MIG mode cannot be turned on on the failing node's GPU
    fs.inject(failing.gpus.state, "-mig 1", "not_mig_capable", times=-1)
    await patch_spec(api, name, {"mode": "mig", "hamiCore": None, "mig": {}})

    async def failed() -> bool:
        r = rollout_of(await get_node(api, failing.name))
        return r is not None and r.phase == "Failed"

    try:
        await eventually(failed, timeout=90)
    except AssertionError:
        obj = await get_node(api, failing.name)
        meta = obj["metadata"]
        raise AssertionError(
            f"{meta.get('labels')}\n{meta.get('annotations')}\n{process.output()[-3000:]}"
        ) from None
    obj = await get_node(api, failing.name)
    r = rollout_of(obj)
    assert r is not None and r.reason == "AgentFailed", r
    assert not cordoned(obj), "onFailure Uncordon"
    labels = obj["metadata"].get("labels") or {}
    assert labels.get(contract.LABEL_DEVICE_PLUGIN) == "hami", "the plugin is not left paused"
    assert config_of(obj).mode == "mig"  # type: ignore[union-attr]  # released, then failed

    async def described() -> bool:
        events = await operator_events(api, failing.name)
        return any(e["reason"] == "AgentFailed" and "onFailure" in e["message"] for e in events)

    await eventually(described, timeout=20)
    # what a person runs: kubectl finds the Event by the Node's uid (or its name, as kubelet's)
    text = await describe(kubeconfig, "node", failing.name)
    [line] = [ln for ln in text.splitlines() if "AgentFailed" in ln]
    assert line.split()[0] == "Warning" and "onFailure Uncordon: uncordoned" in line, text

    async def in_status() -> bool:
        status = (await request(api, "GET", policy_path(name))).get("status") or {}
        problems = status.get("problemNodes") or []
        stalled = [c for c in status.get("conditions") or [] if c["type"] == "Stalled"]
        return (
            any(p["node"] == failing.name and p["reason"] == "AgentFailed" for p in problems)
            and bool(stalled)
            and stalled[0]["status"] == "True"
        )

    await eventually(in_status, timeout=20)
    policy_text = await describe(kubeconfig, "vnp", name)
    status = policy_text.split("\nStatus:", 1)[1].split("\nEvents:", 1)[0]  # not its Events
    assert "AgentFailed" in status and failing.name in status, policy_text
    # the failed node still counts: the other node is not taken (maxUnavailable 1)
    other = await get_node(api, waiting.name)
    assert rollout_of(other) is None and config_of(other).mode == "hami-core"  # type: ignore[union-attr]

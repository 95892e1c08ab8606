"""The operator and the node agent across a kube-apiserver restart (same port, certificates,
tokens and etcd): they reconnect by themselves, converge the changes made afterwards, and
re-reading the cluster makes them write nothing a node already carries (the audit log counts one
PATCH per node per change)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.agentkit import (
    Agents,
    agent_kubeconfig_path,
    agents,
    release,
    static,
    wait_applied,
)
from tests.cluster.helpers import (
    ClusterUnderTest,
    NodeFactory,
    PolicyFactory,
    eventually,
    patch_spec,
    unique,
)
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import AGENT_USER, OPERATOR_USER
from vgpu_operator import contract
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi import node_path, request

__all__ = ["agent_kubeconfig_path", "agents"]  # fixtures

VGPU_LABEL = "volcano.sh/vgpu.enabled"
TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"

Check = Callable[[dict[str, str]], bool]


def carries(policy: str, **extra: str) -> Check:
    wanted = {contract.LABEL_POLICY: policy, VGPU_LABEL: "true", **extra}
    return lambda labels: all(labels.get(k) == v for k, v in wanted.items())


async def wait_nodes(api: client.ApiClient, names: list[str], check: Check) -> None:
    async def all_match() -> bool:
        nodes = [await request(api, "GET", node_path(n)) for n in names]
        return all(check(n["metadata"].get("labels") or {}) for n in nodes)

    await eventually(all_match, timeout=30, interval=0.3)


async def restart(local: LocalCluster, api: client.ApiClient) -> None:
    """Restart the apiserver and return once the controller manager's shared Node informer
    watches again: its TTL controller annotates a probe node
    (kubernetes/kubernetes@v1.35.4:pkg/controller/ttl/ttl_controller.go). Until then, client-go's
    reflector backoff keeps the informer on the nodes it had: the next test's DaemonSet got a
    pod bound to a node this test had deleted 11 s before (measured here), which no kubelet
    finalizes."""
    await asyncio.to_thread(local.restart_apiserver)
    probe = unique("restart-probe")
    await request(api, "POST", "/api/v1/nodes", body={"metadata": {"name": probe}})
    try:

        async def annotated() -> bool:
            node = await request(api, "GET", node_path(probe))
            return TTL_ANNOTATION in (node["metadata"].get("annotations") or {})

        await eventually(annotated, timeout=60, interval=0.3)
    finally:
        await request(api, "DELETE", node_path(probe))


async def test_after_an_apiserver_restart_each_change_is_one_patch_per_node(
    cluster: ClusterUnderTest,
    operator: OperatorThread,
    api: client.ApiClient,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    pool = unique("pool")
    nodes = await make_nodes("A30", 2, gpus=1, labels={"test/pool": pool})
    spec = {"nodeSelector": {"matchLabels": {"test/pool": pool}}, "mode": "hami-core"}
    policy = await policies("restart", spec)
    await wait_nodes(api, nodes, carries(policy))

    await restart(local, api)
    offset = local.audit_offset()
    assert local.check_running() == []

    # A change of the policy: one PATCH to each node.
    labels: dict[str, Any] = {VGPU_LABEL: "true", "restart/after": "1"}
    await patch_spec(api, policy, {"nodeLabels": labels})
    await wait_nodes(api, nodes, carries(policy, **{"restart/after": "1"}))
    # A node joins the pool: Ready again means kwok and the controller manager reconnected.
    [late] = await make_nodes("A30", 1, gpus=1, labels={"test/pool": pool})
    await wait_nodes(api, [late], carries(policy, **{"restart/after": "1"}))

    patches = Counter(
        e["objectRef"]["name"]
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e["verb"] == "patch"
        and e["objectRef"].get("resource") == "nodes"
        and not e["objectRef"].get("subresource")
        and e["objectRef"].get("name") in {*nodes, late}
        and e["responseStatus"]["code"] < 300
    )
    assert patches == {name: 1 for name in [*nodes, late]}
    assert operator.error is None


async def test_the_agent_resumes_its_watch_after_an_apiserver_restart(
    cluster: ClusterUnderTest, api: client.ApiClient, agents: Agents
) -> None:
    """The agent's list-then-watch (kubeapi.list_watch) resumes on its own: a configuration
    released after the restart is applied, and the restart itself costs no write."""
    local = cluster.require_audit()
    node = await agents.node("A30", 1)
    agent = agents.start(node)
    first = static({"1g.6gb": 4})
    await release(api, node.name, first)
    await wait_applied(api, node.name, first, agent)

    offset = local.audit_offset()
    await restart(local, api)
    await asyncio.sleep(2)  # the agent's watch notices the lost connection and resumes
    assert [e for e in local.audit_events(user=AGENT_USER, offset=offset)] == []

    second = static({"2g.12gb": 2})
    await release(api, node.name, second)
    await wait_applied(api, node.name, second, agent)
    assert node.layout(0) == Counter({5: 2})  # 2g.12gb is profile 5 on the A30 (mig -lgip)
    assert agent.running()

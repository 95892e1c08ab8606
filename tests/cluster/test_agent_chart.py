"""The chart's agent DaemonSet, rendered by helm and applied to the real apiserver: its pods land
on GPU nodes (also those the operator taints), not on CPU nodes, with what a node agent needs."""

from __future__ import annotations

import contextlib
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.agentkit import agent_kubeconfig_path
from tests.cluster.helpers import NodeFactory, eventually, unique
from vgpu_devcluster.install import OPERATOR_NAMESPACE, apply, render_chart
from vgpu_operator.kubeapi import NotFound, request

__all__ = ["agent_kubeconfig_path"]  # fixture: the agent ServiceAccount the pods run under

OPERATOR_TAINT = {"key": "volcano.sh/vgpu", "value": "hami", "effect": "NoSchedule"}


def test_daemonset_renders_what_a_gpu_node_agent_needs() -> None:
    [ds] = render_chart("agent-daemonset.yaml")
    pod = ds["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"][0] == "agent"
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert container["securityContext"]["privileged"] is True
    assert pod["hostPID"] is True  # every compute process on the GPUs is visible
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "persistenced"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "persistenced"]
    assert mount["mountPath"] == volume["hostPath"]["path"] == "/run/nvidia-persistenced"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["serviceAccountName"] == "vgpu-operator-agent"
    assert {"key": "volcano.sh/vgpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    [everything] = render_chart("agent-daemonset.yaml", values={"agent.tolerateAllTaints": "true"})
    assert everything["spec"]["template"]["spec"]["tolerations"] == [{"operator": "Exists"}]
    without = render_chart(values={"agent.enabled": "false"})
    assert without and not [d for d in without if d["metadata"]["name"] == "vgpu-operator-agent"]


async def test_daemonset_runs_on_gpu_nodes_only(
    api: client.ApiClient, make_nodes: NodeFactory, agent_kubeconfig_path: object
) -> None:
    pool = unique("pool")
    on = {"test/pool": pool}
    [tainted] = await make_nodes("A100-SXM4-80GB", 1, gpus=1, labels=on, taints=[OPERATOR_TAINT])
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    [plain] = await make_nodes("H100-80GB-HBM3", 1, gpus=1, labels=on, taints=[gpu_taint])
    foreign = {"key": "team/dedicated", "value": "ml", "effect": "NoSchedule"}
    [other] = await make_nodes("H200", 1, gpus=1, labels=on, taints=[foreign])
    [cpu] = await make_nodes(None, 1, labels=on, prefix="cpu")

    [ds] = render_chart("agent-daemonset.yaml")
    name = unique("agent")
    ds["metadata"]["name"] = name
    ds["spec"]["selector"]["matchLabels"]["test/run"] = name
    template = ds["spec"]["template"]
    template["metadata"]["labels"]["test/run"] = name
    template["spec"]["nodeSelector"]["test/pool"] = pool  # only this test's nodes
    await apply(api, ds)
    pods_path = f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods"
    try:

        async def pods() -> list[dict[str, Any]]:
            body = await request(api, "GET", pods_path, query={"labelSelector": f"test/run={name}"})
            return list(body.get("items", []))

        async def running_on_gpu_nodes() -> bool:
            found = await pods()
            where = {
                p["spec"].get("nodeName") for p in found if p["status"].get("phase") == "Running"
            }
            return where == {tainted, plain} and len(found) == 2

        await eventually(running_on_gpu_nodes, timeout=90)
        placed = {p["spec"]["nodeName"] for p in await pods()}
        assert other not in placed and cpu not in placed
        pod = (await pods())[0]["spec"]
        assert pod["priorityClassName"] == "system-node-critical"
        # the DaemonSet controller adds the node-condition tolerations: cordoned nodes included
        keys = {t.get("key") for t in pod["tolerations"]}
        assert "node.kubernetes.io/unschedulable" in keys
    finally:
        with contextlib.suppress(NotFound):
            await request(
                api,
                "DELETE",
                f"/apis/apps/v1/namespaces/{OPERATOR_NAMESPACE}/daemonsets/{name}",
                query={"propagationPolicy": "Foreground"},
            )

"""The demo's DRA pool: A30 nodes whose GPUs NVIDIA's DRA driver hands out whole through
ResourceClaims (the `a30-dra` policy of examples/demo/policies.yaml).

What a real cluster has for it, installed as the driver's chart installs it
(kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu): the
DeviceClasses and the kubelet plugin DaemonSet, whose placement the operator pins to the dra nodes
(the demo's operator config names it: `dra: {}`); `dra_kubelet.KubeletPluginSimulator` plays the
plugin's process in each of its pods, publishing the node's ResourceSlice from the GPUs of the
node's fake nvidia-smi (the node agent's) while the pod runs there. The nodes have no NVIDIA
device plugin (no `nvidia.com/gpu` capacity), and they join once the operator has pinned HAMi's
plugin to its own nodes (`wait_pinned`), so the driver is their GPUs' only owner. The
workload, examples/demo/claims/dra-inference.yaml, asks for one A30 per pod through a
ResourceClaimTemplate; the real kube-scheduler allocates the claims and binds the pods.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from vgpu_devcluster import binaries
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.agentproc import AgentProcess
from vgpu_devcluster.dra_driver import API_VERSION, DRIVER
from vgpu_devcluster.dra_kubelet import KubeletPluginSimulator, install_kubelet_plugin
from vgpu_devcluster.dra_publish import install_device_classes
from vgpu_devcluster.nodes import NodeSpec
from vgpu_operator import contract, kubeapi

DRA_NODES: tuple[NodeSpec, ...] = tuple(
    NodeSpec(f"a30-{i}", "A30", 2, nvidia_device_plugin=False) for i in range(2)
)
# The chart's RBAC and admission policies as rendered for an operator config with a `dra`
# section (`--set` style): the Role on the kubelet plugin DaemonSet, the read of DeviceClasses
# and ResourceSlices, the DaemonSet among those the controller may patch.
CHART_VALUES: dict[str, Any] = {"config.dra.dynamicMIG": "false"}
# examples/demo/claims/dra-inference.yaml's Deployment
WORKLOAD_NAMESPACE, WORKLOAD_LABEL = "default", ("app", "dra-inference")


async def wait_pinned(api: Any, namespace: str, name: str, timeout: float) -> None:
    """Until the operator has pinned HAMi's plugin DaemonSet to its own nodes (a nodeSelector on
    its placement label): nodes that join after it get no HAMi plugin pod, so HAMi never
    registers a DRA node's GPUs (HAMi's manifest places its plugin on every node; while it
    serves a DRA node, rule dra-second-owner names it)."""
    path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"
    deadline = time.monotonic() + timeout
    while True:
        ds = await kubeapi.request(api, "GET", path)
        selector = ((ds.get("spec") or {}).get("template") or {}).get("spec", {}).get(
            "nodeSelector"
        ) or {}
        if contract.LABEL_DEVICE_PLUGIN in selector:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"DaemonSet {namespace}/{name} was not pinned in {timeout}s")
        await asyncio.sleep(0.5)


def claim_files() -> list[Path]:
    return sorted((binaries.repo_root() / "examples" / "demo" / "claims").glob("*.yaml"))


async def install_driver(api: Any) -> None:
    """The driver's DeviceClasses and kubelet plugin DaemonSet (its namespace exists: the
    operator's Role there came first)."""
    await install_device_classes(api)
    await install_kubelet_plugin(api)


def simulator(api: Any, agents: Iterable[AgentProcess]) -> KubeletPluginSimulator:
    """The kubelet plugin's process in each of its pods, reading the node's GPUs from its agent's
    fake nvidia-smi (nodes without one publish nothing)."""
    states = {a.node: a.gpus.state for a in agents}

    def state(node: str) -> fs.NodeState | None:
        path = states.get(node)
        return fs.load(path) if path is not None else None

    return KubeletPluginSimulator(api, state)


async def published_devices(api: Any) -> dict[str, int]:
    """node -> the devices the driver's ResourceSlices publish there (the newest generation of
    each node's pool)."""
    body = await kubeapi.request(
        api,
        "GET",
        f"/apis/{API_VERSION}/resourceslices",
        query={"fieldSelector": f"spec.driver={DRIVER}"},
    )
    newest: dict[str, tuple[int, int]] = {}
    for s in body.get("items") or []:
        spec = s.get("spec") or {}
        node, generation = spec.get("nodeName"), int((spec.get("pool") or {}).get("generation", 0))
        if not node:
            continue
        devices = len(spec.get("devices") or [])
        seen, count = newest.get(node, (-1, 0))
        if generation > seen:
            newest[node] = (generation, devices)
        elif generation == seen:
            newest[node] = (generation, count + devices)
    return {node: count for node, (_, count) in newest.items()}


def published_column(node: str, published: Mapping[str, int]) -> str | None:
    """What the node table's REGISTERED column says of a node the driver publishes:
    `<devices>x<driver>`; None: it publishes nothing there."""
    count = published.get(node)
    return f"{count}x{DRIVER}" if count else None


async def workload_pods(api: Any) -> list[dict[str, Any]]:
    key, value = WORKLOAD_LABEL
    body = await kubeapi.request(
        api,
        "GET",
        f"/api/v1/namespaces/{WORKLOAD_NAMESPACE}/pods",
        query={"labelSelector": f"{key}={value}"},
    )
    return [p for p in body.get("items") or [] if not p["metadata"].get("deletionTimestamp")]


async def pending(
    api: Any, sim: KubeletPluginSimulator, labels: Mapping[str, Mapping[str, str]]
) -> list[str]:
    """What the DRA pool still waits for: the kubelet plugin publishing on exactly the nodes
    labelled for it (`labels`: node -> its labels), and every pod of the claim workload Running
    on one of them."""
    out = []
    dra = {n for n, lab in labels.items() if lab.get(contract.LABEL_DEVICE_PLUGIN) == "dra"}
    if dra != {s.name for s in DRA_NODES}:
        out.append(f"dra nodes {sorted(dra)}, want {[s.name for s in DRA_NODES]}")
    running = await sim.running_pods()
    if set(running) != dra or set(sim.published) != dra:
        out.append(
            f"DRA kubelet plugin pods on {sorted(running)}, publishing on "
            f"{sorted(sim.published)}, want {sorted(dra)}"
        )
    pods = await workload_pods(api)
    if not pods:
        out.append("no pod of the claim workload yet")
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node not in dra or phase != "Running":
            out.append(f"claim pod {pod['metadata']['name']}: {phase} on {node or 'no node'}")
    return out

"""One group of simulated GPU nodes of bench/rollout.py: its kwok nodes, one GPU pod on each, and
the checks that it stands where a run starts (every node configured and reported by its agent).

Nodes are named `<group>-<index, 5 digits>` (names of one width: no name is the start of
another, so the floor's replay can swap names as text) and labelled `bench/group=<group>`; the
pod on node X is `gpu-X` in NAMESPACE, with the same label, bound by `spec.nodeName` (what a
scheduler would have done; kwok runs it), holding one of the pool's GPU resource, its
termination grace 1 s (as the rollout tests' pods).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from benchkit import CONCURRENCY, Progress, create_nodes, delete_nodes
from vgpu_devcluster.nodes import NodeSpec
from vgpu_operator import contract, kubeapi
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.rollout.arrive import hardware_applied
from vgpu_operator.models.node import NodeConfig

NAMESPACE = "bench-rollout"
GROUP_LABEL = "bench/group"
POOL = "bench/pool"  # what benchkit.create_nodes lists the new nodes by
NODE_MODEL = "A100-SXM4-80GB"  # a devcluster.nodes key; the fake's catalog key is the same


@dataclass(frozen=True)
class Group:
    name: str
    size: int
    gpus: int

    @property
    def selector(self) -> str:
        return f"{GROUP_LABEL}={self.name}"

    @property
    def nodes(self) -> list[str]:
        return [f"{self.name}-{i:05d}" for i in range(self.size)]

    @property
    def poll_seconds(self) -> float:
        """Between two listings of the group while it is set up: a few nodes are listed more
        often than a thousand."""
        return min(1.0, 0.25 + self.size / 1000)


async def namespace(api: Any, progress: Progress) -> None:
    with contextlib.suppress(kubeapi.Conflict):
        body = {"metadata": {"name": NAMESPACE}}
        await kubeapi.request(api, "POST", "/api/v1/namespaces", body=body, field_manager=None)
    while True:  # the controller manager creates its default ServiceAccount
        try:
            path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"
            await kubeapi.request(api, "GET", path)
            return
        except kubeapi.NotFound:
            progress(f"the ServiceAccount default in {NAMESPACE}")
            await asyncio.sleep(0.5)


def gpu_pod(group: Group, node: str, resource: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"gpu-{node}", "labels": {GROUP_LABEL: group.name}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "train",
                    "image": "registry.example/train:1",
                    "resources": {"limits": {resource: "1"}},
                }
            ],
        },
    }


async def create_group(api: Any, group: Group, progress: Progress) -> None:
    """The nodes, Ready and untainted."""
    labels = {GROUP_LABEL: group.name, POOL: group.name}
    specs = [NodeSpec(name, NODE_MODEL, group.gpus, labels=labels) for name in group.nodes]
    await create_nodes(api, specs, progress)


async def place_pods(api: Any, group: Group, resource: str, progress: Progress) -> None:
    """A Running GPU pod on each node. Placed once the pool stands at its start: a node that
    runs GPU pods when its first configuration is released goes through the rollout gate if the
    release may change its GPUs (core.rollout.arrival), which is not what is timed."""
    sem = asyncio.Semaphore(CONCURRENCY)

    async def create(node: str) -> None:
        async with sem:
            path = f"/api/v1/namespaces/{NAMESPACE}/pods"
            body = gpu_pod(group, node, resource)
            await kubeapi.request(api, "POST", path, body=body, field_manager=None)

    await asyncio.gather(*(create(n) for n in group.nodes))
    while True:
        pods = await list_group(api, f"/api/v1/namespaces/{NAMESPACE}/pods", group, progress)
        running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
        progress(f"kwok to run the group's GPU pods: {running}/{group.size} Running")
        if running >= group.size:
            return
        await asyncio.sleep(group.poll_seconds)


LIST_SECONDS = 120.0  # one list of a group: 1,000 nodes on two saturated cores took over 30 s


async def list_group(
    api: Any, path: str, group: Group, progress: Progress | None = None
) -> list[dict[str, Any]]:
    """The group's objects at `path`, listed again when the list times out: a run at 1,000
    nodes saturates both cores while its agents start (their fake nvidia-smi calls are Python
    processes) and one list of the nodes took longer than a client's 30 s, which ended the run
    (2026-11-26). The caller's phase keeps its own deadline."""
    while True:
        try:
            listing = await kubeapi.request(
                api, "GET", path, query={"labelSelector": group.selector}, timeout=LIST_SECONDS
            )
            return list(listing.get("items") or [])
        except kubeapi.Unreachable as exc:
            if progress is not None:
                progress(f"listing {path} again after {exc}")
            await asyncio.sleep(group.poll_seconds)


async def delete_group(api: Any, group: Group) -> None:
    """Its pods (at once), then its nodes."""
    await kubeapi.request(
        api,
        "DELETE",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        query={"labelSelector": group.selector, "gracePeriodSeconds": "0"},
    )
    await delete_nodes(api, set(group.nodes))


def not_configured_as(obj: dict[str, Any], mode: str) -> str:
    """Why the node is not yet configured as `mode` (empty when it is): a released
    configuration of `mode`, its agent reporting `success` with that configuration's hardware
    applied, and no transition under way on it."""
    meta = obj["metadata"]
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    config = NodeConfig.from_annotation(annotations.get(contract.ANN_CONFIG))
    if config is None or config.mode != mode:
        return f"configuration {config.mode if config else None}"
    if labels.get(contract.LABEL_STATE) != "success":
        return f"agent state {labels.get(contract.LABEL_STATE)}"
    if not hardware_applied(node_facts(obj), config):
        return "hardware not applied"
    if contract.ANN_ROLLOUT in annotations:
        return "a transition under way"
    if (obj.get("spec") or {}).get("unschedulable"):
        return "cordoned"
    return ""


async def wait_configured(api: Any, group: Group, mode: str, progress: Progress) -> None:
    """Until every node of the group is configured as `mode`; the progress names up to three
    nodes that are not, and why (what a timeout prints)."""
    while True:
        items = await list_group(api, kubeapi.node_path(), group, progress)
        why = {o["metadata"]["name"]: not_configured_as(o, mode) for o in items}
        missing = sorted(n for n, w in why.items() if w)
        done = len(items) - len(missing)
        shown = "; ".join(f"{n}: {why[n]}" for n in missing[:3])
        progress(
            f"nodes configured as {mode} and reported by their agents: {done}/{group.size}"
            + (f" (not yet: {shown})" if shown else "")
        )
        if done >= group.size:
            return
        await asyncio.sleep(group.poll_seconds)


async def node_uids(api: Any, group: Group) -> dict[str, str]:
    items = await list_group(api, kubeapi.node_path(), group)
    return {o["metadata"]["name"]: o["metadata"]["uid"] for o in items}

"""First configurations through the rollout gate, against the real apiserver: busy A100 nodes
(GPU pods bound to kwok nodes, each node's inventory as its agent reports it: 8 GPUs, MIG off)
adopted by a static-MIG policy with `maxUnavailable: 1`, then a selector widened over more busy
nodes. A watch sees every committed state: never more than one node in transition, and no node
released before it was cordoned and its GPU pods were gone (`core.rollout.arrival`).

The agent's part (apply, report `success` with what it applied) is played here by the test, as
the agent writes it (`agent.report`): its own tests run it against the fake nvidia-smi."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory, PolicyFactory, eventually, patch_spec, unique
from tests.cluster.rolloutkit import (
    TransitionCount,
    Watcher,
    began_with_drain,
    config_of,
    cordoned,
    gpu_pod,
    pod,
    rollout_of,
    wait_running,
)
from vgpu_operator import contract
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.core.mig.partition import synthetic_inventory
from vgpu_operator.kubeapi import MERGE_PATCH, node_path, request
from vgpu_operator.models.gpu_catalog import GPU_MODELS
from vgpu_operator.models.inventory import Inventory

A100 = GPU_MODELS["A100-SXM4-80GB"]
STATIC = {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]}


async def report(api: client.ApiClient, node: str, inventory: Inventory, state: str | None) -> None:
    """What the node agent writes on its Node: its inventory annotation and state label."""
    body: dict[str, Any] = {
        "metadata": {"annotations": {contract.ANN_INVENTORY: inventory.to_annotation()}}
    }
    if state is not None:
        body["metadata"]["labels"] = {contract.LABEL_STATE: state}
    await request(api, "PATCH", node_path(node), body=body, content_type=MERGE_PATCH)


@contextlib.asynccontextmanager
async def agents_applying(api: client.ApiClient, nodes: list[str]) -> AsyncIterator[None]:
    """Each node's agent: once a configuration is released to it, it reports it applied."""

    async def loop() -> None:
        done: set[str] = set()
        while True:
            for name in nodes:
                obj = await request(api, "GET", node_path(name))
                config, r = config_of(obj), rollout_of(obj)
                if config is None or config.mode != "mig" or name in done:
                    continue
                if r is not None and r.phase != "Applying":
                    continue
                applied = synthetic_inventory(A100, 8, mig=True).model_copy(
                    update={"applied": config}
                )
                await report(api, name, applied, "success")
                done.add(name)
            await asyncio.sleep(0.3)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def busy(
    api: client.ApiClient, namespace: str, make_nodes: NodeFactory, count: int, pool: str
) -> tuple[list[str], Watcher]:
    nodes = await make_nodes("A100-SXM4-80GB", count, labels={"test/pool": pool})
    watcher = Watcher(api, list(nodes), "test/arrival=yes")
    for i, node in enumerate(nodes):
        await report(api, node, synthetic_inventory(A100, 8, mig=False), None)
        patch = {"metadata": {"labels": {"test/arrival": "yes"}}}
        await request(api, "PATCH", node_path(node), body=patch, content_type=MERGE_PATCH)
        watcher.pods_of[node] = [await gpu_pod(api, namespace, f"{pool}-train-{i}", node)]
    await wait_running(api, [k for keys in watcher.pods_of.values() for k in keys])
    return nodes, watcher


async def released(api: client.ApiClient, nodes: list[str]) -> bool:
    for name in nodes:
        obj = await request(api, "GET", node_path(name))
        config = config_of(obj)
        if config is None or config.mode != "mig" or rollout_of(obj) is not None or cordoned(obj):
            return False
    return True


async def test_busy_nodes_adopted_and_a_widened_selector_go_through_the_gate_one_at_a_time(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    operator: OperatorThread,
) -> None:
    first, more = unique("adopt"), unique("widen")
    nodes, watcher = await busy(api, namespace, make_nodes, 10, first)
    later, other = await busy(api, namespace, make_nodes, 3, more)
    watcher.nodes = nodes + later
    watcher.pods_of.update(other.pods_of)
    spec = {
        "nodeSelector": {"matchLabels": {"test/pool": first}},
        "mode": "mig",
        "mig": STATIC,
        "rollout": {"maxUnavailable": 1, "drain": {"timeoutSeconds": 60}},
    }
    count = TransitionCount(api, "test/arrival=yes")
    async with count.running(), watcher.running("mig"), agents_applying(api, nodes + later):
        name = await policies("arrival", spec)
        await eventually(lambda: released(api, nodes), timeout=120)
        assert [await pod(api, k) for k in watcher.pods_of[later[0]]] != [None]  # not its pool
        pools = [{"key": "test/pool", "operator": "In", "values": [first, more]}]
        widened = {"matchLabels": None, "matchExpressions": pools}
        await patch_spec(api, name, {"nodeSelector": widened})
        await eventually(lambda: released(api, later), timeout=90)

    assert count.most == 1, count.most
    assert watcher.released_with_pods == [], watcher.released_with_pods
    assert sorted(watcher.released_at) == sorted(nodes + later)
    for node, keys in watcher.pods_of.items():
        assert [await pod(api, k) for k in keys] == [None], f"{node}'s pod was not evicted"
    for node in nodes + later:  # each began with its cordon and drain (its Event says so)
        assert await began_with_drain(api, node), (node, watcher.phases.get(node))

"""Safe transitions against the real apiserver: GPU pods bound to kwok nodes stand for running work,
evictions go through the Eviction API (PodDisruptionBudgets kept real by the controller manager),
and the operator runs under the chart's RBAC."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
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
    pool_spec,
    rollout_of,
    wait_running,
)
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi import Invalid, node_path, policy_path, request
from vgpu_operator.kubeapi.credentials import Credentials


async def nodes_now(api: client.ApiClient, names: list[str]) -> list[dict[str, Any]]:
    return [await request(api, "GET", node_path(n)) for n in names]


async def all_released(api: client.ApiClient, names: list[str], mode: str) -> bool:
    for obj in await nodes_now(api, names):
        config = config_of(obj)
        if config is None or config.mode != mode or rollout_of(obj) is not None or cordoned(obj):
            return False
    return True


async def test_a100_pool_to_mig_three_nodes_at_a_time_each_drained_before_release(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    operator: OperatorThread,
) -> None:
    pool = unique("pool")
    nodes = await make_nodes("A100-SXM4-80GB", 10, labels={"test/pool": pool})
    rollout = {"maxUnavailable": 3, "drain": {"timeoutSeconds": 60}}
    name = await policies("a100", pool_spec(pool, **rollout))
    await eventually(lambda: all_released(api, nodes, "hami-core"), timeout=30)
    watcher = Watcher(api, nodes, f"test/pool={pool}")
    for i, node in enumerate(nodes):
        watcher.pods_of[node] = [await gpu_pod(api, namespace, f"train-{i}", node)]
    await wait_running(api, [k for keys in watcher.pods_of.values() for k in keys])

    # every committed state of the nodes (a watch): the exact most in transition at once
    count = TransitionCount(api, f"test/pool={pool}")
    async with count.running(), watcher.running("mig"):
        await patch_spec(api, name, {"mode": "mig", "hamiCore": None, "mig": {}})
        await eventually(lambda: all_released(api, nodes, "mig"), timeout=120)

    assert count.most == 3, f"at most 3 nodes in transition, and 3 reached: {count.most}"
    assert watcher.most <= 3, watcher.most
    assert watcher.released_with_pods == []
    assert sorted(watcher.released_at) == sorted(nodes)
    for node, keys in watcher.pods_of.items():
        assert [await pod(api, k) for k in keys] == [None], f"{node}'s pod was evicted"
    # every node went through the steps in order (a quick one may be seen skipping a phase; on
    # a loaded machine a sample may even come after the drain: then the node's Event says how
    # its transition began)
    order = ["Draining", "Pausing", "Applying", "Verifying"]
    for node, phases in watcher.phases.items():
        assert phases == sorted(phases, key=order.index), (node, phases)
        if phases[0] != "Draining":
            assert await began_with_drain(api, node), (node, phases)


async def test_wait_mode_releases_a_node_only_after_its_gpu_pods_end(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    operator: OperatorThread,
) -> None:
    pool = unique("pool")
    nodes = await make_nodes("A100-SXM4-80GB", 2, labels={"test/pool": pool})
    rollout = {"maxUnavailable": 1, "drain": {"mode": "Wait", "timeoutSeconds": 60}}
    name = await policies("wait", pool_spec(pool, **rollout))
    await eventually(lambda: all_released(api, nodes, "hami-core"), timeout=30)
    watcher = Watcher(api, nodes, f"test/pool={pool}")
    watcher.pods_of[nodes[0]] = [
        await gpu_pod(api, namespace, "job-0", nodes[0], complete_after="6s")
    ]
    await wait_running(api, watcher.pods_of[nodes[0]])

    count = TransitionCount(api, f"test/pool={pool}")
    async with count.running(), watcher.running("mig"):
        await patch_spec(api, name, {"mode": "mig", "hamiCore": None, "mig": {}})
        await eventually(lambda: all_released(api, nodes, "mig"), timeout=90)

    assert watcher.released_with_pods == []
    ended = await pod(api, watcher.pods_of[nodes[0]][0])
    assert ended is not None, "Wait mode evicts nothing: the pod ended by itself"
    assert ended["status"]["phase"] == "Succeeded"
    assert not ended["metadata"].get("deletionTimestamp")
    assert count.most == 1, count.most


async def test_a_pdb_holds_the_node_until_the_drain_times_out_and_stops_the_rollout(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    operator: OperatorThread,
) -> None:
    pool = unique("pool")
    nodes = await make_nodes("A100-SXM4-80GB", 3, labels={"test/pool": pool})
    rollout = {"maxUnavailable": 1, "drain": {"mode": "Evict", "timeoutSeconds": 6}}
    name = await policies("pdb", pool_spec(pool, **rollout))
    await eventually(lambda: all_released(api, nodes, "hami-core"), timeout=30)
    key = await gpu_pod(api, namespace, "db-0", nodes[0], labels={"app": "db"})
    await wait_running(api, [key])
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "db"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }
    path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    await request(api, "POST", path, body=pdb, field_manager=None)

    async def pdb_forbids() -> bool:
        status = (await request(api, "GET", f"{path}/db")).get("status") or {}
        return status.get("currentHealthy") == 1 and status.get("disruptionsAllowed") == 0

    await eventually(pdb_forbids, timeout=30)

    await patch_spec(api, name, {"mode": "mig", "hamiCore": None, "mig": {}})

    async def failed() -> bool:
        r = rollout_of(await request(api, "GET", node_path(nodes[0])))
        return r is not None and r.phase == "Failed"

    async def draining() -> bool:
        r = rollout_of(await request(api, "GET", node_path(nodes[0])))
        return r is not None and r.phase == "Draining"

    await eventually(draining, timeout=20)
    held = await pod(api, key)
    assert held is not None and not held["metadata"].get("deletionTimestamp")
    await eventually(failed, timeout=30)
    obj = await request(api, "GET", node_path(nodes[0]))
    r = rollout_of(obj)
    assert r is not None and r.reason == "DrainTimeout"
    assert key in r.message and "disruption budget" in r.message, r.message
    assert cordoned(obj), "onFailure KeepCordoned (the default)"
    assert config_of(obj).mode == "hami-core"  # type: ignore[union-attr]
    assert await pod(api, key) is not None

    async def reported() -> bool:
        status = (await request(api, "GET", policy_path(name))).get("status") or {}
        problems = status.get("problemNodes") or []
        return any(p["node"] == nodes[0] and p["reason"] == "DrainTimeout" for p in problems)

    await eventually(reported, timeout=20)
    # the rollout takes no new node: the other two stay as they were
    for _ in range(3):
        for other in await nodes_now(api, nodes[1:]):
            assert rollout_of(other) is None and not cordoned(other)
            assert config_of(other).mode == "hami-core"  # type: ignore[union-attr]
        await asyncio.sleep(1)
    # like a Deployment's, the halt lasts until the spec changes: without the PDB, a new
    # generation (only the drain timeout changes) tries the failed node again and goes on
    await request(api, "DELETE", f"{path}/db", field_manager=None)
    await patch_spec(api, name, {"rollout": {**rollout, "drain": {"timeoutSeconds": 20}}})
    await eventually(lambda: all_released(api, nodes, "mig"), timeout=60)
    evicted = await pod(api, key)
    assert evicted is None or evicted["metadata"].get("deletionTimestamp"), "db-0 still runs"


async def test_the_apiserver_checks_max_unavailable(
    api: client.ApiClient, installed: Credentials
) -> None:
    """The CRD's int-or-string and its CEL rule: a count or a percent, never 0."""

    async def create(value: int | str) -> None:
        body = {
            "apiVersion": "vgpu.volcano.sh/v1alpha1",
            "kind": "VGPUNodePolicy",
            "metadata": {"name": unique("mu")},
            "spec": {**pool_spec("x", "mig"), "rollout": {"maxUnavailable": value}},
        }
        await request(
            api, "POST", policy_path(), body=body, query={"dryRun": "All"}, field_manager=None
        )

    for good in (3, "25%", "100%"):
        await create(good)
    for bad in (0, "0", "0%", "lots"):
        with pytest.raises(Invalid) as refused:
            await create(bad)
        assert "spec.rollout.maxUnavailable" in refused.value.message, refused.value.message

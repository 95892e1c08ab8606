"""Convergence of one policy over N simulated nodes, against a floor measured in the same run.

For each N: two disjoint pools of N kwok nodes on one local apiserver (heartbeats running).
- floor: a bare kubernetes-asyncio client sends exactly the PATCHes the operator would send
  (computed by the same pure core) with the same bounded concurrency;
- operator: the operator is running and idle; the clock starts when the policy is created and
  stops when a watch has seen every node of the pool carry the policy's labels and taints.
Both write counts come from the apiserver's audit log. Prints both times and their ratio
(goal: <= 1.5) and the writes per node (goal: 1.0 for both).

Usage: python bench/convergence.py [N ...]   (default: 500 1000)
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from typing import Any

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.app import OperatorThread
from vgpu_operator.controller.kube import Credentials
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.core.nodefacts import node_facts
from vgpu_operator.core.nodestate import plan_cluster
from vgpu_operator.core.validate import parse_policy
from vgpu_operator.devcluster.cluster import LocalCluster
from vgpu_operator.devcluster.install import OPERATOR_USER, install_operator_access
from vgpu_operator.devcluster.nodes import NodeSpec, create_gpu_nodes

CONCURRENCY = 32


def policy(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name, "generation": 1},
        "spec": {"nodeSelector": {"matchLabels": {"bench/pool": pool}}, "mode": "hami-core"},
    }


async def pool_nodes(api: Any, pool: str) -> list[dict[str, Any]]:
    listing = await kubeapi.request(
        api, "GET", kubeapi.node_path(), query={"labelSelector": f"bench/pool={pool}"}
    )
    return list(listing["items"])


async def floor(api: Any, pool: str) -> float:
    """The same PATCHes the operator would send, from a bare client."""
    nodes = [node_facts(n) for n in await pool_nodes(api, pool)]
    plans = plan_cluster(nodes, [parse_policy(policy("floor", pool))]).patches
    sem = asyncio.Semaphore(CONCURRENCY)

    async def send(name: str, body: dict[str, Any]) -> None:
        async with sem:
            await kubeapi.request(
                api, "PATCH", kubeapi.node_path(name), body=body, content_type=kubeapi.MERGE_PATCH
            )

    start = time.perf_counter()
    await asyncio.gather(*(send(n, b) for n, b in plans.items()))
    return time.perf_counter() - start


async def operator_run(api: Any, pool: str, n: int) -> float:
    name = f"bench-{pool}"
    selector = f"{contract.LABEL_POLICY}={name},volcano.sh/vgpu.enabled=true"
    listing = await kubeapi.request(api, "GET", kubeapi.node_path(), query={"limit": "1"})
    rv = listing["metadata"]["resourceVersion"]
    seen: set[str] = set()
    done = asyncio.Event()

    async def watch() -> None:
        # Raw JSON lines, no typed models: the observer must not load the process it measures.
        raw: Any = api
        resp = await raw.call_api(
            kubeapi.node_path(),
            "GET",
            query_params=[
                ("watch", "true"),
                ("labelSelector", selector),
                ("resourceVersion", rv),
                ("timeoutSeconds", "600"),
            ],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        async for line in resp.content:
            obj = json.loads(line)["object"]
            taints = (obj.get("spec") or {}).get("taints") or []
            if any(t.get("key") == contract.DEFAULT_TAINT_KEY for t in taints):
                seen.add(obj["metadata"]["name"])
            if len(seen) >= n:
                done.set()
                resp.close()
                return

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.5)
    body = policy(name, pool)
    del body["metadata"]["generation"]
    start = time.perf_counter()
    await kubeapi.request(api, "POST", kubeapi.policy_path(), body=body, field_manager=None)
    await asyncio.wait_for(done.wait(), timeout=600)
    elapsed = time.perf_counter() - start
    await watcher
    return elapsed


def writes(cluster: LocalCluster, user: str, offset: int, names: set[str]) -> Counter[str]:
    return Counter(
        e["objectRef"]["name"]
        for e in cluster.audit_events(user=user, offset=offset)
        if e["objectRef"]["resource"] == "nodes"
        and e["verb"] == "patch"
        and e["objectRef"].get("name") in names
        and e["responseStatus"]["code"] < 300
    )


async def main(sizes: list[int]) -> None:
    """Per N: the floor runs first with no operator (its nodes would otherwise look like nodes
    of a deleted policy to the operator, which would release them); then its nodes are deleted,
    the operator starts, settles, and the policy is created."""
    with LocalCluster.run(prefix="vgpu-bench-", with_scheduler=False) as cluster:
        admin = Credentials(
            server=cluster.server, token=cluster.tokens["admin"], ca_path=str(cluster.ca_file)
        )
        # The floor's client gets the same connection pool as the operator's.
        api = admin.api_client(pool_size=CONCURRENCY + 8)
        async with api:
            credentials = await install_operator_access(api)
            print(
                f"{'N':>6} {'floor s':>9} {'operator s':>11} {'ratio':>6} "
                f"{'floor w/node':>13} {'op w/node':>10}"
            )
            for n in sizes:
                pools = {}
                for role in ("floor", "op"):
                    pool = f"{role}{n}"
                    specs = [
                        NodeSpec(f"{pool}-{i}", "A100-SXM4-80GB", 8, labels={"bench/pool": pool})
                        for i in range(n)
                    ]
                    await create_gpu_nodes(api, specs, timeout=600)
                    pools[role] = (pool, {s.name for s in specs})
                offset = cluster.audit_offset()
                floor_s = await floor(api, pools["floor"][0])
                floor_w = writes(cluster, "admin", offset, pools["floor"][1])
                for name in pools["floor"][1]:
                    await kubeapi.request(api, "DELETE", kubeapi.node_path(name))
                operator = OperatorThread(
                    credentials, options=ReconcilerOptions(concurrency=CONCURRENCY)
                ).start()
                try:
                    # The initial listing of every node and the first pass (no writes) must be
                    # over before the clock starts: that is start-up, not convergence.
                    while operator.passes < 1:
                        await asyncio.sleep(0.2)
                    await asyncio.sleep(2)
                    offset = cluster.audit_offset()
                    op_s = await operator_run(api, pools["op"][0], n)
                    await asyncio.sleep(1)
                    op_w = writes(cluster, OPERATOR_USER, offset, pools["op"][1])
                finally:
                    operator.stop()
                print(
                    f"{n:>6} {floor_s:>9.2f} {op_s:>11.2f} {op_s / floor_s:>6.2f} "
                    f"{sum(floor_w.values()) / n:>13.2f} {sum(op_w.values()) / n:>10.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    asyncio.run(main([int(a) for a in sys.argv[1:]] or [500, 1000]))

"""The floor of a convergence run (bench/convergence.py): a bare kubernetes-asyncio client that
sends exactly the PATCHes the operator would send (computed by the same pure core) with the same
bounded concurrency, as the operator's ServiceAccount, over a pool of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchkit import CONCURRENCY, delete_nodes, log, phase
from convergence_pool import (
    Run,
    converge,
    converge_deadline,
    make_pool,
    node_patches,
    other_requests,
    policy,
    pool_nodes,
)
from cpu_time import cpu_seconds, machine_cpu_seconds, quiet_machine
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_operator import kubeapi
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.kubeapi.credentials import Credentials


def floor_writes(api: Any, pool: str, plans: dict[str, Any]) -> Callable[[], Awaitable[None]]:
    """The floor's PATCHes. Each carries the resourceVersion it was planned at, as the
    operator's do; on a 409 (kwok updated the node since the listing) it reads the node and
    plans it again, as the operator does."""
    policies = [parse_policy(policy("floor", pool))]

    async def act() -> None:
        sem = asyncio.Semaphore(CONCURRENCY)

        async def send(name: str, body: dict[str, Any]) -> None:
            async with sem:
                while True:
                    try:
                        await kubeapi.request(
                            api,
                            "PATCH",
                            kubeapi.node_path(name),
                            body=body,
                            content_type=kubeapi.MERGE_PATCH,
                        )
                        return
                    except kubeapi.Conflict:
                        fresh = await kubeapi.request(api, "GET", kubeapi.node_path(name))
                        plan = plan_cluster([node_facts(fresh)], policies).plans[name]
                        if plan.patch is None:
                            return
                        body = plan.patch

        await asyncio.gather(*(send(n, b) for n, b in plans.items()))

    return act


async def floor_run(
    api: Any, cluster: LocalCluster, kubeconfig: Path, n: int, quiet_limit: float | None = None
) -> Run:
    """The bare client's PATCHes over a pool of its own (created, timed, deleted). The client
    sends them as the operator's ServiceAccount (`kubeconfig`), so the apiserver runs the same
    RBAC and admission on them as on the operator's: the chart's ValidatingAdmissionPolicies
    check every Node write of that identity (their CEL took a fifth of the apiserver's CPU in
    the operator's runs, an apiserver profile of 2026-11-26), which an admin's PATCHes skip."""
    apiserver = cluster.pids["kube-apiserver"]
    pool, names = await make_pool(api, "floor", n)
    facts = [node_facts(x) for x in await pool_nodes(api, pool)]
    plans = plan_cluster(facts, [parse_policy(policy("floor", pool))]).patches
    await quiet_machine(n, limit=quiet_limit)
    offset = cluster.audit_offset()
    cpu0, machine0 = cpu_seconds(apiserver), machine_cpu_seconds()
    as_operator = await Credentials(kubeconfig=str(kubeconfig)).client(pool_size=CONCURRENCY + 8)
    async with as_operator:
        writer = floor_writes(as_operator, pool, plans)
        seconds, began = await phase(
            f"floor over {n} nodes",
            converge_deadline(n),
            lambda progress: converge(api, pool, n, writer, progress),
        )
    api_cpu, machine = cpu_seconds(apiserver) - cpu0, machine_cpu_seconds() - machine0
    writes = node_patches(cluster, OPERATOR_USER, offset, names)
    log(f"floor over {n} nodes, other requests: {other_requests(cluster, offset, names)}")
    await phase(f"deleting {n} floor nodes", 60 + n * 0.1, lambda _: delete_nodes(api, names))
    return Run(seconds, began, writes, 0.0, api_cpu, machine)

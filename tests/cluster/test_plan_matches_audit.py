"""`vgpu-operator plan -o json` says exactly what enforce then sends (issue 25's must-show).

On the local control plane with Volcano's scheduler ConfigMap and Deployment and HAMi's plugin
DaemonSet (tests/cluster/volcano_env.py), idle GPU nodes without GPU pods and the operator
converged with no policy: `plan -f` of a new hami-core pool (its rollout budget the pool's size)
with the operator's own config file, then the same policy applied in enforce mode. The
operator's writes in the audit log (its own identity, bodies logged at level Request:
`LocalCluster.request_audited_kubeconfig`), Events, its policy's status and finalizer left out,
are the plan's "writes", write for write (`plankit.same_writes`): the node PATCHes in any order
among themselves (the controller writes nodes concurrently), then the ConfigMap, DaemonSet and
restart writes in the plan's order, none before its due time; each body the plan's once
resourceVersion and the write-time stamps are masked.

1. One pass: the pool is every GPU node the plugin runs on. Labels, taints and the node-config
   entries they render; the plugin already runs exactly there (no placement patch).
2. A write that waits: the pool leaves out one node the plugin runs on, so the plugin
   DaemonSet's placement is patched, once what the plugin reads has settled (`due`): in a later
   pass, as planned.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest
from tests.cluster.plankit import (
    Write,
    audited_operator,
    enforce_config,
    operator_writes,
    plan_json,
    planned_writes,
    policy_document,
    quiet,
    remove_policy,
    same_writes,
    until_due,
)
from tests.cluster.volcano_env import VolcanoEnv, steady, volcano_env
from vgpu_devcluster.cluster import LocalCluster
from vgpu_operator import kubeapi
from vgpu_operator.kubeapi import policy_path
from vgpu_operator.kubeapi.credentials import Credentials

pytestmark = pytest.mark.cluster

__all__ = ["volcano_env"]


async def plan_then_enforce(
    local: LocalCluster,
    api: client.ApiClient,
    kubeconfig: Path,
    tmp_path: Path,
    env: VolcanoEnv,
    group: str,
    pool: list[str],
    settle: float,
) -> tuple[list[Write], list[Write]]:
    """The plan's writes for a new hami-core pool of `group`, and the operator's once it has
    applied it: past the last planned write's due time, the pool steady, the operator quiet for
    `settle` seconds."""
    config = enforce_config(tmp_path)
    op = audited_operator(local, config)
    try:
        await quiet(local, op)  # converged with no policy: nothing left to write
        spec = {
            "nodeSelector": {"matchLabels": {"test/group": group}},
            "mode": "hami-core",
            "rollout": {"maxUnavailable": len(pool)},
        }
        doc, path = policy_document(tmp_path, f"{group}-pool", spec)
        offset = local.audit_offset()
        planned = planned_writes(await plan_json(kubeconfig, path, config))
        await kubeapi.request(api, "POST", policy_path(), body=doc, field_manager=None)
        try:
            await until_due(planned)  # (at most the restart settle time, 5 s, and a second)
            await steady(env, pool)
            await quiet(local, op, seconds=settle)
            sent = operator_writes(local, offset)
        finally:
            await remove_policy(api, doc["metadata"]["name"])
    finally:
        op.stop()
    return planned, sent


async def test_one_pass_the_operator_sends_exactly_the_writes_plan_printed(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    kubeconfig: Path,
    tmp_path: Path,
    installed: Credentials,
    volcano_env: VolcanoEnv,
) -> None:
    local = cluster.require_audit()
    env = volcano_env
    group = env.pool
    await env.add_control_node()
    nodes = await env.add_nodes("RTX-4090", 3, gpus=2, released=None, labels={"test/group": group})
    await env.install(scheduler_conf="seed000_scheduler.conf", consistent=True)
    await env.wait_running()

    planned, sent = await plan_then_enforce(
        local, api, kubeconfig, tmp_path, env, group, nodes, settle=3.0
    )
    assert [(w.verb, w.kind) for w in planned] == [("PATCH", "Node")] * len(nodes) + [
        ("PATCH", "ConfigMap")
    ], [w.line() for w in planned]
    assert {w.name for w in planned if w.kind == "Node"} == set(nodes)
    assert all(w.due is None for w in planned)  # one pass: nothing waits
    same_writes(planned, sent, concurrent={"Node"})


# A PATCH that waits goes at its due time: a settle after the node-config write, whose own
# data-changed-at counts even when its entries keep older stamps of their own (entries taken
# over unchanged keep the ConfigMap's creation time: core.volcano.config_adoption).
async def test_a_write_that_waits_goes_at_its_due_time_with_the_planned_body(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    kubeconfig: Path,
    tmp_path: Path,
    installed: Credentials,
    volcano_env: VolcanoEnv,
) -> None:
    local = cluster.require_audit()
    env = volcano_env
    group = env.pool
    await env.add_control_node()
    pool = await env.add_nodes("RTX-4090", 2, gpus=2, released=None, labels={"test/group": group})
    await env.add_nodes("RTX-4090", 1, gpus=2, released=None)  # the plugin runs here too
    await env.install(scheduler_conf="seed000_scheduler.conf", consistent=True)
    await env.wait_running()

    planned, sent = await plan_then_enforce(
        local, api, kubeconfig, tmp_path, env, group, pool, settle=3.0
    )
    lines = [w.line() for w in planned]
    assert [(w.verb, w.kind) for w in planned] == [("PATCH", "Node")] * len(pool) + [
        ("PATCH", "ConfigMap"),
        ("PATCH", "DaemonSet"),
    ], lines
    assert planned[-1].due is not None, lines  # the placement waits for the node config
    assert all(w.due is None for w in planned[:-1]), lines
    same_writes(planned, sent, concurrent={"Node"})

"""Write discipline, counted from the apiserver's audit log under the operator's identity: no
write to Nodes when nothing changed (idle, restart), exactly one PATCH per affected node when
something did."""

from __future__ import annotations

import asyncio
from collections import Counter

from kubernetes_asyncio import client

from tests.cluster.helpers import (
    ClusterUnderTest,
    NodeFactory,
    PolicyFactory,
    eventually,
    patch_spec,
    unique,
)
from tests.cluster.poolkit import clean, configured_by, hami_policy, labels, wait_nodes
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi import request


def node_writes(cluster: ClusterUnderTest, offset: int) -> Counter[tuple[str, str]]:
    """(verb, node) -> count of the operator's successful writes to Nodes since `offset`."""
    local = cluster.require_audit()
    return Counter(
        (e["verb"], e["objectRef"].get("name", ""))
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e["objectRef"]["resource"] == "nodes" and e["responseStatus"]["code"] < 300
    )


async def settle(operator: OperatorThread, passes: int = 1, timeout: float = 30) -> None:
    """Wait until the operator finished `passes` more reconcile passes and is idle."""
    target = operator.passes + passes

    async def done() -> bool:
        return operator.passes >= target

    await eventually(done, timeout=timeout, interval=0.1)


async def test_zero_writes_idle_and_after_restart_one_patch_per_node_on_change(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    operator: OperatorThread,
    installed: object,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    pool = unique("pool")
    nodes = await make_nodes("A100-SXM4-80GB", 5, labels={"test/pool": pool})
    [excluded] = await make_nodes(
        "A100-SXM4-80GB", 1, labels={"test/pool": pool, "vgpu.volcano.sh/exclude": "true"}
    )
    name = await policies("w", hami_policy(pool))
    await wait_nodes(api, nodes, configured_by(name))
    first = node_writes(cluster, 0)
    assert {n for _, n in first} >= set(nodes)
    assert all(first[("patch", n)] == 1 for n in nodes), first  # one write per node to converge
    assert ("patch", excluded) not in first
    assert clean(await request(api, "GET", f"/api/v1/nodes/{excluded}"))

    # Idle: kwok heartbeats keep nodes changing, the operator writes nothing.
    offset = local.audit_offset()
    await asyncio.sleep(5)
    assert node_writes(cluster, offset) == Counter()

    # Restart with nothing changed: the new process converges by reading only.
    operator.stop()
    offset = local.audit_offset()
    restarted = OperatorThread(operator.credentials, options=operator.options).start()
    try:
        await settle(restarted)
        await asyncio.sleep(2)
        assert node_writes(cluster, offset) == Counter()
        everything = [
            e
            for e in local.audit_events(user=OPERATOR_USER, offset=offset)
            if e["objectRef"]["resource"] != "events" and e["verb"] != "list"  # reads
        ]
        assert everything == [], Counter(
            (e["verb"], e["objectRef"]["resource"], e["objectRef"].get("name")) for e in everything
        )

        # Positive control in the same test: one policy change -> exactly one PATCH per node.
        offset = local.audit_offset()
        await patch_spec(
            api, name, {"nodeLabels": {"volcano.sh/vgpu.enabled": "true", "tier": "gold"}}
        )
        await wait_nodes(api, nodes, lambda o: labels(o).get("tier") == "gold")
        await asyncio.sleep(1)
        assert node_writes(cluster, offset) == Counter({("patch", n): 1 for n in nodes})
    finally:
        restarted.stop()
        operator.start()  # the fixture's teardown stops it again and cleans the policy

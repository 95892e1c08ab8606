"""A policy's life through Kopf's handlers (controller.handlers), against the real apiserver, the
operator under its ServiceAccount: create, update, delete with `onDelete: Delete` and `Retain`,
and a change made while the operator was down, picked up when it resumes. Each converges with
one node PATCH per idle node (a label and taint change), read from the audit log, and the
operator's only other writes are Events and its writes to the policy itself (status, Kopf's
finalizer and its last-handled-configuration annotation)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.auditkit import (
    audit_offset,
    create_policy,
    gone,
    node_writes,
    quiet,
    start_operator,
    unneeded,
    writes,
)
from tests.cluster.helpers import ClusterUnderTest, NodeFactory, eventually, patch_spec, unique
from tests.cluster.poolkit import clean, configured_by, hami_policy, labels, node, wait_nodes
from vgpu_operator import contract
from vgpu_operator.kubeapi import policy_path, request

pytestmark = pytest.mark.cluster

__all__ = ["start_operator"]


async def test_create_update_delete_and_resume_write_each_idle_node_once(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    make_nodes: NodeFactory,
    start_operator: Any,
) -> None:
    local = cluster.require_audit()
    pool = unique("life")
    name = unique("life")
    nodes = await make_nodes("A100-SXM4-80GB", 3, labels={"test/pool": pool})
    operator = start_operator()

    # create: one PATCH per node carries the policy's labels and taints
    offset = audit_offset(local)
    await create_policy(api, name, hami_policy(pool, onDelete="Delete"))
    await wait_nodes(api, nodes, configured_by(name))
    await eventually(quiet(local, offset), timeout=20, interval=1.0)
    found = writes(local, offset)
    assert node_writes(found) == dict.fromkeys(nodes, 1), found
    assert unneeded(found, name) == [], found
    policy = await request(api, "GET", policy_path(name))
    assert contract.FINALIZER in policy["metadata"]["finalizers"]  # Kopf's, under our name

    # update: a label added, one PATCH per node
    offset = audit_offset(local)
    await patch_spec(api, name, {"nodeLabels": {"team/pool": "a"}})
    await wait_nodes(api, nodes, lambda o: labels(o).get("team/pool") == "a")
    await eventually(quiet(local, offset), timeout=20, interval=1.0)
    found = writes(local, offset)
    assert node_writes(found) == dict.fromkeys(nodes, 1), found
    assert unneeded(found, name) == [], found

    # resume: changed while the operator was down, picked up when it starts again
    operator.stop()
    await patch_spec(api, name, {"nodeLabels": {"team/pool": "b"}})
    offset = audit_offset(local)
    operator = start_operator()
    await wait_nodes(api, nodes, lambda o: labels(o).get("team/pool") == "b")
    await eventually(quiet(local, offset), timeout=20, interval=1.0)
    found = writes(local, offset)
    assert node_writes(found) == dict.fromkeys(nodes, 1), found
    assert unneeded(found, name) == [], found

    # delete (onDelete: Delete): one PATCH per node takes everything off; then the policy goes
    offset = audit_offset(local)
    await request(api, "DELETE", policy_path(name), field_manager=None)
    await wait_nodes(api, nodes, clean)
    await eventually(lambda: gone(api, name), timeout=30)
    found = writes(local, offset)
    assert node_writes(found) == dict.fromkeys(nodes, 1), found
    assert unneeded(found, name) == [], found


async def test_delete_with_retain_leaves_the_nodes_and_releases_the_policy(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    make_nodes: NodeFactory,
    start_operator: Any,
) -> None:
    local = cluster.require_audit()
    pool = unique("keep")
    name = unique("keep")
    nodes = await make_nodes("A100-SXM4-80GB", 2, labels={"test/pool": pool})
    start_operator()
    offset = audit_offset(local)
    await create_policy(api, name, hami_policy(pool, onDelete="Retain"))
    await wait_nodes(api, nodes, configured_by(name))
    await eventually(quiet(local, offset), timeout=20, interval=1.0)
    before = {n: await node(api, n) for n in nodes}

    offset = audit_offset(local)
    await request(api, "DELETE", policy_path(name), field_manager=None)
    await eventually(lambda: gone(api, name), timeout=30)
    found = writes(local, offset)
    assert unneeded(found, name) == [], found
    for n in nodes:
        after = await node(api, n)
        kept = {k: v for k, v in labels(before[n]).items() if k != contract.LABEL_POLICY}
        assert kept.items() <= labels(after).items(), (n, labels(after))
    # Retain's one write per node: the policy's label goes (the node is no policy's), the rest
    # of the configuration stays
    assert node_writes(found) == dict.fromkeys(nodes, 1), found

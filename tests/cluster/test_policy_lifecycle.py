"""A policy's life through Kopf's handlers (controller.handlers), against the real apiserver, the
operator under its ServiceAccount: create, update, delete with `onDelete: Delete` and `Retain`,
and a change made while the operator was down, picked up when it resumes. Each converges with
one node PATCH per idle node (a label and taint change), read from the audit log, and the
operator's only other writes are Events and its writes to the policy itself (status, Kopf's
finalizer and its last-handled-configuration annotation)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, NodeFactory, eventually, patch_spec, unique
from tests.cluster.poolkit import clean, configured_by, hami_policy, labels, node, wait_nodes
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_operator import contract
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi import NotFound, policy_path, request
from vgpu_operator.kubeapi.credentials import Credentials

pytestmark = pytest.mark.cluster

WRITES = {"create", "patch", "update", "delete"}
STARTED: dict[int, str] = {}  # audit offset -> when it was taken (RFC 3339, as the log has it)


def audit_offset(local: LocalCluster) -> int:
    """The audit log's end now, remembered with the time: the apiserver writes its log in
    batches, so events of an earlier test may still come after this offset."""
    offset = local.audit_offset()
    STARTED[offset] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return offset


def writes(local: LocalCluster, offset: int) -> list[tuple[str, str, str]]:
    """(verb, resource[/subresource], name) of each accepted write by the operator since
    `offset`, the Lease left out (it renews on its own clock)."""
    out = []
    for e in local.audit_events(user=OPERATOR_USER, offset=offset):
        if e.get("requestReceivedTimestamp", "") < STARTED.get(offset, ""):
            continue  # an earlier test's, flushed to the log after the offset was taken
        ref = e.get("objectRef") or {}
        resource = "/".join(filter(None, (ref.get("resource"), ref.get("subresource"))))
        if e["verb"] in WRITES and e["responseStatus"]["code"] < 300 and resource != "leases":
            out.append((e["verb"], resource, str(ref.get("name", ""))))
    return out


def node_patches(found: list[tuple[str, str, str]]) -> Counter[str]:
    return Counter(name for verb, resource, name in found if resource == "nodes")


def others(found: list[tuple[str, str, str]], policy: str) -> list[tuple[str, str, str]]:
    """Writes neither to nodes, nor Events, nor to the policy itself (status, Kopf's finalizer
    and annotations): none are expected."""
    return [
        w
        for w in found
        if w[1] not in ("nodes", "events")
        and not (w[1] in ("vgpunodepolicies", "vgpunodepolicies/status") and w[2] == policy)
    ]


async def create(api: client.ApiClient, name: str, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }
    await request(api, "POST", policy_path(), body=body, field_manager=None)


async def gone(api: client.ApiClient, name: str) -> bool:
    try:
        await request(api, "GET", policy_path(name))
    except NotFound:
        return True
    return False


def settled(local: LocalCluster, offset: int) -> Any:
    """No write by the operator since the last look (node PATCHes and status writes over)."""
    seen: list[int] = [-1]

    async def check() -> bool:
        count = len(writes(local, offset))
        quiet = count == seen[0]
        seen[0] = count
        return quiet

    return check


@pytest.fixture
def operator_factory(installed: Credentials) -> Iterator[Any]:
    started: list[OperatorThread] = []

    def start() -> OperatorThread:
        running = OperatorThread(installed, options=ReconcilerOptions(resync_seconds=3600))
        started.append(running.start())
        return running

    yield start
    for running in started:
        running.stop()


async def test_create_update_delete_and_resume_write_each_idle_node_once(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    make_nodes: NodeFactory,
    operator_factory: Any,
) -> None:
    local = cluster.require_audit()
    pool = unique("life")
    name = unique("life")
    nodes = await make_nodes("A100-SXM4-80GB", 3, labels={"test/pool": pool})
    operator = operator_factory()

    # create: one PATCH per node carries the policy's labels and taints
    offset = audit_offset(local)
    await create(api, name, hami_policy(pool, onDelete="Delete"))
    await wait_nodes(api, nodes, configured_by(name))
    await eventually(settled(local, offset), timeout=20, interval=1.0)
    found = writes(local, offset)
    assert node_patches(found) == dict.fromkeys(nodes, 1), found
    assert others(found, name) == [], found
    policy = await request(api, "GET", policy_path(name))
    assert contract.FINALIZER in policy["metadata"]["finalizers"]  # Kopf's, under our name

    # update: a label added, one PATCH per node
    offset = audit_offset(local)
    await patch_spec(api, name, {"nodeLabels": {"team/pool": "a"}})
    await wait_nodes(api, nodes, lambda o: labels(o).get("team/pool") == "a")
    await eventually(settled(local, offset), timeout=20, interval=1.0)
    found = writes(local, offset)
    assert node_patches(found) == dict.fromkeys(nodes, 1), found
    assert others(found, name) == [], found

    # resume: changed while the operator was down, picked up when it starts again
    operator.stop()
    await patch_spec(api, name, {"nodeLabels": {"team/pool": "b"}})
    offset = audit_offset(local)
    operator = operator_factory()
    await wait_nodes(api, nodes, lambda o: labels(o).get("team/pool") == "b")
    await eventually(settled(local, offset), timeout=20, interval=1.0)
    found = writes(local, offset)
    assert node_patches(found) == dict.fromkeys(nodes, 1), found
    assert others(found, name) == [], found

    # delete (onDelete: Delete): one PATCH per node takes everything off; then the policy goes
    offset = audit_offset(local)
    await request(api, "DELETE", policy_path(name), field_manager=None)
    await wait_nodes(api, nodes, clean)
    await eventually(lambda: gone(api, name), timeout=30)
    found = writes(local, offset)
    assert node_patches(found) == dict.fromkeys(nodes, 1), found
    assert others(found, name) == [], found


async def test_delete_with_retain_leaves_the_nodes_and_releases_the_policy(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    make_nodes: NodeFactory,
    operator_factory: Any,
) -> None:
    local = cluster.require_audit()
    pool = unique("keep")
    name = unique("keep")
    nodes = await make_nodes("A100-SXM4-80GB", 2, labels={"test/pool": pool})
    operator_factory()
    offset = audit_offset(local)
    await create(api, name, hami_policy(pool, onDelete="Retain"))
    await wait_nodes(api, nodes, configured_by(name))
    await eventually(settled(local, offset), timeout=20, interval=1.0)
    before = {n: await node(api, n) for n in nodes}

    offset = audit_offset(local)
    await request(api, "DELETE", policy_path(name), field_manager=None)
    await eventually(lambda: gone(api, name), timeout=30)
    found = writes(local, offset)
    assert others(found, name) == [], found
    for n in nodes:
        after = await node(api, n)
        kept = {k: v for k, v in labels(before[n]).items() if k != contract.LABEL_POLICY}
        assert kept.items() <= labels(after).items(), (n, labels(after))
    # Retain's one write per node: the policy's label goes (the node is no policy's), the rest
    # of the configuration stays
    assert node_patches(found) == dict.fromkeys(nodes, 1), found

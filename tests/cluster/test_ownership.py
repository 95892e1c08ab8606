"""Ownership from what the node records, against the real apiserver with the operator under its
ServiceAccount (the pure decisions: tests/unit/core/nodes/test_ownership_records.py and
test_node_adoption.py). Each case: nothing the user wrote is lost, and the audit log shows the
one node write the case needs and no other write but Events and the policy's own.

- `onDelete: Retain` holds when the policy's finalizer was stripped and the policy deleted
  while the operator was down: the node's own record says Retain;
- a label the user had, taken over with `adoptExisting` and then changed by the policy, is put
  back on release; without `adoptExisting` the same-valued label is never the operator's;
- a record written by an earlier release that lists keys this version may no longer own
  (one the operator now reserves, one of Kubernetes' own) is released cleanly: the node is not
  frozen, Kubernetes' key stays, an Event names the node.
"""

from __future__ import annotations

import json
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
from tests.cluster.helpers import (
    ClusterUnderTest,
    NodeFactory,
    event_reasons,
    eventually,
    patch_spec,
    unique,
)
from tests.cluster.poolkit import (
    VGPU_LABEL,
    VGPU_TAINT,
    configured_by,
    hami_policy,
    labels,
    node,
    taints,
    wait_nodes,
)
from vgpu_operator import contract
from vgpu_operator.kubeapi import MERGE_PATCH, node_path, policy_path, request

pytestmark = pytest.mark.cluster

__all__ = ["start_operator"]


async def test_retain_holds_when_the_finalizer_was_stripped(
    cluster: ClusterUnderTest, api: client.ApiClient, make_nodes: NodeFactory, start_operator: Any
) -> None:
    local = cluster.require_audit()
    pool, name = unique("retain"), unique("retain")
    nodes = await make_nodes("A100-SXM4-80GB", 2, labels={"test/pool": pool, "team": "ml"})
    operator = start_operator()
    await create_policy(api, name, hami_policy(pool, onDelete="Retain"))
    await wait_nodes(api, nodes, configured_by(name))
    operator.stop()

    # while the operator is down: the finalizer stripped by hand, the policy deleted (gone)
    strip = {"metadata": {"finalizers": None}}
    await request(api, "PATCH", policy_path(name), body=strip, content_type=MERGE_PATCH)
    await request(api, "DELETE", policy_path(name), field_manager=None)
    await eventually(lambda: gone(api, name), timeout=20)

    offset = audit_offset(local)
    start_operator()
    await eventually(lambda: all_unowned(api, nodes), timeout=30)
    await eventually(quiet(local, offset), timeout=30, interval=1.0)
    for n in nodes:
        obj = await node(api, n)
        assert VGPU_TAINT in taints(obj) and labels(obj).get(VGPU_LABEL) == "true", obj
        assert labels(obj)["team"] == "ml"
    found = writes(local, offset)
    # the one write Retain needs: the policy's label and ownership record go (the node is no
    # policy's, and will not be cleaned), the configuration stays
    assert node_writes(found) == dict.fromkeys(nodes, 1), found
    assert unneeded(found, None) == [], found


async def all_unowned(api: client.ApiClient, nodes: list[str]) -> bool:
    for n in nodes:
        obj = await node(api, n)
        if contract.LABEL_POLICY in labels(obj):
            return False
    return True


async def test_a_users_label_taken_over_comes_back_on_release(
    cluster: ClusterUnderTest, api: client.ApiClient, make_nodes: NodeFactory, start_operator: Any
) -> None:
    local = cluster.require_audit()
    pool, name = unique("adopt"), unique("adopt")
    nodes = await make_nodes("A100-SXM4-80GB", 2, labels={"test/pool": pool, "team": "ml"})
    start_operator()
    offset = audit_offset(local)
    await create_policy(api, name, hami_policy(pool, adoptExisting=True, nodeLabels={"team": "ml"}))
    # (nodeLabels replace the mode's default labels: the policy's own label says it is done)
    await wait_nodes(api, nodes, lambda o: labels(o).get(contract.LABEL_POLICY) == name)
    await patch_spec(api, name, {"nodeLabels": {"team": "ai"}})
    await wait_nodes(api, nodes, lambda o: labels(o).get("team") == "ai")
    await request(api, "DELETE", policy_path(name), field_manager=None)
    await eventually(lambda: gone(api, name), timeout=30)
    await eventually(quiet(local, offset), timeout=30, interval=1.0)
    for n in nodes:
        obj = await node(api, n)
        assert labels(obj)["team"] == "ml", labels(obj)  # the user's value, put back
        assert contract.ANN_OWNED not in (obj["metadata"].get("annotations") or {})
    found = writes(local, offset)
    # configure, change, release: one write each per node
    assert node_writes(found) == dict.fromkeys(nodes, 3), found
    assert unneeded(found, name) == [], found


async def test_a_label_the_user_had_with_the_same_value_is_never_removed(
    cluster: ClusterUnderTest, api: client.ApiClient, make_nodes: NodeFactory, start_operator: Any
) -> None:
    """Without adoptExisting the user's `team=ml` is left theirs: never recorded, never written,
    still there after the policy that asks for the same value is gone."""
    local = cluster.require_audit()
    pool, name = unique("same"), unique("same")
    nodes = await make_nodes("A100-SXM4-80GB", 2, labels={"test/pool": pool, "team": "ml"})
    start_operator()
    offset = audit_offset(local)
    await create_policy(api, name, hami_policy(pool, nodeLabels={"team": "ml"}))
    await wait_nodes(api, nodes, lambda o: labels(o).get(contract.LABEL_POLICY) == name)
    for n in nodes:
        record = (await node(api, n))["metadata"]["annotations"][contract.ANN_OWNED]
        assert "team" not in json.loads(record).get("labels", {}), record
    await request(api, "DELETE", policy_path(name), field_manager=None)
    await eventually(lambda: gone(api, name), timeout=30)
    await eventually(quiet(local, offset), timeout=30, interval=1.0)
    for n in nodes:
        assert labels(await node(api, n))["team"] == "ml"
    found = writes(local, offset)
    assert node_writes(found) == dict.fromkeys(nodes, 2), found  # configure, release
    assert unneeded(found, name) == [], found


async def test_a_record_naming_keys_no_longer_owned_is_released_cleanly(
    cluster: ClusterUnderTest, api: client.ApiClient, make_nodes: NodeFactory, start_operator: Any
) -> None:
    """An earlier release recorded `vgpu.volcano.sh/pool` (a key this version reserves) and
    `node-role.kubernetes.io/gpu` (Kubernetes' own); its policy is gone."""
    local = cluster.require_audit()
    record = {
        "labels": {"vgpu.volcano.sh/pool": "a", "node-role.kubernetes.io/gpu": "true"},
        "taints": [VGPU_TAINT],
        "replaced": {},
    }
    old_labels = {
        "vgpu.volcano.sh/pool": "a",
        "node-role.kubernetes.io/gpu": "true",
        contract.LABEL_POLICY: unique("old"),
        contract.LABEL_MODE: "hami-core",
    }
    [n] = await make_nodes("A100-SXM4-80GB", 1, labels=old_labels, taints=[VGPU_TAINT])
    body = {"metadata": {"annotations": {contract.ANN_OWNED: json.dumps(record)}}}
    await request(api, "PATCH", node_path(n), body=body, content_type=MERGE_PATCH)
    offset = audit_offset(local)
    start_operator()

    async def released() -> bool:
        obj = await node(api, n)
        return contract.ANN_OWNED not in (obj["metadata"].get("annotations") or {})

    await eventually(released, timeout=30)
    await eventually(quiet(local, offset), timeout=30, interval=1.0)
    obj = await node(api, n)
    assert VGPU_TAINT not in taints(obj)  # not frozen: what it still owns is released
    assert "vgpu.volcano.sh/pool" not in labels(obj)
    assert labels(obj)["node-role.kubernetes.io/gpu"] == "true"  # Kubernetes' own, left
    reasons = await event_reasons(api, "default", f"involvedObject.name={n}")
    assert reasons["OwnedEntriesDisowned"] >= 1, reasons
    found = writes(local, offset)
    assert node_writes(found) == {n: 1}, found
    assert unneeded(found, None) == [], found

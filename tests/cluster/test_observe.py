"""`mode: observe` over a full Volcano + HAMi set-up: the operator reads everything and writes
nothing but its own policies' status and Events (the apiserver's audit log), while what enforce
would write, restart or refuse is reported per object (the policy's `Observed` condition, one
Event per object, not one per pass)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, event_reasons, eventually, unique
from tests.cluster.volcano_env import VolcanoEnv, volcano_env
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_operator import contract, kubeapi
from vgpu_operator.kubeapi import policy_path

pytestmark = pytest.mark.cluster

__all__ = ["volcano_env", "volcano_operator"]


def operator_writes(local: LocalCluster, offset: int) -> list[tuple[str, str, str, str]]:
    """(verb, resource, subresource, name) of every accepted write by the operator since
    `offset`, Events included."""
    return [
        (
            e["verb"],
            e["objectRef"]["resource"],
            e["objectRef"].get("subresource", ""),
            e["objectRef"].get("name", ""),
        )
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e["verb"] != "list" and e["responseStatus"]["code"] < 300
    ]


async def observed(api: client.ApiClient, policy: str) -> dict[str, Any]:
    obj = await kubeapi.request(api, "GET", policy_path(policy))
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Observed"), {})


async def events_of(api: client.ApiClient, namespace: str, uid: str) -> Counter[str]:
    return await event_reasons(api, namespace, f"involvedObject.uid={uid}")


async def test_observe_writes_nothing_but_status_and_events_and_says_what_enforce_would(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    volcano_env: VolcanoEnv,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    env = volcano_env
    group = unique("g")
    await env.add_control_node()
    nodes = await env.add_nodes("RTX-4090", 2, gpus=2, released=None, labels={"test/group": group})
    # as the upstream manifests install it: the operator would render the node config, place
    # the plugin and restart what reads it
    await env.install(scheduler_conf="seed002_scheduler.conf", consistent=False)
    await env.wait_running()
    versions = await env.resource_versions()

    offset = local.audit_offset()
    op = volcano_operator("mode: observe")
    policy = await policies(
        "obs", {"nodeSelector": {"matchLabels": {"test/group": group}}, "mode": "hami-core"}
    )

    async def reported() -> bool:
        cond = await observed(api, policy)
        return cond.get("status") == "False" and "ConfigMap" in cond.get("message", "")

    await eventually(reported, timeout=90, interval=0.5)
    cond = await observed(api, policy)
    assert cond["reason"] in ("WouldChange", "WouldRestart")
    assert "enforce would write 2 node(s)" in cond["message"], cond
    node = await kubeapi.request(api, "GET", kubeapi.node_path(nodes[0]))
    node_events = await events_of(api, "default", node["metadata"]["uid"])
    assert node_events["WouldWrite"] == 1, node_events

    # More passes (a node label edit is watched): still nothing written, Events not repeated.
    assert op.controller.volcano is not None
    passes = op.controller.volcano.passes
    await env.patch(kubeapi.node_path(nodes[1]), {"metadata": {"labels": {"test/nudge": "1"}}})

    async def another_pass() -> bool:
        return op.controller.volcano is not None and op.controller.volcano.passes > passes

    await eventually(another_pass, timeout=30, interval=0.2)
    assert await env.resource_versions() == versions
    writes = operator_writes(local, offset)
    allowed = {"events", "vgpunodepolicies/status"}
    # The policies' own writes beside their status are Kopf's bookkeeping (its
    # last-handled-configuration annotation; an earlier test's finalizer, which observe mode
    # needs no more): checked below on the object, no finalizer added.
    others = [
        w
        for w in writes
        if "/".join(filter(None, w[1:3])) not in allowed and w[1] != "vgpunodepolicies"
    ]
    assert others == [], others  # no node, ConfigMap, workload or pod write
    assert any(w[1] == "vgpunodepolicies" for w in writes)
    node = await kubeapi.request(api, "GET", kubeapi.node_path(nodes[0]))
    assert contract.LABEL_POLICY not in node["metadata"].get("labels", {})
    assert (await events_of(api, "default", node["metadata"]["uid"]))["WouldWrite"] == 1
    obj = await kubeapi.request(api, "GET", policy_path(policy))
    assert contract.FINALIZER not in (obj["metadata"].get("finalizers") or [])
    kopf_keys = {k for k in obj["metadata"].get("annotations") or {} if "last-handled" in k}
    assert kopf_keys == {f"{contract.GROUP}/last-handled-configuration"}  # Kopf's, and only it

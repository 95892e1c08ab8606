"""Onto a hand-configured cluster without disturbing it: seed 002's end state (its ConfigMaps in
volcano-system, the count resource renamed to nvidia.com/gpu, nodes labelled and tainted by
hand, the plugin and the scheduler running, GPU pods running), then the README's way (From a
hand-configured cluster): the operator in `observe` mode with the guide's operator config and
policy says enforce would change nothing disruptive; then `enforce`: the audit log shows no
scheduler or plugin restart, no eviction, no pod deleted, and no ConfigMap whose content changes;
no label or taint a person set changes on any node."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import (
    ClusterUnderTest,
    NodeFactory,
    PolicyFactory,
    eventually,
    unique,
)
from tests.cluster.volcano_env import fixture, pod, text
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_devcluster.install import OPERATOR_USER, apply, render_chart
from vgpu_devcluster.pluginsim import PluginSimulator
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path, workload_path
from vgpu_operator.kubeapi import policy_path

pytestmark = pytest.mark.cluster

__all__ = ["volcano_operator"]

NS = "volcano-system"  # seed 002 keeps everything here
DEVICE_CM, NODE_CM, SCHED_CM = (
    "volcano-vgpu-device-config",
    "volcano-vgpu-node-config",
    "volcano-scheduler-configmap",
)
PLUGIN, SCHEDULER = "volcano-device-plugin", "volcano-scheduler"
HAND_LABEL = {"volcano.sh/vgpu.enabled": "true"}
HAND_TAINT = {"key": "volcano.sh/vgpu", "value": "hami", "effect": "NoSchedule"}

# The guide's operator config for seed 002 (README, "From a hand-configured cluster").
SEED002_CONFIG = """
mode: {mode}
resourceNames:
  count: nvidia.com/gpu
deviceConfig:
  namespace: volcano-system
  name: volcano-vgpu-device-config
  key: device-config.yaml
nodeConfig:
  namespace: volcano-system
  name: volcano-vgpu-node-config
  key: config.json
devicePlugin:
  namespace: volcano-system
  name: volcano-device-plugin
  container: volcano-device-plugin
onDelete: Retain
"""
# ...and the chart values that grant the operator those objects (its Role in volcano-system).
SEED002_VALUES = {
    "config.deviceConfig.namespace": NS,
    "config.nodeConfig.namespace": NS,
    "config.devicePlugin.namespace": NS,
}


@dataclass
class Seed002:
    api: client.ApiClient
    pool: str
    nodes: list[str]
    sim: PluginSimulator

    async def pods(self, selector: str) -> dict[str, str]:
        """name -> uid of the live pods in volcano-system matching `selector`."""
        body = await kubeapi.request(
            self.api, "GET", f"/api/v1/namespaces/{NS}/pods", query={"labelSelector": selector}
        )
        return {
            p["metadata"]["name"]: p["metadata"]["uid"]
            for p in body.get("items") or []
            if not p["metadata"].get("deletionTimestamp")
        }

    async def gpu_pods(self) -> dict[str, tuple[str, str]]:
        """name -> (uid, phase) of the seed's GPU pods that are not being deleted."""
        body = await kubeapi.request(self.api, "GET", "/api/v1/namespaces/default/pods")
        return {
            p["metadata"]["name"]: (p["metadata"]["uid"], (p.get("status") or {}).get("phase"))
            for p in body.get("items") or []
            if p["metadata"]["name"].startswith(self.pool)
            and not p["metadata"].get("deletionTimestamp")
        }

    async def configmaps(self) -> dict[str, dict[str, str]]:
        out = {}
        for name in (DEVICE_CM, NODE_CM, SCHED_CM):
            cm = await kubeapi.request(self.api, "GET", configmap_path(NS, name))
            out[name] = dict(cm.get("data") or {})
        return out

    async def node_state(self) -> dict[str, tuple[dict[str, str], list[dict[str, Any]]]]:
        out = {}
        for name in self.nodes:
            node = await kubeapi.request(self.api, "GET", kubeapi.node_path(name))
            labels = dict(node["metadata"].get("labels") or {})
            out[name] = (labels, list(node["spec"].get("taints") or []))
        return out


async def _create(api: client.ApiClient, path: str, body: dict[str, Any]) -> None:
    await kubeapi.request(api, "POST", path, body=body, field_manager="kubectl-create")


@pytest.fixture
async def seed002(api: client.ApiClient, make_nodes: NodeFactory) -> AsyncIterator[Seed002]:
    """Seed 002's cluster as its write-up leaves it (§1.2 labels and taints, §2.1 the plugin and
    its ConfigMaps in volcano-system with --resource-name=nvidia.com/gpu, §2.2 the scheduler's
    deviceshare reading volcano-system, restarted after the edit; §3 GPU pods running)."""
    pool = unique("seed2")
    with contextlib.suppress(kubeapi.Conflict):
        await _create(api, "/api/v1/namespaces", {"metadata": {"name": NS}})
    with contextlib.suppress(kubeapi.Conflict):
        await _create(
            api, f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": PLUGIN}}
        )
    # The operator's Role in volcano-system as the chart renders it for the guide's values (a
    # superset of the default one: also the node config and the plugin DaemonSet there).
    for doc in render_chart("rbac-roles.yaml", values=SEED002_VALUES):
        if doc["metadata"].get("namespace") == NS:
            await apply(api, doc)
    await make_nodes(None, 1, labels={"test/pool": pool, "test/role": "control"}, prefix="s2c")
    nodes = await make_nodes(
        "RTX-4090",
        2,
        gpus=8,
        labels={"test/pool": pool, **HAND_LABEL},
        taints=[HAND_TAINT],
        prefix="s2g",
    )
    for name, data in (
        (DEVICE_CM, {"device-config.yaml": text("seed002_device_config.yaml")}),
        (NODE_CM, {"config.json": text("manifest_node_config.json")}),
        (SCHED_CM, {"volcano-scheduler.conf": text("seed002_scheduler.conf")}),
    ):
        body = {"metadata": {"name": name, "namespace": NS}, "data": data}
        await _create(api, configmap_path(NS), body)
    ds = fixture("seed002_plugin_daemonset.yaml")
    spec = ds["spec"]["template"]["spec"]
    spec["nodeSelector"]["test/pool"] = pool  # (only this test's nodes)
    spec.pop("serviceAccount", None)
    spec["serviceAccountName"] = PLUGIN
    await _create(api, workload_path("DaemonSet", NS), ds)
    dep = fixture("scheduler_deployment.yaml")
    dep["spec"]["replicas"] = 1
    dep["spec"]["template"]["spec"]["nodeSelector"] = {"test/pool": pool, "test/role": "control"}
    await _create(api, workload_path("Deployment", NS), dep)
    sim = PluginSimulator(api, namespace=NS, name=PLUGIN).start()
    env = Seed002(api, pool, nodes, sim)

    async def running() -> bool:
        plugin = await env.pods(f"name={PLUGIN}")
        done = {r.pod_uid for r in sim.registrations}
        sched = await env.pods("app=volcano-scheduler")
        return len(plugin) == 2 and set(plugin.values()) <= done and len(sched) == 1

    await eventually(running, timeout=90, interval=0.3)
    # §3: GPU pods running on both nodes, bound as Volcano binds them (with its device pick)
    for i, name in enumerate(nodes):
        limits = {"nvidia.com/gpu": "1", "volcano.sh/vgpu-memory": "3000"}
        picked = {"volcano.sh/vgpu-ids-new": f"GPU-{name}-0,NVIDIA,3000,0:"}
        body = pod("default", f"{pool}-{i}", node=name, limits=limits, annotations=picked)
        await _create(api, "/api/v1/namespaces/default/pods", body)

    async def gpu_pods_running() -> bool:
        pods = await env.gpu_pods()
        return len(pods) == len(nodes) and all(ph == "Running" for _, ph in pods.values())

    await eventually(gpu_pods_running, timeout=60, interval=0.3)
    try:
        yield env
    finally:
        await sim.stop()
        for path in (
            workload_path("DaemonSet", NS, PLUGIN),
            workload_path("Deployment", NS, SCHEDULER),
            *(configmap_path(NS, n) for n in (DEVICE_CM, NODE_CM, SCHED_CM)),
            *(f"/api/v1/namespaces/default/pods/{pool}-{i}" for i in range(len(nodes))),
        ):
            with contextlib.suppress(kubeapi.NotFound):
                await kubeapi.request(
                    api,
                    "DELETE",
                    path,
                    query={"propagationPolicy": "Background", "gracePeriodSeconds": "0"},
                )


async def condition(api: client.ApiClient, policy: str, kind: str) -> dict[str, Any]:
    obj = await kubeapi.request(api, "GET", policy_path(policy))
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


async def test_seed002_observe_then_enforce_disturbs_nothing(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    seed002: Seed002,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    env = seed002
    before_cms = await env.configmaps()
    before_nodes = await env.node_state()
    plugin_pods = await env.pods(f"name={PLUGIN}")
    scheduler_pods = await env.pods("app=volcano-scheduler")
    gpu_pods = await env.gpu_pods()
    assert len(gpu_pods) == 2

    # 1. observe, with the guide's config and policy (the pool as it is: the hand label selects
    # it; mode hami-core; the default label and taint are exactly the ones set by hand)
    offset = local.audit_offset()
    op = volcano_operator(SEED002_CONFIG.format(mode="observe"))
    selector = {"matchLabels": {**HAND_LABEL, "test/pool": env.pool}}
    policy = await policies("seed002", {"nodeSelector": selector, "mode": "hami-core"})

    async def observed() -> bool:
        c = await condition(api, policy, "Observed")
        return bool(c) and "not read yet" not in c.get("message", "")

    await eventually(observed, timeout=90, interval=0.5)
    said = await condition(api, policy, "Observed")
    # enforce would write the two nodes (the operator's own bookkeeping only), give them
    # explicit node-config entries that say what their plugin uses already, and restart nothing
    message = said["message"]
    assert (
        "enforce would write 2 node(s) (0 refused), 1 Volcano/HAMi object(s) and restart 0"
        in message
    ), said
    assert f"ConfigMap {NS}/{NODE_CM}: rewrite" in message and "node entries" not in message
    assert "taint" not in message and "-label" not in message, said
    assert "DaemonSet" not in message and "Deployment" not in message, said
    writes = [
        e
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e["verb"] != "list"
        and e["responseStatus"]["code"] < 300
        and e["objectRef"]["resource"] != "events"
    ]
    others = [
        (e["verb"], e["objectRef"])
        for e in writes
        if (e["objectRef"]["resource"], e["objectRef"].get("subresource"))
        != ("vgpunodepolicies", "status")
        # the one other write observe makes: releasing its finalizer from a policy being
        # deleted that no node carries (an earlier test's)
        and not (
            e["objectRef"]["resource"] == "vgpunodepolicies" and e["objectRef"]["name"] != policy
        )
    ]
    assert others == [], others
    op.stop()

    # 2. enforce
    offset = local.audit_offset()
    op = volcano_operator(SEED002_CONFIG.format(mode="enforce"), restart_settle_seconds=1.0)

    async def managed() -> bool:
        state = await env.node_state()
        return all(labels.get(contract.LABEL_POLICY) == policy for labels, _ in state.values())

    await eventually(managed, timeout=90, interval=0.5)
    # a few more configuration passes (a node label edit is watched): nothing more follows
    for i in range(3):
        assert op.controller.volcano is not None
        passes = op.controller.volcano.passes
        nudge = {"metadata": {"labels": {"test/nudge": str(i)}}}
        await kubeapi.request(
            api,
            "PATCH",
            kubeapi.node_path(env.nodes[0]),
            body=nudge,
            content_type=kubeapi.MERGE_PATCH,
        )

        async def another_pass(target: int = passes + 1) -> bool:
            return op.controller.volcano is not None and op.controller.volcano.passes >= target

        await eventually(another_pass, timeout=30, interval=0.2)
    await asyncio.sleep(3)  # past restart_settle_seconds: a restart would be due by now

    events = [
        e
        for e in local.audit_events(offset=offset)
        if e["responseStatus"]["code"] < 300 and e["verb"] not in ("list", "get", "watch")
    ]
    mine = [e for e in events if e["user"]["username"] == OPERATOR_USER]
    touched = {
        (e["verb"], e["objectRef"]["resource"], e["objectRef"].get("subresource", ""))
        for e in mine
        if e["objectRef"]["resource"] != "events"
    }
    assert not {t for t in touched if t[1] in ("deployments", "daemonsets", "pods")}, touched
    evictions = [e for e in events if e["objectRef"].get("subresource") == "eviction"]
    assert evictions == []
    # no ConfigMap whose content differs for what reads it: the device config and the
    # scheduler conf are untouched; the node config gains explicit entries for the two nodes
    # that say what their plugins used without one (so no plugin pod is replaced for them)
    after_cms = await env.configmaps()
    assert after_cms[DEVICE_CM] == before_cms[DEVICE_CM]
    assert after_cms[SCHED_CM] == before_cms[SCHED_CM]
    before_entries = json.loads(before_cms[NODE_CM]["config.json"])["nodeconfig"]
    after_entries = json.loads(after_cms[NODE_CM]["config.json"])["nodeconfig"]
    assert after_entries[: len(before_entries)] == before_entries  # the hand-made ones kept
    new_entries = {e["name"]: e for e in after_entries[len(before_entries) :]}
    assert set(new_entries) == set(env.nodes)
    for entry in new_entries.values():  # the seed's flags: --device-split-count=10, defaults else
        assert entry["operatingmode"] == "hami-core" and entry["devicesplitcount"] == 10
        assert entry["devicememoryscaling"] == 1 and entry["devicecorescaling"] == 1
        assert entry["filterdevices"] == {"uuid": [], "index": []}
    # nothing restarted: the same plugin, scheduler pods
    assert await env.pods(f"name={PLUGIN}") == plugin_pods
    assert await env.pods("app=volcano-scheduler") == scheduler_pods
    # no label or taint a person set changed; only the operator's own keys were added
    after_nodes = await env.node_state()
    for name, (labels, taints) in before_nodes.items():
        new_labels, new_taints = after_nodes[name]
        assert new_taints == taints
        assert {k: v for k, v in new_labels.items() if k in labels} == labels
        added = set(new_labels) - set(labels)
        assert all(k.startswith(contract.GROUP + "/") or k == "test/nudge" for k in added), added
    # the hand-set label and taint stay the user's (not in the operator's record)
    for name in env.nodes:
        node = await kubeapi.request(api, "GET", kubeapi.node_path(name))
        record = (node["metadata"].get("annotations") or {}).get(contract.ANN_OWNED, "{}")
        assert "volcano.sh/vgpu" not in record, record
    # the GPU pods run on, untouched
    assert await env.gpu_pods() == gpu_pods

    # 3. leaving (the guide's operator config: onDelete: Retain): the policy goes, the nodes
    # keep everything, the plugin keeps running there
    offset = local.audit_offset()
    await kubeapi.request(api, "DELETE", policy_path(policy))

    async def gone() -> bool:
        try:
            await kubeapi.request(api, "GET", policy_path(policy))
        except kubeapi.NotFound:
            return True
        return False

    await eventually(gone, timeout=60, interval=0.3)
    for name in env.nodes:
        node = await kubeapi.request(api, "GET", kubeapi.node_path(name))
        labels = node["metadata"].get("labels") or {}
        annotations = node["metadata"].get("annotations") or {}
        assert labels["volcano.sh/vgpu.enabled"] == "true"
        assert labels[contract.LABEL_DEVICE_PLUGIN] == "hami"
        assert contract.LABEL_POLICY not in labels
        assert annotations[contract.ANN_RETAINED] == policy
        assert contract.ANN_OWNED not in annotations and contract.ANN_CONFIG in annotations
        assert node["spec"]["taints"] == before_nodes[name][1]
    assert await env.pods(f"name={PLUGIN}") == plugin_pods
    assert await env.gpu_pods() == gpu_pods
    after_cms = await env.configmaps()
    assert after_cms[DEVICE_CM] == before_cms[DEVICE_CM]
    left = {e["name"] for e in json.loads(after_cms[NODE_CM]["config.json"])["nodeconfig"]}
    assert set(env.nodes) <= left  # their entries stay too
    leaving = {
        (e["verb"], e["objectRef"]["resource"])
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e["responseStatus"]["code"] < 300 and e["verb"] != "list"
    }
    assert not {w for w in leaving if w[1] in ("daemonsets", "deployments", "pods")}, leaving

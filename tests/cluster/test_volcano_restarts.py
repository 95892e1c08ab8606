"""Restarts are real: the whole controller (Kopf, the policy reconciler, the configuration
reconciler) with the Volcano scheduler Deployment and the device plugin DaemonSet running on
simulated nodes. A device-config change replaces the scheduler's and every plugin pod once,
however many changes arrive together; a node-config change for one node replaces only that
node's plugin pod; an unrelated change replaces nothing. Counted from the apiserver's audit log
(the operator's writes, and the pods the controllers created) and from the pods' UIDs."""

from __future__ import annotations

import asyncio
import json

import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually, unique
from tests.cluster.volcano_env import (
    DEVICE_CM,
    NODE_CM,
    PLUGIN_DS,
    PLUGIN_NS,
    SCHED_DEPLOY,
    SCHED_NS,
    VolcanoEnv,
    hami,
    json_entries,
    pod,
    steady,
    volcano_env,
)
from tests.cluster.volcano_ops import (
    OperatorFactory,
    operator_writes,
    pods_created,
    volcano_operator,
)
from vgpu_operator import kubeapi
from vgpu_operator.controller.snapshot import configmap_path
from vgpu_operator.kubeapi import MERGE_PATCH, policy_path
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, parse_register

__all__ = ["volcano_env", "volcano_operator"]

SETTLE = 3.0


AT_ONCE = {"maxUnavailable": "100%", "drain": {"enabled": False}}


async def patch_policy(api: client.ApiClient, name: str, spec: dict[str, object]) -> None:
    await kubeapi.request(
        api,
        "PATCH",
        policy_path(name),
        body={"spec": spec},
        content_type=MERGE_PATCH,
        field_manager=None,
    )


def restarts_and_deletes(writes: dict[tuple[str, str, str, str], int]) -> dict[str, int]:
    out = {"deployments": 0, "daemonsets": 0, "pod-deletes": 0}
    for (verb, resource, _ns, _name), n in writes.items():
        if resource in ("deployments", "daemonsets") and verb == "patch":
            out[resource] += n
        if resource == "pods" and verb == "delete":
            out["pod-deletes"] += n
    return out


async def test_device_config_change_restarts_scheduler_and_plugins_once(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    volcano_env: VolcanoEnv,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
    namespace: str,
) -> None:
    local = cluster.require_audit()
    env = volcano_env
    g_hami, g_h100, g_h200 = unique("hami"), unique("h100"), unique("h200")
    await env.add_control_node()
    rtx = await env.add_nodes("RTX-4090", 2, gpus=2, released=None, labels={"test/group": g_hami})
    [h100] = await env.add_nodes(
        "H100-80GB-HBM3", 1, gpus=1, released=None, labels={"test/group": g_h100}
    )
    [h200] = await env.add_nodes("H200", 1, gpus=1, released=None, labels={"test/group": g_h200})
    await env.install()
    # Setting up may itself restart what started before the first render (a pod that started
    # in the same second as it may have read the old content), so the rate limit is short: a
    # restart at set-up must not defer the one this test is about.
    op = volcano_operator(
        "restarts: {minIntervalSeconds: 5}",
        restart_settle_seconds=SETTLE,
        stranded_checks=(2.0, 6.0),
    )
    # Every change of these pools is released at once (safe transitions would otherwise pace
    # them maxUnavailable nodes at a time, each with its own plugin restart): this test is about
    # many changes arriving together.
    pool = await policies("hami", hami(g_hami, rollout=AT_ONCE))
    # The H100 and H200 start in hami-core pools: the operator places the plugin on the nodes
    # its policies serve, so every node has its plugin pod before the change below.
    p_h100 = await policies("h100", hami(g_h100, rollout=AT_ONCE))
    p_h200 = await policies("h200", hami(g_h200, rollout=AT_ONCE))
    await steady(env, [*rtx, h100, h200])

    # Unrelated changes: a policy edit that changes no rendered entry (labels), a ConfigMap
    # nobody reads once, a label on a node. Nothing is replaced.
    offset = local.audit_offset()
    sched, plugins = await env.scheduler_pods(), await env.plugin_pods()
    await patch_policy(api, pool, {"nodeLabels": {"volcano.sh/vgpu.enabled": "true", "tier": "a"}})
    unrelated = configmap_path(PLUGIN_NS, unique("unrelated"))
    await env.put_configmap(PLUGIN_NS, unrelated.rsplit("/", 1)[1], {"a": "1"})
    await env.patch(kubeapi.node_path(env.control), {"metadata": {"labels": {"test/x": "y"}}})

    async def labelled() -> bool:
        nodes = [await kubeapi.request(api, "GET", kubeapi.node_path(n)) for n in rtx]
        return all(n["metadata"]["labels"].get("tier") == "a" for n in nodes)

    await eventually(labelled, timeout=30)
    await asyncio.sleep(SETTLE + 3)
    assert await env.scheduler_pods() == sched
    assert await env.plugin_pods() == plugins
    writes = operator_writes(local, offset)
    assert restarts_and_deletes(writes) == {"deployments": 0, "daemonsets": 0, "pod-deletes": 0}
    assert not [w for w in writes if w[1] == "configmaps"], writes
    assert pods_created(local, offset, PLUGIN_NS) == pods_created(local, offset, SCHED_NS) == 0
    await kubeapi.request(api, "DELETE", unrelated)

    # Positive, in the same cluster: three policy changes at once. Two pools turn to MIG, of
    # models knownMigGeometries does not have yet (the device config changes), and a new split
    # count for the hami-core pool (two node entries change).
    offset = local.audit_offset()
    assert op.controller.volcano is not None
    passes, done_before = op.controller.volcano.passes, len(op.controller.volcano.restarted)
    await asyncio.gather(
        patch_policy(api, p_h100, {"mode": "mig"}),
        patch_policy(api, p_h200, {"mode": "mig"}),
        patch_policy(api, pool, {"hamiCore": {"deviceSplitCount": 5}}),
    )

    async def replaced() -> bool:
        now_sched, now_plugins = await env.scheduler_pods(), await env.plugin_pods()
        return (
            len(now_sched) == 1
            and not now_sched & sched
            and set(now_plugins) == set(plugins)
            and not set(now_plugins.values()) & set(plugins.values())
        )

    await eventually(replaced, timeout=120, interval=0.5)
    # What Volcano's scheduler v1.15.1 was seen doing after a restart (deviceshare skipped its
    # device predicate in its first session, "Devices hamivgpu assertion conversion failed, skip",
    # volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/deviceshare/deviceshare.go): a vGPU pod
    # bound without its device annotations.
    # The passes that follow the restart find it and say so on the pod.
    stranded = pod(namespace, "stranded-0", node=rtx[0], limits={"volcano.sh/vgpu-number": "1"})
    await kubeapi.request(api, "POST", f"/api/v1/namespaces/{namespace}/pods", body=stranded)

    async def reported() -> bool:
        body = await kubeapi.request(
            api,
            "GET",
            f"/api/v1/namespaces/{namespace}/events",
            query={"fieldSelector": "involvedObject.name=stranded-0,type=Warning"},
        )
        return any(e["reason"] == "ConfigStrandedPods" for e in body.get("items") or [])

    await eventually(reported, timeout=30, interval=0.5)
    await steady(env, [*rtx, h100, h200])
    await asyncio.sleep(SETTLE + 3)  # a second restart would have come by now

    writes = operator_writes(local, offset)
    assert restarts_and_deletes(writes) == {"deployments": 1, "daemonsets": 1, "pod-deletes": 0}
    assert writes[("patch", "deployments", SCHED_NS, SCHED_DEPLOY)] == 1
    assert writes[("patch", "daemonsets", PLUGIN_NS, PLUGIN_DS)] == 1
    cm_writes = sum(n for w, n in writes.items() if w[1] == "configmaps")
    assert cm_writes >= 2  # the device config and the node config, maybe in several passes
    assert pods_created(local, offset, PLUGIN_NS) == len(env.nodes)  # one per node, once
    assert pods_created(local, offset, SCHED_NS) == 1
    assert op.controller.volcano.passes > passes
    kinds = [a.kind for a in op.controller.volcano.restarted[done_before:]]
    assert kinds == ["rollout-deployment", "rollout-daemonset"]

    device = await kubeapi.request(api, "GET", configmap_path(PLUGIN_NS, DEVICE_CM))
    nvidia = yaml.safe_load(device["data"]["device-config.yaml"])["nvidia"]
    models = [m for e in nvidia["knownMigGeometries"] for m in e["models"]]
    assert any("H100" in m for m in models) and any("H200" in m for m in models)
    node_cm = await kubeapi.request(api, "GET", configmap_path(PLUGIN_NS, NODE_CM))
    entries = json_entries(node_cm["data"]["config.json"])
    assert entries[h100]["operatingmode"] == entries[h200]["operatingmode"] == "mig"
    assert [entries[n]["devicesplitcount"] for n in rtx] == [5, 5]
    # the new plugin pods read the new entries
    for name in (h100, h200):
        node = await kubeapi.request(api, "GET", kubeapi.node_path(name))
        records = parse_register(node["metadata"]["annotations"][REGISTER_ANNOTATION])
        assert {r.mode for r in records} == {"mig"}


async def test_node_config_change_replaces_only_that_nodes_plugin_pod(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    volcano_env: VolcanoEnv,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    env = volcano_env
    ga, gb = unique("ga"), unique("gb")
    await env.add_control_node()
    [a] = await env.add_nodes("RTX-4090", 1, gpus=2, released=None, labels={"test/group": ga})
    [b] = await env.add_nodes("RTX-4090", 1, gpus=2, released=None, labels={"test/group": gb})
    await env.install()
    # a plugin pod is restarted at most every 5 s (its first restart is part of the setup)
    volcano_operator("restarts: {minIntervalSeconds: 5}", restart_settle_seconds=1.0)
    pa = await policies("pa", hami(ga))
    await policies("pb", hami(gb))
    await steady(env, [a, b])

    offset = local.audit_offset()
    sched, plugins = await env.scheduler_pods(), await env.plugin_pods()
    old_a = {
        p["metadata"]["uid"]: p["metadata"]["name"]
        for p in await env.pods(PLUGIN_NS, f"name={PLUGIN_DS}")
        if p["spec"]["nodeName"] == a
    }
    await patch_policy(api, pa, {"hamiCore": {"deviceSplitCount": 4}})

    async def a_replaced_and_registered() -> bool:
        now = await env.plugin_pods()
        if now.get(a) in (None, plugins[a]):
            return False
        node = await kubeapi.request(api, "GET", kubeapi.node_path(a))
        raw = node["metadata"]["annotations"].get(REGISTER_ANNOTATION, "")
        return {r.count for r in parse_register(raw)} == {4}

    await eventually(a_replaced_and_registered, timeout=60, interval=0.3)
    await asyncio.sleep(3)  # time for anything else to (wrongly) restart

    now = await env.plugin_pods()
    assert now[b] == plugins[b]  # the other node's plugin pod: untouched
    assert await env.scheduler_pods() == sched  # the scheduler: untouched
    writes = operator_writes(local, offset)
    assert restarts_and_deletes(writes) == {"deployments": 0, "daemonsets": 0, "pod-deletes": 1}
    assert writes[("delete", "pods", PLUGIN_NS, old_a[plugins[a]])] == 1
    assert pods_created(local, offset, PLUGIN_NS) == 1
    assert pods_created(local, offset, SCHED_NS) == 0
    node_cm = await kubeapi.request(api, "GET", configmap_path(PLUGIN_NS, NODE_CM))
    entries = json_entries(node_cm["data"]["config.json"])
    assert (entries[a]["devicesplitcount"], entries[b]["devicesplitcount"]) == (4, 10)
    assert json.loads(json.dumps(entries[b]))["operatingmode"] == "hami-core"

"""A pool moved from hami-core to dra and back on the real apiserver (issue 33), under load and
with maxUnavailable 1: each node drained first (its vGPU pods, then its claim pods, evicted),
HAMi's plugin and the DRA driver's kubelet plugin switched by their placement labels (the kubelet
plugin's DaemonSet, as the driver's chart ships it, pinned by the operator to
`vgpu.volcano.sh/device-plugin=dra`), the double of that plugin (vgpu_devcluster.dra_kubelet,
kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1) publishing a node's ResourceSlice while its plugin
pod runs there and withdrawing it when the pod is gone, the real kube-scheduler placing the claim
workload on the dra nodes only; the audit log shows no write the transition does not need
(under Volcano v1.15.1 nothing of the scheduler; under v1.14.4 its predicates argument written
once and the scheduler restarted once)."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.auditkit import audit_offset, unneeded, writes
from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually, patch_spec, unique
from tests.cluster.rbackit import session_values
from tests.cluster.rolloutkit import TransitionCount, config_of, cordoned, gpu_pod, rollout_of
from tests.cluster.volcano_env import (
    NODE_CM,
    PLUGIN_DS,
    SCHED_CM,
    SCHED_DEPLOY,
    SCHED_NS,
    VolcanoEnv,
    steady,
    volcano_env,
)
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from tests.kit.drakit import claim_pod, kubelet_plugin_daemonset
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.dra_kubelet import KubeletPluginSimulator
from vgpu_devcluster.dra_publish import (
    install_device_classes,
    node_slices,
    remove_device_classes,
)
from vgpu_devcluster.install import apply, install_operator_roles, render_chart, wait_granted
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path, workload_path
from vgpu_operator.models.config_dra import DEFAULT_PLUGIN_DAEMONSET as DRA_DS
from vgpu_operator.models.config_dra import DEFAULT_PLUGIN_NAMESPACE as DRA_NS

__all__ = ["volcano_env", "volcano_operator"]

RESOURCE = "/apis/resource.k8s.io/v1"
VGPU = {"volcano.sh/vgpu-number": "1"}


def claim_template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                }
            }
        },
    }


async def nodes_in(api: client.ApiClient, names: list[str], mode: str) -> bool:
    """Every node released in `mode`, out of transition, with its plugin's placement label."""
    plugin = "dra" if mode == "dra" else "hami"
    for name in names:
        obj = await kubeapi.request(api, "GET", kubeapi.node_path(name))
        config = config_of(obj)
        labels = obj["metadata"].get("labels") or {}
        if config is None or config.mode != mode or rollout_of(obj) or cordoned(obj):
            return False
        if labels.get(contract.LABEL_DEVICE_PLUGIN) != plugin:
            return False
    return True


async def wait_gone(api: client.ApiClient, key: str) -> None:
    namespace, _, name = key.partition("/")

    async def gone() -> bool:
        try:
            await kubeapi.request(api, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except kubeapi.NotFound:
            return True
        return False

    await eventually(gone, timeout=30)


async def bound_nodes(api: client.ApiClient, namespace: str, names: list[str]) -> dict[str, str]:
    """pod -> the node kube-scheduler bound it to (pods not bound yet left out)."""
    out = {}
    for name in names:
        obj = await kubeapi.request(api, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        if obj["spec"].get("nodeName"):
            out[name] = obj["spec"]["nodeName"]
    return out


# Volcano v1.14.x runs kube-scheduler's DRA plugin only with the predicates argument (written
# once, the scheduler restarted once, through the deviceshare path); v1.15.x needs nothing
# (volcano-sh/volcano@v1.14.4 and @v1.15.1:pkg/scheduler/plugins/predicates/predicates.go).
@pytest.mark.parametrize("volcano", ["v1.15.1", "v1.14.4"])
async def test_a_busy_pool_moves_to_dra_and_back_through_the_gate(
    volcano: str,
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    namespace: str,
    volcano_env: VolcanoEnv,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
    tmp_path: Path,
) -> None:
    local = cluster.require_audit()
    env = volcano_env
    await env.add_control_node()
    group = unique("dra")
    pool = await env.add_nodes("A100-SXM4-80GB", 3, gpus=2, released=None, labels={"test/g": group})
    [fixed] = await env.add_nodes("A100-SXM4-80GB", 1, gpus=2, released=None)
    await env.install(scheduler_version=volcano)
    # the chart's rights as rendered with a `dra` section: its Role on the kubelet plugin
    # DaemonSet and the ClusterRole's read of DeviceClasses and ResourceSlices (left in place:
    # the session's RBAC check reads the calls against the RBAC installed at its end)
    values = {**session_values(), "config.dra.dynamicMIG": "false"}
    await install_operator_roles(api, values, (DRA_NS,))
    cluster_role = render_chart("clusterrole.yaml", values=values)
    for doc in cluster_role:
        await apply(api, doc)
    await wait_granted(api, [*cluster_role, *render_chart("clusterrolebinding.yaml")])
    volcano_operator("dra: {}\nrestarts: {minIntervalSeconds: 1}\n", restart_settle_seconds=0.5)
    hami = {"mode": "hami-core", "hamiCore": {"deviceSplitCount": 10}}
    rollout = {"maxUnavailable": 1, "drain": {"timeoutSeconds": 60}, "stepTimeoutSeconds": 60}
    selector = {"matchLabels": {"test/g": group}}
    name = await policies("move", {"nodeSelector": selector, **hami, "rollout": rollout})
    only_fixed = {"matchLabels": {"kubernetes.io/hostname": fixed}}
    stay = await policies("stay", {"nodeSelector": only_fixed, **hami})
    await eventually(lambda: nodes_in(api, [*pool, fixed], "hami-core"), timeout=60)
    await steady(env, [*pool, fixed])

    # the driver, as its chart ships it: the operator pins its kubelet plugin to the dra nodes
    await install_device_classes(api)
    body = kubelet_plugin_daemonset()
    for stored in ("resourceVersion", "uid"):  # what the apiserver gives it
        body["metadata"].pop(stored)
    await kubeapi.request(
        api, "POST", workload_path("DaemonSet", DRA_NS), body=body, field_manager=None
    )
    ds_path = workload_path("DaemonSet", DRA_NS, DRA_DS)

    async def placed() -> bool:
        ds = await kubeapi.request(api, "GET", ds_path)
        selector = ds["spec"]["template"]["spec"].get("nodeSelector") or {}
        return selector == {contract.LABEL_DEVICE_PLUGIN: "dra"}

    # what the real kubelet plugin does for its node, for every node its pod runs on: publish
    # the node's slice while the pod runs, withdraw it once the pod is gone
    states = {n: fs.init_state(tmp_path / f"{n}.json", "A100-SXM4-80GB", 2, node=n) for n in pool}
    plugins = KubeletPluginSimulator(api, states.get)
    try:
        await eventually(placed, timeout=30)
        assert await plugins.running_pods() == {}  # no dra node yet
        load = [
            await gpu_pod(api, namespace, f"vgpu-{i}", n, limits=VGPU) for i, n in enumerate(pool)
        ]
        kept = await gpu_pod(api, namespace, "vgpu-fixed", fixed, limits=VGPU)
        template = claim_template("one-gpu")
        await kubeapi.request(
            api,
            "POST",
            f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
            body=template,
            field_manager=None,
        )
        offset = audit_offset(local)
        count = TransitionCount(api, f"test/g={group}")
        claims = [f"claim-{i}" for i in range(3)]
        async with plugins, count.running():
            await patch_spec(api, name, {"mode": "dra", "hamiCore": None})
            await eventually(lambda: nodes_in(api, pool, "dra"), timeout=90, interval=0.5)
            for key in load:  # drained before the release: evicted
                await wait_gone(api, key)

            async def published() -> bool:
                return all([await node_slices(api, n) for n in pool])

            await eventually(published, timeout=30)
            for pod_name in claims:
                body = claim_pod(pod_name, "one-gpu")
                path = f"/api/v1/namespaces/{namespace}/pods"
                await kubeapi.request(api, "POST", path, body=body, field_manager=None)

            async def all_bound() -> bool:
                return len(await bound_nodes(api, namespace, claims)) == len(claims)

            await eventually(all_bound, timeout=60)
            placed_on = await bound_nodes(api, namespace, claims)
            assert set(placed_on.values()) <= set(pool), placed_on  # the dra nodes only

            # and back: the claim pods drained first, HAMi's plugin back, the slices withdrawn
            await patch_spec(api, name, {"mode": "hami-core", "hamiCore": hami["hamiCore"]})
            await eventually(lambda: nodes_in(api, pool, "hami-core"), timeout=90, interval=0.5)
            for pod_name in claims:
                await wait_gone(api, f"{namespace}/{pod_name}")

            async def withdrawn() -> bool:
                return not any([await node_slices(api, n) for n in pool])

            await eventually(withdrawn, timeout=30)
        await steady(env, [*pool, fixed])  # the scheduler's restart (v1.14) behind us too
    finally:
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(api, "DELETE", ds_path)
        await remove_device_classes(api)

    assert count.most == 1, f"maxUnavailable 1: at most one node in transition ({count.most})"
    seen = plugins.seen
    assert seen == set(pool), f"the kubelet plugin ran on {seen}, the dra nodes are {pool}"
    fixed_pod = await kubeapi.request(
        api, "GET", f"/api/v1/namespaces/{namespace}/pods/{kept.split('/')[1]}"
    )
    assert not fixed_pod["metadata"].get("deletionTimestamp")  # the other pool's runs on
    found = writes(local, offset)
    evicted = sorted(n for _, r, n in found if r == "pods/eviction")
    assert evicted == sorted([k.split("/")[1] for k in load] + claims), evicted
    rest = [
        w
        for w in unneeded(found, name)
        if w[1] != "pods/eviction" and not (w[1].startswith("vgpunodepolicies") and w[2] == stay)
    ]
    scheduler = sorted(w for w in rest if w[2] in (SCHED_CM, SCHED_DEPLOY))
    conf = await kubeapi.request(api, "GET", configmap_path(SCHED_NS, SCHED_CM))
    argument = "predicate.DynamicResourceAllocationEnable: true"
    if volcano == "v1.14.4":
        assert scheduler == [
            ("patch", "configmaps", SCHED_CM),
            ("patch", "deployments", SCHED_DEPLOY),
        ], scheduler
        assert argument in conf["data"]["volcano-scheduler.conf"]  # kept after the pool left
    else:
        assert scheduler == [], scheduler
        assert argument not in conf["data"]["volcano-scheduler.conf"]
    rest = [w for w in rest if w not in scheduler]
    # the moving nodes' node-config entries (dropped, then back), HAMi's plugin pods replaced for
    # them, and at most one placement PATCH of each plugin DaemonSet: HAMi's, found exact by
    # chance until the first node left for dra, is pinned then; the kubelet plugin's gains a
    # toleration of the vGPU taint, which the pool's nodes get back with the policy's change
    # while they are still dra nodes
    daemonsets = Counter(n for _, r, n in rest if r == "daemonsets")
    assert daemonsets <= Counter({PLUGIN_DS: 1, DRA_DS: 1}), rest
    rest = [w for w in rest if w[1] != "daemonsets"]
    assert {(v, r) for v, r, _ in rest} <= {("patch", "configmaps"), ("delete", "pods")}, rest
    assert {n for _, r, n in rest if r == "configmaps"} <= {NODE_CM}, rest
    deleted = [n for _, r, n in rest if r == "pods"]
    assert all(n.startswith(PLUGIN_DS) for n in deleted), deleted

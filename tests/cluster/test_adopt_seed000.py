"""Onto seed 000's cluster (Volcano's vGPU guide, v1.11) without disturbing it
(docs/from-a-hand-configured-cluster.md,
seed 000): `deviceshare.VGPUEnable: true` in
volcano-system/volcano-scheduler-configmap, HAMi's upstream plugin manifest in kube-system with
its default names, GPU nodes neither labelled nor tainted, pods asking `volcano.sh/vgpu-number`
and `-memory` running. Observe with the guide's policy, then enforce: nothing restarted, evicted,
relabelled, and no ConfigMap reads differently for its consumer. Then one deliberate change: the
split count, which HAMi's v1.12.0 plugin reads per node from `config.json`, rolls one node at a
time (a plugin-only change: no cordon, no drain, the GPU pods run on)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, patch_spec
from tests.cluster.seedkit import (
    DEVICE_CM,
    DEVICE_KEY,
    NODE_CM,
    NODE_KEY,
    SeedCluster,
    fixture_yaml,
    seed_cluster,
)
from tests.cluster.seedkit_phases import (
    assert_nothing_disruptive,
    assert_own_marks_only,
    assert_undisturbed,
    enforced,
    node_config_reading,
    observed,
    planned,
    plugin_pods_created,
    registering,
    rolls,
    without_entry,
)
from tests.cluster.volcano_env import text
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_operator import contract, kubeapi

pytestmark = pytest.mark.cluster

__all__ = ["seed_cluster", "volcano_operator"]

# The guide's operator config and policy for seed 000 (docs/from-a-hand-configured-cluster.md).
SEED000_CONFIG = "mode: {mode}\nonDelete: Retain\n"
SEED000_POLICY = {
    "nodeSelector": {"matchLabels": {contract.GFD_PRESENT: "true"}},
    "mode": "hami-core",
    "nodeLabels": {},  # the guide labels nothing
    "nodeTaints": [],  # and taints nothing: untolerating pods would stay off the nodes
}
VGPU_POD = {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "3000"}
# The deliberate change (docs/from-a-hand-configured-cluster.md, seed 000): 4 vGPUs per card
# instead of the device config's 10,
# one node at a time. The v1.12.0 plugin reads `devicesplitcount` from the node's config.json
# entry (a plugin <= v1.11 reads only its flag: seed 002's guide).
SPLIT_CHANGE = {"hamiCore": {"deviceSplitCount": 4}, "rollout": {"maxUnavailable": 1}}


async def build_seed000(env: SeedCluster, gpu_nodes: int = 2) -> None:
    """Seed 000 as its write-up leaves it: Volcano installed, the scheduler conf edited
    (`deviceshare.VGPUEnable: true`) and the scheduler restarted; HAMi's plugin manifest applied
    unmodified in kube-system (its ConfigMaps, the v1.12.0 DaemonSet without args); GPU pods
    running, each bound with Volcano's device pick."""
    await env.namespaces()
    await env.add_control_node()
    await env.add_gpu_nodes("RTX-4090", gpu_nodes, gpus=8)
    ns = env.where.plugin
    await env.configmap(ns, DEVICE_CM, {DEVICE_KEY: text("manifest_device_config.yaml")})
    await env.configmap(ns, NODE_CM, {NODE_KEY: text("manifest_node_config.json")})
    await env.scheduler(text("seed000_scheduler.conf"), fixture_yaml("scheduler_deployment.yaml"))
    await env.plugin(fixture_yaml("manifest_plugin_daemonset.yaml"))
    for name in env.nodes:
        picked = {
            "volcano.sh/vgpu-ids-new": f"GPU-{name}-0,NVIDIA,3000,0:GPU-{name}-1,NVIDIA,3000,0:"
        }
        await env.gpu_pod(name, VGPU_POD, picked)
    await env.wait_running()


async def test_seed000_observe_then_enforce_disturbs_nothing(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    seed_cluster: SeedCluster,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    local = cluster.require_audit()
    env = seed_cluster
    await build_seed000(env)
    before = await env.before()

    spec = {
        **SEED000_POLICY,
        "nodeSelector": {"matchLabels": {contract.GFD_PRESENT: "true", "test/pool": env.pool}},
    }
    said = await observed(
        api,
        local,
        volcano_operator,
        SEED000_CONFIG.format(mode="observe"),
        policies,
        {"seed000": spec},
    )
    [(policy, message)] = said.items()
    # the nodes get the operator's bookkeeping only; the node config explicit entries that say
    # what the plugin uses without one (the device config's split count 10); nothing restarts:
    # the plugin DaemonSet already runs exactly on the pool's nodes, so its placement is kept
    assert (
        "enforce would write 2 node(s) (0 refused), 1 Volcano/HAMi object(s) and restart 0"
        in message
    ), message
    assert f"ConfigMap kube-system/{NODE_CM}: rewrite" in message, message
    assert "DaemonSet" not in message and "Deployment" not in message, message
    assert_nothing_disruptive(
        await planned(kubeconfig, SEED000_CONFIG.format(mode="enforce"), policy, tmp_path)
    )

    offset = local.audit_offset()
    op = await enforced(
        api,
        volcano_operator,
        SEED000_CONFIG.format(mode="enforce"),
        env,
        dict.fromkeys(env.nodes, policy),
    )
    assert_undisturbed(
        env, local, offset, before, await env.before(), plugin_defaults=without_entry(10)
    )
    for name in env.nodes:
        node = await kubeapi.request(api, "GET", kubeapi.node_path(name))
        assert_own_marks_only(node)
        assert "volcano.sh/vgpu.enabled" not in node["metadata"]["labels"]

    # a deliberate change: `plan -f` first (README step 4), then the split count rolls
    plan = await planned(
        kubeconfig,
        SEED000_CONFIG.format(mode="enforce"),
        policy,
        tmp_path,
        {**spec, **SPLIT_CHANGE},
    )
    # each node a `restart` change (its plugin pod replaced, no drain), nothing disruptive, no
    # workload patched, no restart but those plugin pods, one node released now
    assert {n["node"]: n["change"] for n in plan["nodes"]} == dict.fromkeys(env.nodes, "restart")
    assert [n["node"] for n in plan["nodes"] if n["disruptive"]] == [], plan["nodes"]
    assert plan["workloads"] == [], plan["workloads"]
    restarted = sorted(r["node"] for r in plan["restarts"] if r["kind"] == "Pod")
    assert restarted == sorted(env.nodes), plan["restarts"]
    assert all(r["kind"] == "Pod" for r in plan["restarts"]), plan["restarts"]
    assert [len(w["nodes"]) for w in plan["rollout"] if w["now"]] == [1], plan["rollout"]
    offset = local.audit_offset()
    plugin_before = await env.plugin_pods()

    seen = await rolls(
        api,
        env,
        env.nodes,
        lambda: patch_spec(api, policy, SPLIT_CHANGE),
        registering(api, env.nodes, 4),
    )
    # one node at a time, each through Verifying only (released, its plugin pod replaced, the
    # new registration checked): no cordon, no drain
    assert seen.most == 1 and not seen.cordoned, seen
    assert set(seen.phases) == set(env.nodes), seen.phases
    assert all(p == ["Verifying"] for p in seen.phases.values()), seen.phases
    after = await env.before()
    assert all(after.plugin[n] != plugin_before[n] for n in env.nodes)
    assert plugin_pods_created(local, offset, env) == len(env.nodes)  # each once
    # nothing else moved: the GPU pods run on (no eviction), the scheduler was not restarted,
    # the device config is as the manifest wrote it; only the node config's entries say 4
    events = [e for e in local.audit_events(offset=offset) if e["responseStatus"]["code"] < 300]
    assert [e for e in events if e["objectRef"].get("subresource") == "eviction"] == []
    assert after.gpu_pods == before.gpu_pods
    assert after.scheduler == before.scheduler
    assert (
        after.configmaps[f"kube-system/{DEVICE_CM}"]
        == before.configmaps[f"kube-system/{DEVICE_CM}"]
    )
    reads = node_config_reading(
        after.configmaps[f"kube-system/{NODE_CM}"][NODE_KEY], env.nodes, without_entry(10)
    )
    assert {r[1] for r in reads.values()} == {4}, reads
    op.stop()

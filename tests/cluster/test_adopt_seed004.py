"""Seed 004's cluster (heterogeneous GPU and Ascend vNPU, HAMi mode) and what the README says
for it ("From a hand-configured cluster", seed 004): its GPU part is seed 001's (hami-core and
dynamic MIG nodes, MIG on by hand, the plugin's instances, running pods); its Ascend part the
nodes labelled `ascend=on` by hand, HAMi's Ascend plugin v1.4.0 manifest with
`kube-system/hami-scheduler-device`, and one scheduler serving both as the write-up's note says:
deviceshare with `VGPUEnable` and `AscendHAMiVNPUEnable`, reading the merged device config.

The merge done (`vnpus:` copied into the device config the scheduler reads, which HAMi's vGPU
plugin reads by its built-in name too), observe with the guide's operator config and policies
says enforce would restart nothing; enforce then restarts, evicts and relabels nothing, runs no
MIG command, and the Ascend nodes' hand-set `ascend=on` is adopted without a write. The Ascend
part of the device config is left alone throughout (observe, plan, enforce and the change):
`hami-scheduler-device` byte for byte as HAMi's manifest applied it, never written, and the
`vnpus:` merged into the device config as Volcano reads it. Then one deliberate change, the MIG
pool to hami-core, rolls through the node's transition phases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.agentkit import Agents, GpuNode, agent_kubeconfig_path, agents, state_of
from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually, patch_spec
from tests.cluster.rolloutkit import config_of, cordoned
from tests.cluster.seedkit import (
    DEVICE_CM,
    DEVICE_KEY,
    HAMI_POLICY,
    MIG_POLICY,
    PLUGIN,
    SeedCluster,
    build_seed001,
    effects_since,
    seed_cluster,
)
from tests.cluster.seedkit_phases import (
    assert_nothing_disruptive,
    assert_own_marks_only,
    assert_undisturbed,
    enforced,
    observed,
    planned,
    plugin_pods_created,
    rolls,
    without_entry,
)
from tests.cluster.volcano_env import text
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_devcluster.upstream import ascend_documents
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path, workload_path
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, parse_register

pytestmark = pytest.mark.cluster

__all__ = ["agent_kubeconfig_path", "agents", "seed_cluster", "volcano_operator"]

# The write-up's two scheduler confs in one (its note: vNPU and vGPU in one Volcano read one
# merged ConfigMap, named here).
SEED004_CONF = """actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: predicates
  - name: deviceshare
    arguments:
      deviceshare.VGPUEnable: true
      deviceshare.AscendHAMiVNPUEnable: true
      deviceshare.SchedulePolicy: binpack
      deviceshare.KnownGeometriesCMNamespace: kube-system
      deviceshare.KnownGeometriesCMName: volcano-vgpu-device-config
"""
# The guide's operator config (docs/from-a-hand-configured-cluster.md, seed 004;
# examples/ascend-vnpu/operator-config).
SEED004_CONFIG = """mode: {mode}
onDelete: Retain
ascendVnpu:
  enabled: true
  schedulerDevice: {{namespace: kube-system, name: hami-scheduler-device, key: device-config.yaml}}
ascendDevicePlugin: {{namespace: kube-system, name: hami-ascend-device-plugin}}
ascendNodeConfig: {{namespace: kube-system, name: hami-device-node-config, key: node-config.yaml}}
"""
ASCEND_POLICY = {"mode": "ascend-vnpu"}
ASCEND_PODS = "app.kubernetes.io/component=hami-ascend-device-plugin"
ASCEND_DEVICE_CM = "hami-scheduler-device"  # HAMi's Ascend plugin reads it (ascend-config)


async def ascend_device_part(env: SeedCluster) -> tuple[dict[str, str], Any]:
    """The Ascend part of the device config: `hami-scheduler-device`'s data as it stands, and
    the `vnpus:` merged into the device config as Volcano's deviceshare parses it."""
    ns = env.where.plugin
    own = await kubeapi.request(env.api, "GET", configmap_path(ns, ASCEND_DEVICE_CM))
    merged = await kubeapi.request(env.api, "GET", configmap_path(ns, DEVICE_CM))
    vnpus = (yaml.safe_load(merged["data"][DEVICE_KEY]) or {}).get("vnpus")
    return dict(own.get("data") or {}), vnpus


def writes_to(local: Any, offset: int, name: str) -> list[tuple[str, str]]:
    """The operator's successful writes to the ConfigMap `name` since `offset`."""
    return [
        (e["verb"], e["objectRef"].get("namespace", ""))
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e["objectRef"]["resource"] == "configmaps"
        and e["objectRef"].get("name") == name
        and e["verb"] not in ("get", "list", "watch")
        and e["responseStatus"]["code"] < 300
    ]


async def build_ascend(env: SeedCluster) -> list[str]:
    """The write-up's HAMi-mode Ascend part: `kubectl label node <n> ascend=on`, HAMi's
    hami-scheduler-device ConfigMap and Ascend plugin manifest applied (its DaemonSet kept to
    this test's nodes). Returns the Ascend nodes."""
    nodes = await env.make_nodes(
        "Ascend910B3", 1, gpus=8, labels={"test/pool": env.pool, "ascend": "on"}, prefix="sa"
    )
    for doc in ascend_documents():
        kind, meta = doc["kind"], doc["metadata"]
        ns = meta.get("namespace")
        if kind == "DaemonSet":
            doc["spec"]["template"]["spec"]["nodeSelector"]["test/pool"] = env.pool
        collection = {
            "ConfigMap": f"/api/v1/namespaces/{ns}/configmaps",
            "ServiceAccount": f"/api/v1/namespaces/{ns}/serviceaccounts",
            "DaemonSet": f"/apis/apps/v1/namespaces/{ns}/daemonsets",
            "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        }[kind]
        await env.create(collection, doc, keep=kind not in ("ConfigMap", "DaemonSet"))
    return nodes


async def test_seed004_observe_then_enforce_disturbs_nothing(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    seed_cluster: SeedCluster,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
    agents: Agents,
    tmp_path: Path,
    kubeconfig: Path,
) -> None:
    local = cluster.require_audit()
    env = seed_cluster
    # the merge, before anything starts: `vnpus:` copied into the device config the scheduler
    # (and HAMi's vGPU plugin, by its built-in name) reads
    [scheduler_device] = [
        d for d in ascend_documents() if d["metadata"]["name"] == "hami-scheduler-device"
    ]
    merged = yaml.safe_load(text("manifest_device_config.yaml"))
    merged["vnpus"] = yaml.safe_load(scheduler_device["data"][DEVICE_KEY])["vnpus"]
    gpus = await build_seed001(
        env,
        tmp_path,
        hami_nodes=1,
        mig_nodes=1,
        scheduler_conf=SEED004_CONF,
        device_config=yaml.safe_dump(merged, sort_keys=False),
        # the merged `vnpus:` is HAMi's wrapper form, which vc-scheduler parses from v1.15.1
        # (volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/vnpu.go); v1.15.0 declares
        # a list and falls back to its built-in defaults (the operator rewrites it as a list
        # there: tests/unit/core/volcano/render/test_render_vnpus_form.py)
        scheduler_version="v1.15.1",
    )
    ascend = await build_ascend(env)

    async def ascend_plugin_runs() -> bool:
        return len(await env.pods("kube-system", ASCEND_PODS)) == len(ascend)

    await eventually(ascend_plugin_runs, timeout=60, interval=0.3)
    before = await env.before()
    ascend_before = await ascend_device_part(env)
    [applied] = [d for d in ascend_documents() if d["metadata"]["name"] == ASCEND_DEVICE_CM]
    assert ascend_before[0] == applied["data"] and ascend_before[1], ascend_before
    start_offset = local.audit_offset()

    def selector(**labels: str) -> dict[str, object]:
        return {"matchLabels": {**labels, "test/pool": env.pool}}

    said = await observed(
        api,
        local,
        volcano_operator,
        SEED004_CONFIG.format(mode="observe"),
        policies,
        {
            "seed004-hami": {**HAMI_POLICY, "nodeSelector": selector(pool="hami")},
            "seed004-mig": {**MIG_POLICY, "nodeSelector": selector(pool="mig")},
            "seed004-ascend": {**ASCEND_POLICY, "nodeSelector": selector(ascend="on")},
        },
    )
    names = list(said)
    for message in said.values():
        # each policy: its nodes' bookkeeping and node-config entries; nothing restarted: the
        # merged device config already has what the operator would mirror into it
        assert "(0 refused)" in message and "restart 0" in message, message
        assert "DaemonSet" not in message and "Deployment" not in message, message
    ascend_said = said[names[2]]
    assert "enforce would write 1 node(s) (0 refused)" in ascend_said, ascend_said
    assert "label ascend=" not in ascend_said, ascend_said  # ascend=on adopted: not written
    assert ASCEND_DEVICE_CM not in " ".join(said.values()), said
    plan = await planned(kubeconfig, SEED004_CONFIG.format(mode="enforce"), names[2], tmp_path)
    assert_nothing_disruptive(plan)
    assert ASCEND_DEVICE_CM not in {c["name"] for c in plan["configMaps"]}, plan["configMaps"]

    offset = local.audit_offset()
    logged = {n: len(f.log()) for n, f in gpus.items()}
    for n, f in gpus.items():
        agents.start(GpuNode(n, f))

    async def agents_done() -> bool:
        return all([await state_of(api, n) == "success" for n in gpus])

    managed = {
        **{n: names[0] for n in env.nodes if n not in gpus},
        **dict.fromkeys(gpus, names[1]),
        **dict.fromkeys(ascend, names[2]),
    }
    ascend_plugin = await env.pods("kube-system", ASCEND_PODS)
    op = await enforced(
        api, volcano_operator, SEED004_CONFIG.format(mode="enforce"), env, managed, agents_done
    )
    for name, fake in gpus.items():
        assert effects_since(fake, logged[name]) == []
    assert_undisturbed(
        env,
        local,
        offset,
        before,
        await env.before(),
        plugin_defaults=without_entry(10),
        ascend_nodes=ascend,
    )
    assert await env.pods("kube-system", ASCEND_PODS) == ascend_plugin
    assert await ascend_device_part(env) == ascend_before
    node = await kubeapi.request(api, "GET", kubeapi.node_path(ascend[0]))
    assert node["metadata"]["labels"]["ascend"] == "on"
    assert_own_marks_only(node)

    # a deliberate change on the MIG pool: MIG off (hami-core), a disruptive transition: the
    # node is cordoned and drained, its plugin paused, the agent turns MIG off (the first MIG
    # commands, only now), its plugin comes back once and registers hami-core
    [mig_node] = gpus
    offset = local.audit_offset()
    plugin_before = await env.plugin_pods()
    change = {
        "mode": "hami-core",
        "mig": None,
        "rollout": {"maxUnavailable": 1, "drain": {"timeoutSeconds": 60}},
    }

    async def mig_off() -> bool:
        obj = await kubeapi.request(api, "GET", kubeapi.node_path(mig_node))
        raw = (obj["metadata"].get("annotations") or {}).get(REGISTER_ANNOTATION, "")
        return (
            (config_of(obj) or NodeConfig(mode="mig")).mode == "hami-core"
            and not cordoned(obj)
            and bool(raw)
            and {g.mode for g in parse_register(raw)} == {"hami-core"}
            and not any(g["mig_current"] for g in gpus[mig_node].load()["gpus"])
        )

    seen = await rolls(api, env, env.nodes, lambda: patch_spec(api, names[1], change), mig_off)
    assert set(seen.phases) == {mig_node} and seen.most == 1, seen
    order = ["Draining", "Pausing", "Applying", "Verifying"]
    phases = seen.phases[mig_node]
    assert phases == sorted(phases, key=order.index) and "Applying" in phases, phases
    assert effects_since(gpus[mig_node], logged[mig_node]) != []  # MIG turned off now
    # pausing one node's plugin needs the nodeSelector the adopted placement did without: the
    # operator patches the DaemonSet once, which replaces every plugin pod once (README)
    after_change = await env.plugin_pods()
    assert all(after_change[n] != plugin_before[n] for n in env.nodes)
    assert plugin_pods_created(local, offset, env) == len(env.nodes)
    patches = [
        e
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e["objectRef"]["resource"] == "daemonsets"
        and e["verb"] == "patch"
        and e["responseStatus"]["code"] < 300
    ]
    assert [e["objectRef"]["name"] for e in patches] == [PLUGIN], patches
    ds = await kubeapi.request(api, "GET", workload_path("DaemonSet", "kube-system", PLUGIN))
    selector = ds["spec"]["template"]["spec"]["nodeSelector"]
    assert selector[contract.LABEL_DEVICE_PLUGIN] == "hami", selector
    # the Ascend part is as the seed left it, and was never written
    assert await ascend_device_part(env) == ascend_before
    assert writes_to(local, start_offset, ASCEND_DEVICE_CM) == []
    op.stop()

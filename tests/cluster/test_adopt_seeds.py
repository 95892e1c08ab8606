"""Onto seed 002's hand-configured cluster without disturbing it
(docs/from-a-hand-configured-cluster.md,
seed 002): its ConfigMaps in volcano-system, the count resource renamed
to nvidia.com/gpu, nodes labelled and tainted by hand, the v1.11.0 plugin and the scheduler
running, GPU pods running. The operator in `observe` mode with the guide's operator config and
policy says enforce would change nothing disruptive and writes nothing; `enforce` then restarts,
evicts and relabels nothing, and no ConfigMap reads differently for its consumer. Then one
deliberate change, and leaving with `onDelete: Retain`."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import (
    ClusterUnderTest,
    PolicyFactory,
    event_reasons,
    eventually,
    patch_spec,
)
from tests.cluster.seedkit import (
    DEVICE_CM,
    DEVICE_KEY,
    NODE_CM,
    NODE_KEY,
    SeedCluster,
    Where,
    fixture_yaml,
    seed_cluster,
)
from tests.cluster.seedkit_phases import (
    assert_nothing_disruptive,
    assert_own_marks_only,
    assert_undisturbed,
    enforced,
    observed,
    planned,
    rolls,
    without_entry,
)
from tests.cluster.volcano_env import text
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_operator import contract, kubeapi
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.kubeapi import policy_path
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, parse_register

pytestmark = pytest.mark.cluster

__all__ = ["seed_cluster", "volcano_operator"]

NS = "volcano-system"  # seed 002 keeps everything here
HAND_LABEL = {"volcano.sh/vgpu.enabled": "true"}
HAND_TAINT = {"key": "volcano.sh/vgpu", "value": "hami", "effect": "NoSchedule"}

# The guide's operator config for seed 002 (docs/from-a-hand-configured-cluster.md).
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


SPLIT_5 = {"hamiCore": {"deviceSplitCount": 5}, "rollout": {"stepTimeoutSeconds": 10}}


@dataclass
class Refused:
    """Whether a policy's status says its change is refused (at `generation`)."""

    api: client.ApiClient
    name: str
    generation: int

    async def stalled(self) -> dict[str, Any]:
        """The policy's Stalled condition ({} while it has none)."""
        got = await kubeapi.request(self.api, "GET", policy_path(self.name))
        conditions = (got.get("status") or {}).get("conditions") or []
        return next((dict(c) for c in conditions if c["type"] == "Stalled"), {})

    async def __call__(self) -> bool:
        c = await self.stalled()
        return c.get("reason") == "PluginIgnoresNodeValues" and (
            c.get("observedGeneration") == self.generation
        )


async def events_of(api: client.ApiClient, namespace: str, uid: str) -> Counter[str]:
    return await event_reasons(api, namespace, f"involvedObject.uid={uid}")


async def build_seed002(env: SeedCluster) -> None:
    """Seed 002's cluster as its manual procedure leaves it (docs/from-a-hand-configured-cluster.md,
    seed 002): nodes labelled and tainted by hand; the plugin and its ConfigMaps in
    volcano-system with --resource-name=nvidia.com/gpu; the scheduler's deviceshare reading
    volcano-system, restarted after the edit; GPU pods running."""
    env.where = Where(scheduler=NS, plugin=NS)
    await env.namespaces(grant_values=SEED002_VALUES)
    await env.add_control_node()
    await env.add_gpu_nodes("RTX-4090", 2, gpus=8, labels=HAND_LABEL, taints=[HAND_TAINT])
    await env.configmap(NS, DEVICE_CM, {DEVICE_KEY: text("seed002_device_config.yaml")})
    await env.configmap(NS, NODE_CM, {NODE_KEY: text("manifest_node_config.json")})
    await env.scheduler(text("seed002_scheduler.conf"), fixture_yaml("scheduler_deployment.yaml"))
    await env.plugin(fixture_yaml("seed002_plugin_daemonset.yaml"))
    for name in env.nodes:
        limits = {"nvidia.com/gpu": "1", "volcano.sh/vgpu-memory": "3000"}
        picked = {"volcano.sh/vgpu-ids-new": f"GPU-{name}-0,NVIDIA,3000,0:"}
        await env.gpu_pod(name, limits, picked)
    await env.wait_running()


async def test_seed002_observe_then_enforce_disturbs_nothing(
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
    await build_seed002(env)
    before = await env.before()
    assert len(before.gpu_pods) == 2

    # 1. observe, with the guide's config and policy (the pool as it is: the hand label selects
    # it; mode hami-core; the default label and taint are exactly the ones set by hand)
    selector = {"matchLabels": {**HAND_LABEL, "test/pool": env.pool}}
    spec = {"nodeSelector": selector, "mode": "hami-core", "rollout": {"maxUnavailable": 1}}
    said = await observed(
        api,
        local,
        volcano_operator,
        SEED002_CONFIG.format(mode="observe"),
        policies,
        {"seed002": spec},
    )
    [(policy, message)] = said.items()
    # enforce would write the two nodes (the operator's own bookkeeping only), give them
    # explicit node-config entries that say what their plugin uses already, and restart nothing
    assert (
        "enforce would write 2 node(s) (0 refused), 1 Volcano/HAMi object(s) and restart 0"
        in message
    ), message
    assert f"ConfigMap {NS}/{NODE_CM}: rewrite" in message and "node entries" not in message
    assert "taint" not in message and "-label" not in message, message
    assert "DaemonSet" not in message and "Deployment" not in message, message
    # 2. plan, with the config enforce will run with: nothing disruptive
    assert_nothing_disruptive(
        await planned(kubeconfig, SEED002_CONFIG.format(mode="enforce"), policy, tmp_path)
    )

    # 2. enforce
    offset = local.audit_offset()
    op = await enforced(
        api,
        volcano_operator,
        SEED002_CONFIG.format(mode="enforce"),
        env,
        dict.fromkeys(env.nodes, policy),
    )
    # the seed's plugin flags: --device-split-count=10, the defaults else
    assert_undisturbed(
        env, local, offset, before, await env.before(), plugin_defaults=without_entry(10)
    )
    # the node config gained explicit entries for the two nodes, the hand-made one kept
    cm = await kubeapi.request(api, "GET", f"/api/v1/namespaces/{NS}/configmaps/{NODE_CM}")
    entries = json.loads(cm["data"][NODE_KEY])["nodeconfig"]
    assert entries[0] == json.loads(before.configmaps[f"{NS}/{NODE_CM}"][NODE_KEY])["nodeconfig"][0]
    assert {e["name"] for e in entries[1:]} == set(env.nodes)
    for name in env.nodes:  # the hand-set label and taint stay the user's
        assert_own_marks_only(await kubeapi.request(api, "GET", kubeapi.node_path(name)))

    # 3. a deliberate change the v1.11.0 plugin cannot apply: a split count of 5. It takes the
    # split count from its flag only (Project-HAMi/volcano-vgpu-device-plugin@v1.11.0: the
    # config.json entry sets the mode), so the operator refuses the change up front: `plan` says
    # so, and applied, no node is taken, cordoned or has its plugin pod replaced; the policy is
    # Stalled naming the field, what the plugin uses and the fix, with one Warning Event.
    live = await kubeapi.request(api, "GET", policy_path(policy))
    rollout = {**live["spec"]["rollout"], **SPLIT_5["rollout"]}
    changed = {**live["spec"], **SPLIT_5, "rollout": rollout}
    enforce_config = SEED002_CONFIG.format(mode="enforce")
    said = await planned(kubeconfig, enforce_config, policy, tmp_path, changed)
    notes = " ".join(said["notes"])
    assert f"policy {policy}: the change is refused" in notes, said
    assert "spec.hamiCore.deviceSplitCount: 5 cannot take effect" in notes, notes
    assert "--device-split-count=10" in notes and "v1.12.0" in notes, notes
    assert not [n for n in said["nodes"] if n.get("patch")] and not said["rollout"], said
    plugin_before = await env.plugin_pods()
    stalled = Refused(api, policy, generation=live["metadata"]["generation"] + 1)
    seen = await rolls(
        api, env, env.nodes, lambda: patch_spec(api, policy, SPLIT_5), stalled, settle=False
    )
    assert seen.most == 0 and not seen.cordoned and not seen.phases, seen
    assert await env.plugin_pods() == plugin_before
    condition = await stalled.stalled()
    assert "spec.hamiCore.deviceSplitCount" in condition["message"], condition
    assert "--device-split-count=10" in condition["message"], condition
    assert "upgrade the device plugin to v1.12.0" in condition["message"], condition
    uid = live["metadata"]["uid"]

    async def warned() -> bool:
        return (await events_of(api, "default", uid))["PluginIgnoresNodeValues"] == 1

    await eventually(warned, timeout=10, interval=0.3)

    # ...and the fix it names: the flag's value, 10. The policy is no longer refused and the
    # change rolls as "Safe transitions" says for what the plugin reads: one node at a time
    # (maxUnavailable 1), no cordon, each node's registration verified (still 10 per GPU); the
    # node-config entries already said 10, so no plugin pod is replaced for it.
    ten = {"hamiCore": {"deviceSplitCount": 10}}

    async def converged() -> bool:
        for name in env.nodes:
            facts = node_facts(await kubeapi.request(api, "GET", kubeapi.node_path(name)))
            hc = facts.config.hami_core if facts.config is not None else None
            if (
                hc is None
                or hc.device_split_count != 10
                or contract.ANN_ROLLOUT in facts.annotations
            ):
                return False
        return True

    seen = await rolls(api, env, env.nodes, lambda: patch_spec(api, policy, ten), converged)
    assert seen.most == 1 and not seen.cordoned, seen
    assert set(seen.phases) == set(env.nodes), seen
    assert await env.plugin_pods() == plugin_before
    for name in env.nodes:
        node = await kubeapi.request(api, "GET", kubeapi.node_path(name))
        registered = parse_register(node["metadata"]["annotations"][REGISTER_ANNOTATION])
        assert {g.count for g in registered} == {10}
    condition = await stalled.stalled()
    assert condition["status"] == "False", condition

    # 4. leaving (the guide's operator config: onDelete: Retain): the policy goes, the nodes
    # keep everything, the plugin keeps running there
    offset = local.audit_offset()
    plugin_pods = await env.plugin_pods()
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
        assert node["spec"]["taints"] == before.nodes[name][1]
    assert await env.plugin_pods() == plugin_pods
    assert await env.gpu_pods() == before.gpu_pods
    cms = await env.configmaps()
    assert cms[f"{NS}/{DEVICE_CM}"] == before.configmaps[f"{NS}/{DEVICE_CM}"]
    left = {e["name"] for e in json.loads(cms[f"{NS}/{NODE_CM}"][NODE_KEY])["nodeconfig"]}
    assert set(env.nodes) <= left  # their entries stay too
    leaving = {
        (e["verb"], e["objectRef"]["resource"])
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e["responseStatus"]["code"] < 300 and e["verb"] != "list"
    }
    assert not {w for w in leaving if w[1] in ("daemonsets", "deployments", "pods")}, leaving
    op.stop()

"""Onto seed 001's cluster (HAMi-core and dynamic MIG) without disturbing it (README, "From a
hand-configured cluster", seed 001): seed 000's set-up, plus MIG turned on by hand
(`nvidia-smi -mig 1`) on the A100 nodes, their node-config entries set to `operatingmode: mig`
as HAMi's config doc says, the instances HAMi's plugin made for the running MIG pods, and pods
choosing with `volcano.sh/vgpu-mode`. The GPUs are the fake nvidia-smi's: it reports MIG mode on
and the instances as the seed left them, and its call log shows every command.

Observe with the guide's two policies, then enforce with the node agents running on the MIG
nodes: no MIG command, nothing restarted, evicted or relabelled, no ConfigMap read differently.
Then one deliberate change (the hami-core pool's split count) rolls node by node."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from tests.cluster.agentkit import Agents, GpuNode, agent_kubeconfig_path, agents, state_of
from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually, patch_spec
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
    observed,
    planned,
    plugin_pods_created,
    registering,
    rolls,
    without_entry,
)
from tests.cluster.volcano_env import text
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.agentproc import FakeGpus, fake_model
from vgpu_operator import kubeapi

pytestmark = pytest.mark.cluster

__all__ = ["agent_kubeconfig_path", "agents", "seed_cluster", "volcano_operator"]

SEED001_CONFIG = "mode: {mode}\nonDelete: Retain\n"
# One policy per kind of node, on the labels the person set first (README, seed 001).
HAMI_POLICY = {"mode": "hami-core", "nodeLabels": {}, "nodeTaints": []}
MIG_POLICY = {"mode": "mig", "mig": {"partitioning": "dynamic"}, "nodeLabels": {}, "nodeTaints": []}
MIG_MODEL = "A100-SXM4-80GB"
PROFILE_1G_10GB = "19"  # the A100 80GB's 1g.10gb GPU instance profile


def effects_since(gpus: FakeGpus, start: int) -> list[dict[str, object]]:
    """The fake nvidia-smi's calls since entry `start` that changed the hardware."""
    return [e for e in gpus.log()[start:] if e.get("effects")]


async def build_seed001(
    env: SeedCluster,
    workdir: Path,
    hami_nodes: int = 2,
    mig_nodes: int = 2,
    scheduler_conf: str | None = None,
    device_config: str | None = None,
) -> dict[str, FakeGpus]:
    """Seed 001's end state (`scheduler_conf`, `device_config`: other texts, seed 004's);
    returns the MIG nodes' fake GPUs."""
    await env.namespaces()
    await env.add_control_node()
    hami = await env.add_gpu_nodes("RTX-4090", hami_nodes, gpus=4, labels={"pool": "hami"})
    mig = await env.add_gpu_nodes(MIG_MODEL, mig_nodes, gpus=2, labels={"pool": "mig"})
    gpus: dict[str, FakeGpus] = {}
    for name in mig:  # `sudo nvidia-smi -mig 1` on each MIG node
        gpus[name] = FakeGpus.create(workdir / name, name, fake_model(MIG_MODEL), 2, mig=True)
    ns = env.where.plugin
    device = device_config or text("manifest_device_config.yaml")
    await env.configmap(ns, DEVICE_CM, {DEVICE_KEY: device})
    # HAMi's doc/config.md: the MIG nodes' entries say `operatingmode: mig`
    node_config = text("manifest_node_config.json").rstrip().removesuffix("}").rstrip()
    node_config = node_config.removesuffix("]").rstrip()
    extra = "".join(f',\n        {{"name": "{n}", "operatingmode": "mig"}}' for n in mig)
    await env.configmap(ns, NODE_CM, {NODE_KEY: f"{node_config}{extra}\n    ]\n}}\n"})
    conf = scheduler_conf or text("seed001_scheduler.conf")
    await env.scheduler(conf, fixture_yaml("scheduler_deployment.yaml"))
    await env.plugin(fixture_yaml("manifest_plugin_daemonset.yaml"))
    for name in hami:
        await env.gpu_pod(
            name,
            {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"},
            {
                "volcano.sh/vgpu-mode": "hami-core",
                "volcano.sh/vgpu-ids-new": f"GPU-{name}-0,NVIDIA,3000,0:",
            },
        )
    for name, fake in gpus.items():
        # HAMi's plugin carved the instance for the pod at allocation time (nvidia-mig-parted)
        env_vars = {**os.environ, fs.ENV_STATE: str(fake.state)}
        subprocess.run(
            [str(fake.binary), "mig", "-i", "0", "-cgi", PROFILE_1G_10GB, "-C"],
            env=env_vars,
            check=True,
            capture_output=True,
        )
        await env.gpu_pod(
            name,
            {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"},
            {"volcano.sh/vgpu-mode": "mig"},
        )
    await env.wait_running()
    return gpus


async def test_seed001_observe_then_enforce_runs_no_mig_command_then_a_split_count_rolls(
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
    gpus = await build_seed001(env, tmp_path)
    hami = [n for n in env.nodes if n not in gpus]
    before = await env.before()
    layouts = {n: [g["gis"] for g in f.load()["gpus"]] for n, f in gpus.items()}
    assert all(len(gis[0]) == 1 and gis[1] == [] for gis in layouts.values()), layouts

    def selector(kind: str) -> dict[str, object]:
        return {"matchLabels": {"pool": kind, "test/pool": env.pool}}

    said = await observed(
        api,
        local,
        volcano_operator,
        SEED001_CONFIG.format(mode="observe"),
        policies,
        {
            "seed001-hami": {**HAMI_POLICY, "nodeSelector": selector("hami")},
            "seed001-mig": {**MIG_POLICY, "nodeSelector": selector("mig")},
        },
    )
    (hami_policy, hami_said), (mig_policy, mig_said) = said.items()
    # each policy: its nodes' bookkeeping, the node config's explicit entries (one object for
    # both: each policy lists it), no restart: the MIG nodes' hand-written entries already say
    # `operatingmode: mig`, which is what their plugins read
    for message in (hami_said, mig_said):
        assert "enforce would write 2 node(s) (0 refused)" in message, message
        assert "restart 0" in message, message
        assert "DaemonSet" not in message and "Deployment" not in message, message
    for name in (hami_policy, mig_policy):
        enforce_config = SEED001_CONFIG.format(mode="enforce")
        assert_nothing_disruptive(await planned(kubeconfig, enforce_config, name, tmp_path))

    # enforce, with the node agents on the MIG nodes (README: agent.enabled=true for MIG pools)
    offset = local.audit_offset()
    logged = {n: len(f.log()) for n, f in gpus.items()}
    running = {n: agents.start(GpuNode(n, f)) for n, f in gpus.items()}

    async def agents_done() -> bool:
        return all([await state_of(api, n) == "success" for n in running])

    managed = {**dict.fromkeys(hami, hami_policy), **dict.fromkeys(gpus, mig_policy)}
    op = await enforced(
        api, volcano_operator, SEED001_CONFIG.format(mode="enforce"), env, managed, agents_done
    )
    # no MIG command: MIG mode on and the plugin's instances are kept as they are
    for name, fake in gpus.items():
        assert effects_since(fake, logged[name]) == [], (name, running[name].output()[-2000:])
        assert [g["gis"] for g in fake.load()["gpus"]] == layouts[name]
        assert all(g["mig_current"] for g in fake.load()["gpus"])
    assert_undisturbed(
        env, local, offset, before, await env.before(), plugin_defaults=without_entry(10)
    )
    for name in env.nodes:
        assert_own_marks_only(await kubeapi.request(api, "GET", kubeapi.node_path(name)))

    # a deliberate change: the hami-core pool's split count, 10 -> 5, one node at a time
    offset = local.audit_offset()
    plugin_before = await env.plugin_pods()

    seen = await rolls(
        api,
        env,
        env.nodes,
        lambda: patch_spec(
            api,
            hami_policy,
            {"hamiCore": {"deviceSplitCount": 5}, "rollout": {"maxUnavailable": 1}},
        ),
        registering(api, hami, 5),
    )
    assert seen.most == 1 and not seen.cordoned, seen  # a plugin-only change: no cordon
    assert set(seen.phases) == set(hami), seen.phases  # the MIG pool is not touched
    assert all(p == ["Verifying"] for p in seen.phases.values()), seen.phases
    after = await env.plugin_pods()
    assert all(after[n] != plugin_before[n] for n in hami)
    assert all(after[n] == plugin_before[n] for n in gpus)
    assert plugin_pods_created(local, offset, env) == len(hami)  # each once
    for name, fake in gpus.items():
        assert effects_since(fake, logged[name]) == []
    op.stop()

    async def gpu_pods_run_on() -> bool:
        return await env.gpu_pods() == before.gpu_pods

    await eventually(gpu_pods_run_on, timeout=5)

"""Onto seed 001's cluster (HAMi-core and dynamic MIG) without disturbing it
(docs/from-a-hand-configured-cluster.md,
seed 001): seed 000's set-up, plus MIG turned on by hand
(`nvidia-smi -mig 1`) on the A100 nodes, their node-config entries set to `operatingmode: mig`
as HAMi's config doc says, the instances HAMi's plugin made for the running MIG pods, and pods
choosing with `volcano.sh/vgpu-mode`. The GPUs are the fake nvidia-smi's: it reports MIG mode on
and the instances as the seed left them, and its call log shows every command.

Observe with the guide's two policies, then enforce with the node agents running on the MIG
nodes: no MIG command, nothing restarted, evicted or relabelled, no ConfigMap read differently.
Then one deliberate change (the hami-core pool's split count) rolls node by node."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from tests.cluster.agentkit import Agents, GpuNode, agent_kubeconfig_path, agents, state_of
from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually, patch_spec
from tests.cluster.seedkit import (
    HAMI_POLICY,
    MIG_POLICY,
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
    registering,
    rolls,
    without_entry,
)
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_operator import kubeapi

pytestmark = pytest.mark.cluster

__all__ = ["agent_kubeconfig_path", "agents", "seed_cluster", "volcano_operator"]

SEED001_CONFIG = "mode: {mode}\nonDelete: Retain\n"


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

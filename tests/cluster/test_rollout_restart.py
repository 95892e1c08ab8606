"""Safe transitions survive the operator's death: `vgpu-operator run` as a process, killed with
SIGKILL right after every step it writes (cordon, pause, release, resume) and started again. The
rollout completes from the records on the nodes; no node is left cordoned or paused, and none is
released twice: the node agents' simulated `nvidia-smi` logs show MIG turned on once per node.
The HAMi device plugin runs there too (its DaemonSet real, the process simulated): each node's
plugin pod is replaced exactly once, and the new one reads the node-config entry of the new
mode (its registration says `mig`)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from kubernetes_asyncio import client

from tests.cluster.agentkit import Agents, agent_kubeconfig_path, agents, get_node
from tests.cluster.helpers import PolicyFactory, eventually, patch_spec, unique
from tests.cluster.rolloutkit import config_of, cordoned, gpu_pod, pool_spec, rollout_of
from tests.cluster.test_leader_processes import _die_with_parent
from tests.cluster.test_volcano_restarts import steady
from tests.cluster.volcano_env import VolcanoEnv, volcano_env
from vgpu_operator import contract
from vgpu_operator.kubeapi.credentials import Credentials

__all__ = ["agent_kubeconfig_path", "agents", "volcano_env"]  # fixtures

DCGM = "nvidia.com/gpu.deploy.dcgm-exporter"  # a GPU Operator operand the rollout pauses


def start_operator(kubeconfig: str, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "vgpu_operator.cli", "run", f"--kubeconfig={kubeconfig}"]
    config = log.parent / "operator-config.yaml"
    if config.exists():
        argv.append(f"--config={config}")
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


def mig_on_calls(log: list[dict[str, object]]) -> int:
    return sum(1 for e in log if e.get("argv", [])[-2:] == ["-mig", "1"] and e.get("rc") == 0)  # type: ignore[index]


async def test_sigkill_after_every_step_and_the_rollout_still_completes_once_per_node(
    api: client.ApiClient,
    installed: Credentials,
    namespace: str,
    policies: PolicyFactory,
    agents: Agents,
    volcano_env: VolcanoEnv,
    tmp_path: Path,
) -> None:
    assert installed.kubeconfig is not None
    env = volcano_env
    pool = unique("pool")
    await env.add_control_node()  # the scheduler's
    labels = {"test/pool": env.pool, "test/kill": pool, DCGM: "true"}
    gpu_nodes = [await agents.node("A100-SXM4-80GB", 1, labels=labels) for _ in range(2)]
    for n in gpu_nodes:
        agents.start(n)
    names = [n.name for n in gpu_nodes]
    env.nodes.update(dict.fromkeys(names, None))  # the pool's GPU nodes, not configured yet
    # the DaemonSet placed as the operator places it (on the nodes labelled for HAMi's plugin):
    # its pods come with the nodes' first configuration, no placement rollout to wait out
    plugin = env.plugin_daemonset()
    plugin["spec"]["template"]["spec"]["nodeSelector"][contract.LABEL_DEVICE_PLUGIN] = "hami"
    await env.install(plugin=plugin)
    assert env.sim is not None
    log = tmp_path / "operator.log"
    # restarts (the DaemonSet's placement patch among them) not held back for minutes
    (tmp_path / "operator-config.yaml").write_text("restarts: {minIntervalSeconds: 1}\n")
    proc = start_operator(installed.kubeconfig, log)
    kills = 0
    try:
        rollout = {"maxUnavailable": 1, "drain": {"timeoutSeconds": 60}}
        spec = {**pool_spec(pool, **rollout), "nodeSelector": {"matchLabels": {"test/kill": pool}}}
        name = await policies("kill", spec)

        async def configured() -> bool:
            objs = [await get_node(api, n) for n in names]
            return all(
                (c := config_of(o)) is not None
                and c.mode == "hami-core"
                and (o["metadata"].get("labels") or {}).get(contract.LABEL_STATE) == "success"
                for o in objs
            )

        await eventually(configured, timeout=60)
        await steady(env, names)  # the plugin pods run and registered hami-core
        before = await env.plugin_pods()
        assert set(before) == set(names), before
        mark, gone = len(env.sim.registrations), len(env.sim.withdrawn)
        for i, node in enumerate(names):
            await gpu_pod(api, namespace, f"train-{i}", node)
        await patch_spec(api, name, {"mode": "mig", "hamiCore": None, "mig": {}})

        seen: set[tuple[str, str]] = set()
        for _ in range(600):
            objs = [await get_node(api, n) for n in names]
            steps = {(o["metadata"]["name"], r.phase) for o in objs if (r := rollout_of(o))}
            if steps - seen:  # a step was just written: kill the operator now
                seen |= steps
                proc.send_signal(signal.SIGKILL)
                assert proc.wait(10) == -signal.SIGKILL
                kills += 1
                proc = start_operator(installed.kubeconfig, log)
            done = all(
                (c := config_of(o)) is not None
                and c.mode == "mig"
                and rollout_of(o) is None
                and not cordoned(o)
                for o in objs
            )
            if done:
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"no completion; seen {sorted(seen)}\n{log.read_text()[-3000:]}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    # killed right after the steps the poll saw (a step the next pass follows at once, such as
    # the pause, may be passed between two polls)
    phases = {p for _, p in seen}
    assert {"Draining", "Applying"} <= phases, seen
    assert kills >= 4, (kills, seen)
    for gpu in gpu_nodes:
        obj = await get_node(api, gpu.name)
        labels_now = obj["metadata"].get("labels") or {}
        assert not cordoned(obj) and rollout_of(obj) is None
        assert labels_now.get(contract.LABEL_DEVICE_PLUGIN) == "hami", "plugin left paused"
        assert labels_now.get(DCGM) == "true", "operand left paused"
        assert mig_on_calls(gpu.gpus.log()) == 1, gpu.gpus.log()
    # the plugin pod restarted once per node, and that one pod read the new entry
    after = env.sim.registrations[mark:]
    for node in names:
        pods = {r.pod_uid for r in after if r.node == node}
        assert len(pods) == 1, (node, [(r.pod, r.mode) for r in after if r.node == node])
        assert {r.mode for r in after if r.node == node} == {"mig"}, after
        assert before[node] not in pods
    withdrawn = env.sim.withdrawn[gone:]  # the pause took each node's plugin pod away once
    assert sorted(withdrawn) == sorted(names), withdrawn

"""Safe transitions survive the operator's death: `vgpu-operator run` as a process, killed with
SIGKILL while a node stands in each step of its transition and started again. Each step is held
by the test's own objects long enough to be seen and killed in, not by timing luck:

- Draining (the cordon written, the drain under way): the node's GPU pod carries a finalizer of
  the test's, so the evicted pod stays Terminating (on the node) until the test lets it go;
- Pausing (the plugin's placement label off, the GPU Operator's operand paused): the node's
  device-plugin pod carries that finalizer too, so it has not left the node;
- Applying (`config` released, the node agent applying it): the simulated `nvidia-smi -mig 1`
  hangs a few seconds, as the driver's MIG mode change takes; the operator is started again only
  once the agent has reported `success`, so the next one starts from a verified release;
- Verifying (the plugin resumed, its one restart): the simulated device plugin is stopped, so
  the new plugin pod has not registered the node's new mode yet;
- done (operands resumed, uncordoned, the record gone: one PATCH): killed right after it.

The killed operator is started again after each kill, and only then is the step let go, so the
new process is the one that moves the node on. The policy is examples/dedicated-vgpu-pool's (its
`rollout` as shipped), changed to `mig` as its comments describe. The rollout completes from the
records on the nodes; no node is left cordoned or paused, and none is released twice: the node
agents' simulated `nvidia-smi` logs show MIG turned on once per node, and the operator started
after the last kill writes nothing more. The HAMi device plugin runs there (its DaemonSet real,
the process simulated): each node's plugin pod is replaced exactly once, and the new one reads
the node-config entry of the new mode (its registration says `mig`)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.agentkit import Agents, agent_kubeconfig_path, agents, get_node
from tests.cluster.helpers import PolicyFactory, die_with_parent, eventually, patch_spec, unique
from tests.cluster.metricskit import Scrape, scrape
from tests.cluster.rolloutkit import (
    config_of,
    cordoned,
    gpu_pod,
    hold,
    let_go,
    pod,
    rollout_of,
    wait_running,
)
from tests.cluster.volcano_env import PLUGIN_DS, PLUGIN_NS, VolcanoEnv, steady, volcano_env
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.cluster import free_port
from vgpu_operator import contract
from vgpu_operator.contract import ANN_INVENTORY
from vgpu_operator.kubeapi import NotFound, policy_path, request
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.inventory import Inventory

__all__ = ["agent_kubeconfig_path", "agents", "volcano_env"]  # fixtures
pytestmark = pytest.mark.cluster

DCGM = "nvidia.com/gpu.deploy.dcgm-exporter"  # a GPU Operator operand the rollout pauses
DONE = "Done"  # the transition ended: not a record's phase, the record is gone
STEPS = ("Draining", "Pausing", "Applying", "Verifying", DONE)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dedicated-vgpu-pool" / "policy.yaml"
MIG_ON_SECONDS = 4.0  # how long the simulated driver takes to turn MIG mode on


def example_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())["spec"]
    assert spec["mode"] == "hami-core" and spec["rollout"]["maxUnavailable"] == "10%", spec
    return spec


def start_operator(kubeconfig: str, log: Path, metrics_port: int = 0) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "vgpu_operator.commands.cli", "run", f"--kubeconfig={kubeconfig}"]
    if metrics_port:
        argv.append(f"--metrics-port={metrics_port}")
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
            preexec_fn=die_with_parent,
        )


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL


def mig_on_calls(log: list[dict[str, Any]]) -> int:
    """`nvidia-smi ... -mig 1` calls that succeeded (a hang's own log line has no `rc`)."""
    return sum(1 for e in log if list(e.get("argv", []))[-2:] == ["-mig", "1"] and e.get("rc") == 0)


async def agent_verified(api: client.ApiClient, node: str) -> bool:
    """The node agent reports `success` for MIG mode (its inventory's `applied`)."""
    meta = (await get_node(api, node))["metadata"]
    inventory = Inventory.from_annotation((meta.get("annotations") or {}).get(ANN_INVENTORY))
    applied = inventory.applied if inventory is not None else None
    state = (meta.get("labels") or {}).get(contract.LABEL_STATE)
    return state == "success" and applied is not None and applied.mode == "mig"


def step_of(obj: dict[str, Any]) -> str | None:
    """Where the node's transition stands: its record's phase, DONE once it ended in MIG mode
    (no record, not cordoned), None before it began."""
    r = rollout_of(obj)
    if r is not None:
        return r.phase
    config = config_of(obj)
    if config is not None and config.mode == "mig" and not cordoned(obj):
        return DONE
    return None


async def plugin_pod_on(api: client.ApiClient, node: str) -> str:
    """namespace/name of the device-plugin pod on `node`."""
    listed = await request(
        api,
        "GET",
        f"/api/v1/namespaces/{PLUGIN_NS}/pods",
        query={"labelSelector": f"name={PLUGIN_DS}", "fieldSelector": f"spec.nodeName={node}"},
    )
    [pod] = listed.get("items") or []
    return f"{PLUGIN_NS}/{pod['metadata']['name']}"


async def test_sigkill_in_every_step_and_the_rollout_still_completes_once_per_node(
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
    sim = env.sim
    assert sim is not None
    log = tmp_path / "operator.log"
    # restarts (the DaemonSet's placement patch among them) not held back for minutes
    (tmp_path / "operator-config.yaml").write_text("restarts: {minIntervalSeconds: 1}\n")
    proc = start_operator(installed.kubeconfig, log)
    held: list[str] = []  # pods carrying the test's finalizer
    sim_stopped = False
    killed: dict[str, list[str]] = {n: [] for n in names}  # steps a kill hit, as read after it
    seen: dict[str, list[str]] = {n: [] for n in names}  # steps in the order they were seen
    tried: set[tuple[str, str]] = set()
    name = ""
    held_at_kill: list[tuple[str, bool]] = []  # (step, its wait still open at the kill)
    by_name = {n.name: n for n in gpu_nodes}
    kills = 0
    try:
        # the example's policy, on this test's nodes: its rollout (10% of 2 nodes: one at a
        # time; Evict; timeouts of minutes no kill comes near) is what the kills go through
        spec = example_spec()
        spec["nodeSelector"]["matchLabels"] = {"test/kill": pool}
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
        mark, gone = len(sim.registrations), len(sim.withdrawn)
        train = {n: await gpu_pod(api, namespace, f"train-{i}", n) for i, n in enumerate(names)}
        await wait_running(api, train.values())
        plugin_pods = {n: await plugin_pod_on(api, n) for n in names}
        for key in [*train.values(), *plugin_pods.values()]:
            await hold(api, key)
            held.append(key)
        for gpu in gpu_nodes:
            fs.hang_at(gpu.gpus.state, "-mig 1", seconds=MIG_ON_SECONDS)
        await patch_spec(api, name, {"mode": "mig", "hamiCore": None, "mig": {}})

        async def steps_now() -> dict[str, str | None]:
            return {n: step_of(await get_node(api, n)) for n in names}

        port = 0
        deadline = time.monotonic() + 240
        while True:
            now = await steps_now()
            for node, step in now.items():
                if step is not None and (not seen[node] or seen[node][-1] != step):
                    seen[node].append(step)
            fresh = [(n, s) for n, s in now.items() if s is not None and (n, s) not in tried]
            if fresh:  # a step was just written: kill the operator in it
                kill(proc)
                kills += 1
                after = await steps_now()
                for node, step in fresh:
                    tried.add((node, step))
                    if after[node] == step:
                        killed[node].append(step)
                    # what the step was waiting for had not happened when the kill came
                    if step == "Draining":
                        held_at_kill.append((step, await pod(api, train[node]) is not None))
                    elif step == "Pausing":
                        still = await pod(api, plugin_pods[node]) is not None
                        held_at_kill.append((step, still))
                    elif step == "Applying":
                        log_now = by_name[node].gpus.log()
                        held_at_kill.append((step, mig_on_calls(log_now) == 0))
                    elif step == "Verifying":
                        fresh_mig = [r for r in sim.registrations[mark:] if r.node == node]
                        held_at_kill.append((step, not fresh_mig))
                applying = [n for n, s in fresh if s == "Applying"]
                if applying and not sim_stopped:
                    await sim.stop()  # the resumed plugin will not register until let go
                    sim_stopped = True
                for node in applying:
                    # the agent finishes while no operator runs: the next one starts from a
                    # release the agent has verified, and resumes the plugin
                    async def verified(node: str = node) -> bool:
                        return await agent_verified(api, node)

                    await eventually(verified, timeout=60, interval=0.2)
                    still = step_of(await get_node(api, node)) == "Applying"
                    held_at_kill.append(("agent verified, no operator", still))
                port = free_port()
                proc = start_operator(installed.kubeconfig, log, port)
                for node, step in fresh:  # the new operator moves the node on
                    if step == "Draining":
                        await let_go(api, train[node])
                    elif step == "Pausing":
                        await let_go(api, plugin_pods[node])
                    elif step == "Verifying" and sim_stopped:
                        sim.start()
                        sim_stopped = False
            if all(s == DONE for s in now.values()) and not fresh:
                break
            assert time.monotonic() < deadline, (
                f"no completion: steps {now}, seen {seen}, killed in {killed}\n"
                f"{log.read_text()[-3000:]}"
            )
            await asyncio.sleep(0.2)
        # the operator started after the last kill, with every node done: its passes (the
        # policy's and the configuration's) write nothing to any node (no cordon, no pause, no
        # second release)
        assert port

        async def passed() -> bool:
            page = await asyncio.to_thread(scrape_or_none, port)
            return (
                page is not None
                and page.total("vgpu_operator_reconciliations_total", result="ok") >= 1
                and page.total("vgpu_operator_configuration_passes_total", result="ok") >= 1
            )

        await eventually(passed, timeout=60)
        page = scrape(port)
        assert page.total("vgpu_operator_node_writes_total") == 0, page.values(
            "vgpu_operator_node_writes_total"
        )
        # every step of every node was hit by a kill while the node stood in it
        assert killed == {n: list(STEPS) for n in names}, (killed, seen)
        assert seen == {n: list(STEPS) for n in names}, seen
        assert held_at_kill and all(open_ for _, open_ in held_at_kill), held_at_kill
        assert len(held_at_kill) == 5 * len(names), held_at_kill
        assert kills >= len(STEPS) * len(names) - 1, kills  # a node's end may be the next's start
        for gpu in gpu_nodes:
            obj = await get_node(api, gpu.name)
            labels_now = obj["metadata"].get("labels") or {}
            assert not cordoned(obj) and rollout_of(obj) is None
            assert labels_now.get(contract.LABEL_DEVICE_PLUGIN) == "hami", "plugin left paused"
            assert labels_now.get(DCGM) == "true", "operand left paused"
            # the example's disableNvidiaDevicePlugin: NVIDIA's plugin stays off (`false` is never
            # paused, so never resumed to `true`)
            assert labels_now.get(contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL) == "false", labels_now
            assert mig_on_calls(gpu.gpus.log()) == 1, gpu.gpus.log()
        for key in train.values():  # drained: evicted by the operator, then let go
            assert await pod(api, key) is None, key
        # the plugin pod restarted once per node, and that one pod read the new entry
        after = sim.registrations[mark:]
        for node in names:
            pods = {r.pod_uid for r in after if r.node == node}
            assert len(pods) == 1, (node, [(r.pod, r.mode) for r in after if r.node == node])
            assert {r.mode for r in after if r.node == node} == {"mig"}, after
            assert before[node] not in pods
        withdrawn = sim.withdrawn[gone:]  # the pause took each node's plugin pod away once
        assert sorted(withdrawn) == sorted(names), withdrawn
    finally:
        for key in held:
            await let_go(api, key)
        if sim_stopped:
            sim.start()
        if name and proc.poll() is None:  # its finalizer released by a running operator
            with contextlib.suppress(AssertionError):
                await delete_policy(api, name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


async def delete_policy(api: client.ApiClient, name: str) -> None:
    """Delete the policy and wait until it is gone (its finalizer released)."""
    with contextlib.suppress(NotFound):
        await request(api, "DELETE", policy_path(name), field_manager=None)

    async def gone() -> bool:
        try:
            await request(api, "GET", policy_path(name))
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=30)


def scrape_or_none(port: int) -> Scrape | None:
    """The operator's /metrics page; None while it is not serving yet."""
    try:
        return scrape(port)
    except OSError:
        return None

"""Many node agents in one process: one `agent.loop.Agent` per simulated node, for benchmarks at
sizes where an agent process per node does not fit (about 60 MiB each: 1,000 would need 60 GiB).

Each agent is built as `vgpu-operator agent` builds its own (agent.cli `run_agent`): its own API
client (4 connections, the user agent `vgpu-operator-agent/<node>`, the credentials' health), its
own `KubeNodeApi` (a list-then-watch of its Node), its own `NvidiaSmi` on the fake nvidia-smi
(devcluster.fakesmi) with the node's simulated GPUs in `workdir/<node>/gpus.json`, and the
agent's default options; no PodResources socket is asked (a simulated node has no kubelet, as
`agentproc.AgentProcess` runs them). What they share is the process: its interpreter, its event
loop, its CPU and its Prometheus registry.

At most `max_calls` fake nvidia-smi calls run at once across the swarm (each is a Python process:
two cores cannot start a thousand at once, where real nodes each have their own CPU). The
default is above the number of calls that run at once in a rollout (one per node in transition:
an agent calls nvidia-smi one call at a time), so it binds only while agents start; `slot_wait`
is the time calls spent waiting for a slot, for a benchmark to show whether it bound.

In a benchmark's process:

    async with AgentSwarm(kubeconfig, nodes, workdir, smi_latency=REALISTIC) as swarm:
        ...  # the agents run until the block ends; then each finishes its action and stops

As a process of its own (so a benchmark can measure it apart), until SIGTERM or SIGINT:

    python -m vgpu_devcluster.agentswarm --kubeconfig F --workdir D [--smi-latency TEXT]
        [--model M] [--gpus N] [--mig] [--max-calls N] [--resync S] [-v]
        NODE... | @FILE (one node name a line)

It prints `ready <n>` on stdout once every agent runs, and exits 0 after they have stopped.
`SwarmProcess` starts it so from a benchmark's process (bench/idle.py, bench/rollout_agents.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.agentproc import FakeGpus, _die_with_parent
from vgpu_devcluster.fakesmi_latency import SmiLatency
from vgpu_operator.agent.loop import Agent, AgentOptions
from vgpu_operator.agent.nodeapi import KubeNodeApi, agent_client
from vgpu_operator.agent.smi import DEFAULT_TIMEOUT, NvidiaSmi, SmiResult
from vgpu_operator.kubeapi.lite import LiteClient, Settings, load
from vgpu_operator.kubeapi.source import Source

log = logging.getLogger("vgpu_devcluster.agentswarm")

MAX_CALLS = 256  # fake nvidia-smi calls running at once, across the swarm
STOP_SECONDS = 60.0  # for the actions under way to finish, then they are cancelled


class _PacedSmi(NvidiaSmi):
    """NvidiaSmi whose calls take a slot of the swarm's first (module docstring)."""

    def __init__(self, swarm: AgentSwarm, binary: str, env: dict[str, str]) -> None:
        super().__init__(binary, timeout=swarm.smi_timeout, env=env)
        self.swarm = swarm

    async def run(self, *args: str, timeout: float | None = None, check: bool = True) -> SmiResult:
        asked = time.monotonic()
        async with self.swarm.slots:
            self.swarm.slot_wait += time.monotonic() - asked
            return await super().run(*args, timeout=timeout, check=check)


class AgentSwarm:
    """One agent per node in `nodes`, running in this process while the `async with` lasts.

    A node's fake GPUs are kept if `workdir/<node>/gpus.json` exists (a benchmark may prepare
    them), else created: `gpus` GPUs of `model` (a models.gpu_catalog key), MIG on if `mig`.
    `smi_latency`: the seconds each kind of fake call takes (fakesmi_latency); None: what
    FAKE_NVIDIA_SMI_LATENCY in this process's environment says (unset: none)."""

    def __init__(
        self,
        kubeconfig: Path,
        nodes: Sequence[str],
        workdir: Path,
        *,
        smi_latency: SmiLatency | None = None,
        model: str = "A100-SXM4-80GB",
        gpus: int = 8,
        mig: bool = False,
        options: AgentOptions | None = None,
        smi_timeout: float = DEFAULT_TIMEOUT,
        max_calls: int = MAX_CALLS,
    ) -> None:
        if len(set(nodes)) != len(nodes):
            raise ValueError("AgentSwarm: a node is named twice in `nodes`")
        self.kubeconfig = kubeconfig
        self.nodes = list(nodes)
        self.workdir = workdir
        self.smi_latency = smi_latency
        self.model = model
        self.gpus_per_node = gpus
        self.mig = mig
        self.options = options or AgentOptions()
        self.smi_timeout = smi_timeout
        self.slots = asyncio.Semaphore(max_calls)
        self.slot_wait = 0.0  # seconds fake calls waited for a slot, summed
        self.agents: dict[str, Agent] = {}
        self.gpus: dict[str, FakeGpus] = {}
        self._clients: list[LiteClient] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def fake_gpus(self, node: str, binary: Path) -> FakeGpus:
        directory = self.workdir / node
        directory.mkdir(parents=True, exist_ok=True)
        state = directory / "gpus.json"
        if not state.exists():
            fs.init_state(state, self.model, self.gpus_per_node, node=node, mig=self.mig)
        return FakeGpus(state=state, binary=binary)

    async def __aenter__(self) -> AgentSwarm:
        self.workdir.mkdir(parents=True, exist_ok=True)
        binary = fs.write_wrapper(self.workdir)  # one script: the state comes from the env
        settings = load(Source(kubeconfig=str(self.kubeconfig)))
        try:
            for node in self.nodes:
                gpus = self.fake_gpus(node, binary)
                agent = await self._agent(settings, node, gpus)
                self.gpus[node] = gpus
                self.agents[node] = agent
                task = asyncio.create_task(self._run(node, agent), name=f"agent-{node}")
                self._tasks[node] = task
        except BaseException:
            await self.stop()
            raise
        return self

    async def _agent(self, settings: Settings, node: str, gpus: FakeGpus) -> Agent:
        """One node's agent, built as agent.cli `run_agent` builds it (the one place that
        follows it)."""
        api = agent_client(settings, node)
        self._clients.append(api)
        env = {fs.ENV_STATE: str(gpus.state)}
        if self.smi_latency is not None:
            env.update(self.smi_latency.env())
        driver = _PacedSmi(self, str(gpus.binary), env)
        return Agent(KubeNodeApi(api, node), driver, self.options)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _run(self, node: str, agent: Agent) -> None:
        try:
            await agent.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # one agent's end is logged; the others go on
            log.exception("agent %s ended", node)

    def failed(self) -> list[str]:
        """Nodes whose agent has ended while the swarm runs."""
        return [n for n, t in self._tasks.items() if t.done()]

    async def stop(self, seconds: float = STOP_SECONDS) -> None:
        """Every agent finishes its action under way (at most `seconds`, then it is cancelled:
        a cancelled call's process group is killed, agent.smi); the clients are closed."""
        for agent in self.agents.values():
            agent.stop()
        tasks = list(self._tasks.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=seconds)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        for api in self._clients:
            await api.close()
        self._clients.clear()


# --- as a process -----------------------------------------------------------------------------


class SwarmProcess:
    """`python -m vgpu_devcluster.agentswarm` over `nodes` in a process of its own (so a benchmark
    measures it apart), its fake GPUs under `workdir`, its log appended to `logfile`: started
    here; `await wait_ready()` until it prints `ready <n>`; `stop()` sends SIGTERM and waits for
    every agent to finish its action (`STOP_SECONDS`), then kills it. It dies with the process
    that started it (PR_SET_PDEATHSIG)."""

    def __init__(
        self,
        kubeconfig: Path,
        nodes: Sequence[str],
        workdir: Path,
        logfile: Path,
        *,
        smi_latency: SmiLatency | None = None,
        model: str = "A100-SXM4-80GB",
        gpus: int = 8,
        mig: bool = False,
        resync: float | None = None,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        listing = workdir / "nodes.txt"
        listing.write_text("".join(f"{name}\n" for name in nodes))
        argv = [sys.executable, "-m", "vgpu_devcluster.agentswarm"]
        argv += [f"--kubeconfig={kubeconfig}", f"--workdir={workdir}"]
        argv += [f"--model={model}", f"--gpus={gpus}", *(["--mig"] if mig else [])]
        if smi_latency is not None:
            argv.append(f"--smi-latency={smi_latency.text()}")
        if resync is not None:
            argv.append(f"--resync={resync}")
        self.logfile = logfile
        self._log = logfile.open("ab")
        self.proc = subprocess.Popen(
            [*argv, f"@{listing}"],
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=_die_with_parent,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    async def wait_ready(self, progress: Callable[[str], None] | None = None) -> None:
        """Until it prints `ready <n>`; RuntimeError (naming its log) if it exits first."""
        assert self.proc.stdout is not None
        if progress is not None:
            progress("the agents' process to print `ready`")
        while True:
            line = await asyncio.to_thread(self.proc.stdout.readline)
            if not line:
                code = await asyncio.to_thread(self.proc.wait)
                raise RuntimeError(
                    f"the agent swarm exited ({code}) before `ready`: see {self.logfile}"
                )
            if line.startswith(b"ready "):
                return

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_SECONDS + 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m vgpu_devcluster.agentswarm",
        description="Node agents for many simulated nodes in one process, until SIGTERM.",
        fromfile_prefix_chars="@",
    )
    parser.add_argument("--kubeconfig", type=Path, required=True, help="the agents' credentials")
    parser.add_argument("--workdir", type=Path, required=True, help="<workdir>/<node>/gpus.json")
    parser.add_argument(
        "--smi-latency",
        type=SmiLatency.parse,
        default=None,
        help="seconds per fake nvidia-smi call kind, e.g. query=0.05,mode=5,create=0.5,destroy=0.3",
    )
    parser.add_argument("--model", default="A100-SXM4-80GB", help="GPU model of new fake GPUs")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (new fake GPUs)")
    parser.add_argument("--mig", action="store_true", help="new fake GPUs start with MIG on")
    parser.add_argument("--max-calls", type=int, default=MAX_CALLS, help="fake calls at once")
    parser.add_argument(
        "--resync",
        type=float,
        default=AgentOptions().resync,
        help="seconds between each agent's unprompted actions (default: the agent's)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="the agents' INFO logs")
    parser.add_argument("nodes", nargs="+", metavar="NODE")
    return parser.parse_args(list(argv))


async def serve(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    swarm = AgentSwarm(
        args.kubeconfig,
        args.nodes,
        args.workdir,
        smi_latency=args.smi_latency,
        model=args.model,
        gpus=args.gpus,
        mig=args.mig,
        max_calls=args.max_calls,
        options=AgentOptions(resync=args.resync),
    )
    async with swarm:
        print(f"ready {len(swarm.agents)}", flush=True)
        await stop.wait()
    log.warning(
        "stopped %d agents; fake calls waited %.1fs for a slot", len(args.nodes), swarm.slot_wait
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())

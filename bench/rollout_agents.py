"""The node agents of bench/rollout.py, three ways, each with its CPU apart from the fake's.

- `processes`: one `vgpu-operator agent` process per node (vgpu_devcluster.agentproc, as the
  cluster tests start them), for up to a few hundred nodes (each holds about 60 MiB);
- `swarm`: one process running an agent per node (`python -m vgpu_devcluster.agentswarm`, started
  by its `SwarmProcess`), for 1,000 nodes and more;
- `inline`: the same swarm in the benchmark's own process (the smoke test's size).

Every fake nvidia-smi call is a child process of its agent's process, which waits for it: the
kernel adds its CPU to that process's children's time (`cutime`/`cstime` of /proc/PID/stat), so
an agent process's own CPU and its fake's are read apart. Inline, the agents' own CPU is the
benchmark's and is not reported; the fake's is the benchmark process's children's time over the
run (its other children, the control plane and the operator, are not reaped before its end).
"""

from __future__ import annotations

import contextlib
import os
import resource
from pathlib import Path
from typing import Literal

from benchkit import own_and_reaped_cpu
from vgpu_devcluster.agentproc import AgentProcess, FakeGpus, stop_all
from vgpu_devcluster.agentswarm import AgentSwarm, SwarmProcess
from vgpu_devcluster.fakesmi_latency import ENV_LATENCY, SmiLatency
from vgpu_operator.agent.loop import AgentOptions

Way = Literal["processes", "swarm", "inline"]

# A swarm's agents resync once a day, not every 300 s (agent.loop `AgentOptions.resync`: an
# unprompted re-apply, for a node whose GPUs were reset under it; nothing in a run does that).
# Each resync queries the fake nvidia-smi, a Python process per call: in the first run at 1,000
# nodes (2026-11-26) the agents' resyncs kept the fake at 1.6 CPU s a second, with or without a
# transition under way, and both cores saturated (a load of 18 to 20) for the control plane,
# the operator and the floor alike; on a fleet each node's resync runs on that node's own CPU.
SWARM_RESYNC = 86400.0


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Agents:
    """The agents of one group of nodes: `start()`, `cpu()` as often as needed, `stop()`."""

    def __init__(
        self,
        way: Way,
        kubeconfig: Path,
        nodes: list[str],
        workdir: Path,
        *,
        model: str,
        gpus: int,
        mig: bool,
        latency: SmiLatency,
    ) -> None:
        self.way = way
        self.kubeconfig = kubeconfig
        self.nodes = nodes
        self.workdir = workdir
        self.model = model
        self.gpus = gpus
        self.mig = mig
        self.latency = latency
        self.processes: list[AgentProcess] = []
        self.swarm: AgentSwarm | None = None
        self.swarm_proc: SwarmProcess | None = None

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.way == "inline":
            self.swarm = AgentSwarm(
                self.kubeconfig,
                self.nodes,
                self.workdir,
                smi_latency=self.latency,
                model=self.model,
                gpus=self.gpus,
                mig=self.mig,
                options=AgentOptions(resync=SWARM_RESYNC),
            )
            await self.swarm.__aenter__()
        elif self.way == "swarm":
            self.swarm_proc = SwarmProcess(
                self.kubeconfig,
                self.nodes,
                self.workdir,
                self.workdir / "swarm.log",
                smi_latency=self.latency,
                model=self.model,
                gpus=self.gpus,
                mig=self.mig,
                resync=SWARM_RESYNC,
            )
            try:
                await self.swarm_proc.wait_ready()
            except RuntimeError:
                self.stop()
                raise
        else:
            for node in self.nodes:
                fake = FakeGpus.create(
                    self.workdir / node, node, self.model, self.gpus, mig=self.mig
                )
                log = self.workdir / node / "agent.log"
                agent = AgentProcess(node, self.kubeconfig, fake, log, timeout=120.0)
                self.processes.append(agent.start())

    def pids(self) -> list[int]:
        if self.swarm_proc is not None:
            return [self.swarm_proc.pid]
        return [a.pid for a in self.processes if a.running()]

    def cpu(self) -> tuple[float | None, float]:
        """(the agents' own CPU seconds so far, or None inline; their fake nvidia-smi's)."""
        if self.way == "inline":
            return None, children_cpu()
        own = fake = 0.0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                o, c = own_and_reaped_cpu(pid)
                own, fake = own + o, fake + c
        return own, fake

    def failed(self) -> list[str]:
        """Nodes whose agent has ended."""
        if self.swarm is not None:
            return self.swarm.failed()
        if self.swarm_proc is not None and not self.swarm_proc.running():
            return list(self.nodes)
        return [a.node for a in self.processes if not a.running()]

    async def stop_async(self) -> None:
        if self.swarm is not None:
            swarm, self.swarm = self.swarm, None
            await swarm.stop()
        self.stop()

    def stop(self) -> None:
        if self.swarm_proc is not None:
            swarm_proc, self.swarm_proc = self.swarm_proc, None
            swarm_proc.stop()
        if self.processes:
            stop_all(self.processes)
            self.processes = []


def export_latency(latency: SmiLatency) -> None:
    """For agent processes (they pass their environment to their nvidia-smi calls)."""
    os.environ[ENV_LATENCY] = latency.text()

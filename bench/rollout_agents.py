"""The node agents of bench/rollout.py, three ways, each with its CPU apart from the fake's.

- `processes`: one `vgpu-operator agent` process per node (vgpu_devcluster.agentproc, as the
  cluster tests start them), for up to a few hundred nodes (each holds about 60 MiB);
- `swarm`: one process running an agent per node (`python -m vgpu_devcluster.agentswarm`), for
  1,000 nodes and more;
- `inline`: the same swarm in the benchmark's own process (the smoke test's size).

Every fake nvidia-smi call is a child process of its agent's process, which waits for it: the
kernel adds its CPU to that process's children's time (`cutime`/`cstime` of /proc/PID/stat), so
an agent process's own CPU and its fake's are read apart. Inline, the agents' own CPU is the
benchmark's and is not reported; the fake's is the benchmark process's children's time over the
run (its other children, the control plane and the operator, are not reaped before its end).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Literal

from benchkit import die_with_parent
from vgpu_devcluster.agentproc import AgentProcess, FakeGpus, stop_all
from vgpu_devcluster.agentswarm import AgentSwarm
from vgpu_devcluster.fakesmi_latency import ENV_LATENCY, SmiLatency

Way = Literal["processes", "swarm", "inline"]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def own_and_children_cpu(pid: int) -> tuple[float, float]:
    """(utime + stime, cutime + cstime) of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / CLK_TCK
    children = (int(fields[13]) + int(fields[14])) / CLK_TCK
    return own, children


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
        self.swarm_proc: subprocess.Popen[bytes] | None = None

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
            )
            await self.swarm.__aenter__()
        elif self.way == "swarm":
            await self._start_swarm()
        else:
            for node in self.nodes:
                fake = FakeGpus.create(
                    self.workdir / node, node, self.model, self.gpus, mig=self.mig
                )
                log = self.workdir / node / "agent.log"
                agent = AgentProcess(node, self.kubeconfig, fake, log, timeout=120.0)
                self.processes.append(agent.start())

    async def _start_swarm(self) -> None:
        names = self.workdir / "nodes.txt"
        names.write_text("".join(f"{n}\n" for n in self.nodes))
        argv = [sys.executable, "-m", "vgpu_devcluster.agentswarm"]
        argv += ["--kubeconfig", str(self.kubeconfig), "--workdir", str(self.workdir)]
        argv += ["--smi-latency", self.latency.text(), "--model", self.model]
        argv += ["--gpus", str(self.gpus), *(["--mig"] if self.mig else []), f"@{names}"]
        with open(self.workdir / "swarm.log", "ab") as log:
            self.swarm_proc = subprocess.Popen(  # noqa: ASYNC220 (it runs on; not waited for)
                argv,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
        out = self.swarm_proc.stdout
        assert out is not None
        line = await asyncio.to_thread(out.readline)
        if not line.startswith(b"ready"):
            self.stop()
            raise RuntimeError(f"the agent swarm did not start: see {self.workdir / 'swarm.log'}")

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
                o, c = own_and_children_cpu(pid)
                own, fake = own + o, fake + c
        return own, fake

    def failed(self) -> list[str]:
        """Nodes whose agent has ended."""
        if self.swarm is not None:
            return self.swarm.failed()
        if self.swarm_proc is not None and self.swarm_proc.poll() is not None:
            return list(self.nodes)
        return [a.node for a in self.processes if not a.running()]

    async def stop_async(self) -> None:
        if self.swarm is not None:
            swarm, self.swarm = self.swarm, None
            await swarm.stop()
        self.stop()

    def stop(self) -> None:
        if self.swarm_proc is not None:
            proc, self.swarm_proc = self.swarm_proc, None
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self.processes:
            stop_all(self.processes)
            self.processes = []


def export_latency(latency: SmiLatency) -> None:
    """For agent processes (they pass their environment to their nvidia-smi calls)."""
    os.environ[ENV_LATENCY] = latency.text()

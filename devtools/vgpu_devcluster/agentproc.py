"""Node agents as subprocesses against simulated GPUs, for the tests and the demo.

Each agent runs as `python -m vgpu_operator.commands.cli agent --node N` exactly as in its
DaemonSet, with
a kubeconfig for the agent's ServiceAccount and the fake nvidia-smi (devcluster.fakesmi) as its
`--nvidia-smi`; the node's simulated GPUs live in a state file under `workdir/<node>/`.

An agent gets its own process group and dies with the process that started it
(PR_SET_PDEATHSIG). The agent runs each nvidia-smi in a process group of its own (agent.smi), so
killing an agent also kills what is left of its node's fake nvidia-smi calls
(fakesmi_state.kill_strays): no agent or call outlives a test or the demo.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.fakesmi_models import fake_model_for_name
from vgpu_devcluster.nodes import GPU_MODELS


def fake_model(node_model: str) -> str:
    """The fake nvidia-smi's model (a fakesmi_models.FAKE_MODELS key) for a simulated node's
    model (devcluster.nodes key): the one with the same NVML name."""
    model = fake_model_for_name(GPU_MODELS[node_model].nvml_name)
    if model is None:
        raise ValueError(f"the fake nvidia-smi has no model for {node_model!r}")
    return model.key


@dataclass
class FakeGpus:
    """The simulated GPUs of one node: a state file and an `nvidia-smi` that reads it."""

    state: Path
    binary: Path

    @classmethod
    def create(
        cls,
        directory: Path,
        node: str,
        model: str,
        count: int,
        *,
        mig: bool = False,
        driver_version: str = fs.DEFAULT_DRIVER,
    ) -> FakeGpus:
        """`model` is a fakesmi_models.FAKE_MODELS key (see fake_model)."""
        directory.mkdir(parents=True, exist_ok=True)
        state = directory / "gpus.json"
        fs.init_state(state, model, count, node=node, mig=mig, driver_version=driver_version)
        return cls(state=state, binary=fs.write_wrapper(directory))

    def load(self) -> fs.NodeState:
        return fs.load(self.state)

    def count(self, effect: str) -> int:
        return fs.count_effect(self.state, effect)

    def log(self) -> list[dict[str, object]]:
        return fs.read_log(self.state)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class AgentProcess:
    """One `vgpu-operator agent` subprocess."""

    node: str
    kubeconfig: Path
    gpus: FakeGpus
    logfile: Path
    resync: float = 300.0
    retry: float = 30.0
    timeout: float = 20.0
    once: bool = False
    # The chart's `hostPID` (agent-daemonset.yaml): False runs the agent in a PID namespace of
    # its own, which the fake nvidia-smi models (fakesmi_state: processes of other namespaces).
    host_pid: bool = True
    # `--metrics-port` (the chart's monitoring.agent): 0 serves no metrics
    metrics_port: int = 0
    # `--pod-resources-socket` (the chart's agent.podResourcesDir): the kubelet's PodResources
    # socket the agent asks before it destroys or resets anything. A simulated node has no
    # kubelet: "" asks none (compute processes only), or a test's PodResources double's socket.
    pod_resources_socket: str = ""
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def argv(self) -> list[str]:
        args = [sys.executable, "-m", "vgpu_operator.commands.cli", "agent", "--node", self.node]
        args += ["--kubeconfig", str(self.kubeconfig), "--nvidia-smi", str(self.gpus.binary)]
        args += [f"--resync={self.resync:g}", f"--retry={self.retry:g}"]
        args += [
            f"--timeout={self.timeout:g}",
            f"--pod-resources-socket={self.pod_resources_socket}",
        ]
        if self.metrics_port:
            args.append(f"--metrics-port={self.metrics_port}")
        return [*args, "--once"] if self.once else args

    def start(self) -> AgentProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_NAME")}
        env[fs.ENV_STATE] = str(self.gpus.state)
        env.pop(fs.ENV_PID_NAMESPACE, None)
        if not self.host_pid:
            env[fs.ENV_PID_NAMESPACE] = f"agent-{self.node}"
        with open(self.logfile, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout: float) -> int:
        assert self.proc is not None, "not started"
        return self.proc.wait(timeout)

    def output(self) -> str:
        return self.logfile.read_text(errors="replace") if self.logfile.exists() else ""

    def kill(self) -> None:
        """SIGKILL the agent (its process group) and its node's fake nvidia-smi calls."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        fs.kill_strays(self.gpus.state)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (the agent finishes the action under way), SIGKILL after `timeout`; then
        nothing of its process group is left. Returns the exit code (None if killed)."""
        if self.proc is None:
            return None
        code: int | None = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                code = None
        else:
            code = self.proc.returncode
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers
        self.proc.wait(10)
        fs.kill_strays(self.gpus.state)  # a hung nvidia-smi (its own process group)
        return code


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group `pgid` is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - not ours, but alive
        return True
    return True


def wait_group_gone(pgid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def stop_all(agents: list[AgentProcess], timeout: float = 30.0) -> None:
    """SIGTERM every agent at once, wait for them together, then SIGKILL what is left."""
    for agent in agents:
        if agent.running():
            assert agent.proc is not None
            agent.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for agent in agents:
        if agent.proc is None:
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            agent.proc.wait(max(0.1, deadline - time.monotonic()))
        agent.kill()

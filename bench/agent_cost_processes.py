"""The processes bench/agent_cost.py measures: the two floors holding one Node watch
(bench/watch_floor.py) and the node agent as the chart starts it, each started, waited for until
ready, then read over the idle window (CPU from /proc/<pid>/stat with its reaped children's,
VmRSS and VmHWM, whether grpc's extension is mapped in).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from agent_cost_apiserver import TOKEN, Server
from benchkit import die_with_parent, log, memory, own_and_reaped_cpu
from importkit import base_env
from vgpu_devcluster.cluster import free_port

BENCH = Path(__file__).resolve().parent
GPU_MODEL = "A100-SXM4-80GB"


@dataclass
class Measured:
    label: str
    argv: list[str]
    env: dict[str, str]
    logfile: Path
    ready: Callable[[Measured], bool]
    waiting_for: str
    proc: subprocess.Popen[bytes] | None = None
    cpu_start: float = 0.0
    cpu_end: float = 0.0
    rss: float = 0.0
    peak: float = 0.0
    grpc_mapped: bool | None = None
    node: str | None = None
    state_file: Path | None = None
    notes: list[str] = field(default_factory=list)

    def start(self) -> None:
        with self.logfile.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.logfile.parent,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def output(self) -> str:
        return self.logfile.read_text(errors="replace") if self.logfile.exists() else ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        if self.state_file is not None:
            from vgpu_devcluster import fakesmi_state

            fakesmi_state.kill_strays(self.state_file)


def cpu_seconds(pid: int) -> float:
    """utime + stime + cutime + cstime of a process, in seconds."""
    return sum(own_and_reaped_cpu(pid))


def maps_grpc(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return "cygrpc" in Path(f"/proc/{pid}/maps").read_text()
    return False


def floors(server: Server, node: str, directory: Path) -> list[Measured]:
    out = []
    for kind, label in (
        ("stdlib", "floor: standard library only (http.client, ssl), one Node watch"),
        ("aiohttp", "floor: aiohttp, one Node watch"),
    ):
        out.append(
            Measured(
                label=label,
                argv=[
                    sys.executable,
                    str(BENCH / "watch_floor.py"),
                    kind,
                    *server.floor_words(node),
                ],
                env=base_env(),
                logfile=directory / f"floor-{kind}.log",
                ready=lambda m: "watching" in m.output(),
                waiting_for="its watch to open (`watching`)",
            )
        )
    return out


def agent(
    label: str, tree: Path | None, node: str, server: Server, directory: Path, gpus: int
) -> Measured:
    from vgpu_devcluster import fakesmi_state
    from vgpu_devcluster.agentproc import FakeGpus

    fake = FakeGpus.create(directory / node, node, GPU_MODEL, gpus)
    env = base_env()
    env["NODE_NAME"] = node
    env[fakesmi_state.ENV_STATE] = str(fake.state)
    env.pop(fakesmi_state.ENV_PID_NAMESPACE, None)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    argv = [
        sys.executable, "-m", "vgpu_operator.commands.cli", "agent",
        "--resync=300", "--retry=30", "--timeout=60",
        f"--liveness=http://127.0.0.1:{free_port()}/healthz",
        "--log-format=text", f"--metrics-port={free_port()}",
        "--pod-resources-socket=", f"--nvidia-smi={fake.binary}",
    ]  # fmt: skip
    if server.kubeconfig is not None:
        argv.append(f"--kubeconfig={server.kubeconfig}")
    else:  # as in a pod: the ServiceAccount directory and the service's address
        sa = directory / f"sa-{node}"
        sa.mkdir()
        (sa / "token").write_text(TOKEN)
        (sa / "ca.crt").write_bytes(server.ca.read_bytes())
        url = urlsplit(server.url)
        env.update(
            VGPU_SERVICEACCOUNT_DIR=str(sa),
            KUBERNETES_SERVICE_HOST=url.hostname or "",
            KUBERNETES_SERVICE_PORT=str(url.port),
            HOME=str(directory),  # no ~/.kube/config to fall back on
        )

    def ready(m: Measured) -> bool:
        if "outcome:" not in m.output():
            return False
        return server.api is None or server.api.watching.get(node, 0) > 0

    return Measured(
        label=f"agent ({label})",
        argv=argv,
        env=env,
        logfile=directory / f"agent-{node}.log",
        ready=ready,
        waiting_for="its first outcome logged and its Node watch open",
        node=node,
        state_file=fake.state,
    )


def wait_ready(processes: list[Measured], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    waiting = list(processes)
    while waiting:
        for m in list(waiting):
            assert m.proc is not None
            if m.proc.poll() is not None:
                raise RuntimeError(
                    f"{m.label} exited ({m.proc.returncode}); its output:\n{m.output()[-3000:]}"
                )
            if m.ready(m):
                log(f"ready: {m.label}")
                waiting.remove(m)
        if waiting and time.monotonic() > deadline:
            m = waiting[0]
            raise RuntimeError(
                f"no end after {seconds:.0f}s: {m.label} was waiting for {m.waiting_for}; "
                f"its output:\n{m.output()[-3000:]}"
            )
        time.sleep(0.1)


def measure(processes: list[Measured], settle: float, idle: float) -> None:
    time.sleep(settle)
    for m in processes:
        m.cpu_start = cpu_seconds(m.pid)
    log(f"idle window: {idle:g}s")
    time.sleep(idle)
    for m in processes:
        m.cpu_end = cpu_seconds(m.pid)
        m.rss, m.peak = memory(m.pid)
        m.grpc_mapped = maps_grpc(m.pid)

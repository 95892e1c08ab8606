"""What sits between the operator and the apiserver cannot stall it (issue 29; the pure cases:
tests/unit/kubeapi/test_errors.py, tests/unit/kubeapi/test_exec_plugin.py,
tests/unit/test_logs.py). Real processes against the real apiserver:

- `Retry-After: inf` on one node's PATCH, from a reverse proxy in front of the apiserver
  (tests/cluster/proxykit.py): a real apiserver sends a number of seconds, but RFC 9110
  section 10.2.3 allows only delay-seconds or an HTTP-date and nothing stops an intermediary (a
  load balancer, an API gateway) from sending anything. `vgpu-operator run`, given a kubeconfig
  through the proxy, configures the other nodes of the pool, backs the hostile node off for the
  capped 600 s (`kubeapi.errors.RETRY_AFTER_CAP`, its log line; a test cannot wait for the
  retry itself), does not write it again meanwhile, and names it in the policy's status. The
  proxy's message carries NEL (U+0085), the one-byte CSI (U+009B) and U+2028: the controller's
  log has them escaped, none raw (the agent's side, from a node annotation:
  test_hostile_agents.py).
- An exec credential plugin that never returns: `vgpu-operator doctor` exits 3 after the
  plugin's 30 s (`kubeapi.exec_plugin.EXEC_TIMEOUT`; neither the kubeconfig nor the command
  line sets another) with the error naming the plugin and the wait, and the plugin's process
  group is gone. It starts with the module, so its 30 s pass while the other case runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory, PolicyFactory, die_with_parent, eventually, unique
from tests.cluster.poolkit import configured_by, hami_policy, node, wait_nodes
from tests.cluster.proxykit import ApiProxy, Refusal
from vgpu_devcluster.kubeconfigs import config, exec_user, write
from vgpu_operator import contract
from vgpu_operator.commands import exitcodes
from vgpu_operator.kubeapi import node_path, policy_path, request
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.kubeapi.errors import RETRY_AFTER_CAP
from vgpu_operator.kubeapi.exec_plugin import EXEC_TIMEOUT

# What the proxy's message carries: NEL (a line break to some log pipelines), the one-byte CSI
# (a terminal escape: this one would turn the rest of the line red) and the line separator.
CONTROLS = {"\u0085": "\\x85", "\u009b": "\\x9b", "\u2028": "\\u2028"}
HOSTILE_MESSAGE = "slow down\u0085forged: all nodes written \u009b31mred\u2028forged too"
MARGIN = 20.0  # the interpreter's start and a loaded machine, on top of the plugin's timeout

# An exec credential plugin that never answers (a login waiting for a browser that never opens):
# it starts a child, as a helper script would, and says both process IDs.
HANGING_PLUGIN = """\
#!/bin/sh
sleep 600 &
echo "$$ $!" > "{pids}"
wait
"""


@dataclass
class HangingDoctor:
    """`vgpu-operator doctor` under a kubeconfig whose user runs HANGING_PLUGIN."""

    plugin: Path
    pids: Path
    proc: asyncio.subprocess.Process
    output: asyncio.Task[tuple[bytes, bytes]]
    started: float


@pytest.fixture(scope="module")
async def hanging_doctor(
    kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[HangingDoctor]:
    directory = tmp_path_factory.mktemp("exec-plugin")
    pids = directory / "pids"
    plugin = directory / "hanging-login"
    plugin.write_text(HANGING_PLUGIN.format(pids=pids))
    plugin.chmod(0o755)
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    path = write(directory / "kubeconfig", config(cluster, exec_user(plugin)))
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vgpu_operator.commands.cli",
        "doctor",
        "--kubeconfig",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    output = asyncio.create_task(proc.communicate())
    yield HangingDoctor(plugin, pids, proc, output, started)
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(output, 10)
    for pid in plugin_pids(pids):  # what a failed test may have left: the plugin's processes
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"sleep" in cmdline or str(plugin).encode() in cmdline:
                os.kill(pid, signal.SIGKILL)


def plugin_pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its parent (which is dead already)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class ControllerProcess:
    """`vgpu-operator run` as its Deployment runs it (text logs), its output in `log`."""

    kubeconfig: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ControllerProcess:
        argv = [sys.executable, "-m", "vgpu_operator.commands.cli", "run"]
        argv += [f"--kubeconfig={self.kubeconfig}", "--resync=3600", "--log-format=text"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        return self

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="strict") if self.log.exists() else ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
async def proxy(installed: Credentials) -> AsyncIterator[ApiProxy]:
    """The proxy in front of the apiserver, for the operator's kubeconfig; request it before
    `controllers`: it stays up until they are stopped. A test adds its refusals."""
    assert installed.kubeconfig is not None
    running = await ApiProxy.for_kubeconfig(Path(installed.kubeconfig), []).start()
    yield running
    await running.stop()


@pytest.fixture
async def controllers(api: client.ApiClient) -> AsyncIterator[list[ControllerProcess]]:
    """The controller processes a test starts; request it before `policies`: the policies are
    deleted first, and the processes stopped once the deletions are through (the controller
    releases the finalizers)."""
    started: list[ControllerProcess] = []
    yield started

    async def settled() -> bool:
        items = (await request(api, "GET", policy_path()))["items"]
        return not any(p["metadata"].get("deletionTimestamp") for p in items)

    try:
        if any(c.running() for c in started):
            await eventually(settled, timeout=30)
    finally:
        for c in started:
            c.stop()


async def test_retry_after_inf_from_a_proxy_parks_no_node_and_stalls_no_other(
    hanging_doctor: HangingDoctor,  # started first: its 30 s pass during this test
    api: client.ApiClient,
    installed: Credentials,
    make_nodes: NodeFactory,
    proxy: ApiProxy,
    controllers: list[ControllerProcess],
    policies: PolicyFactory,
    tmp_path: Path,
) -> None:
    assert installed.kubeconfig is not None
    pool = {"test/pool": unique("pool")}
    good = await make_nodes("RTX-4090", 2, gpus=1, labels=pool, prefix="ok")
    [hostile] = await make_nodes("RTX-4090", 1, gpus=1, labels=pool, prefix="ra")
    refusal = Refusal(
        "PATCH", node_path(hostile), 429, {"Retry-After": "inf"}, HOSTILE_MESSAGE, times=3
    )
    proxy.refusals.append(refusal)
    via_proxy = proxy.kubeconfig(Path(installed.kubeconfig), tmp_path / "via-proxy")
    controller = ControllerProcess(via_proxy, tmp_path / "controller.log").start()
    controllers.append(controller)
    name = await policies("ra", hami_policy(pool["test/pool"]))
    await wait_nodes(api, good, configured_by(name), timeout=60)

    pattern = re.compile(
        rf"node {re.escape(hostile)}: write failed \((.*)\); next attempt in ([0-9.]+)s"
    )
    found: list[re.Match[str]] = []

    async def logged() -> bool:
        assert controller.running(), controller.text()[-4000:]
        found[:] = [m for line in controller.text().splitlines() if (m := pattern.search(line))]
        return bool(found)

    await eventually(logged, timeout=30)
    [backed_off] = found  # one failure: no write of that node before the delay is over
    assert float(backed_off.group(2)) == RETRY_AFTER_CAP, backed_off.group(0)
    assert "429" in backed_off.group(1)

    async def named() -> bool:
        status = (await request(api, "GET", policy_path(name))).get("status") or {}
        return any(
            p["node"] == hostile and p["reason"] == "WriteFailed"
            for p in status.get("problemNodes") or []
        )

    await eventually(named, timeout=30)
    await asyncio.sleep(2.0)  # more passes (the status write above was one)
    assert refusal.answered == 1, "the hostile node was written again before its delay"
    labels = (await node(api, hostile))["metadata"].get("labels") or {}
    assert contract.LABEL_POLICY not in labels  # parked for the delay, not written around it

    text = controller.text()
    line = backed_off.group(0)
    print(f"the controller's log: ...{line}")
    for raw, escaped in CONTROLS.items():
        assert raw not in text, f"{escaped} raw in the controller's log"
        assert escaped in line, line


async def test_a_hanging_exec_plugin_ends_doctor_with_its_name_and_leaves_no_process(
    hanging_doctor: HangingDoctor,
) -> None:
    doctor = hanging_doctor
    remaining = EXEC_TIMEOUT + MARGIN - (time.monotonic() - doctor.started)
    out, err = await asyncio.wait_for(doctor.output, timeout=max(remaining, 1.0))
    took = time.monotonic() - doctor.started
    message = err.decode()
    assert doctor.proc.returncode == exitcodes.CANNOT, (out.decode(), message)
    assert EXEC_TIMEOUT <= took <= EXEC_TIMEOUT + MARGIN, took
    assert str(doctor.plugin) in message, message
    assert f"did not finish within {EXEC_TIMEOUT:g} s" in message, message
    pids = plugin_pids(doctor.pids)
    assert len(pids) == 2, "the plugin did not start"  # the script and its child
    assert not [p for p in pids if alive(p)], "the plugin's process group was not killed"
    print(f"doctor with a hanging exec plugin: exit {doctor.proc.returncode} after {took:.1f} s")

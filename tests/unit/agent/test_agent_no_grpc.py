"""gRPC costs a process about 26 MiB when imported: the agent never imports it, idle or not; the
kubelet is asked from a helper process (agent.podresources_call). Checked in a fresh interpreter
(this one has the PodResources double, which imports gRPC)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.kit.podresources import PodResourcesDouble, socket_path
from tests.kit.smi_samples import FakeNode

Make = Callable[..., FakeNode]
ROOT = Path(__file__).parents[3]

AGENT = """
import asyncio, json, sys
from tests.kit.memapi import MemoryNodeApi
from tests.kit.migkit import static
from vgpu_operator import contract
from vgpu_operator.agent import cli, loop  # noqa: F401  (everything `vgpu-operator agent` loads)
from vgpu_operator.agent.kubelet import PodResourcesGuard
from vgpu_operator.agent.smi import NvidiaSmi

def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])

async def main(binary, state, socket):
    driver = NvidiaSmi(binary, env={"FAKE_NVIDIA_SMI_STATE": state})
    layout = static({"profiles": {"3g.40gb": 2}}).to_annotation()
    api = MemoryNodeApi("n1", {contract.ANN_CONFIG: layout})
    options = loop.AgentOptions(resync=3600, guard=PodResourcesGuard(socket, 10))
    agent = loop.Agent(api, driver, options)
    first = await agent.act("start")  # MIG mode on: the kubelet is asked (helper process)
    idle = await agent.act("resync")  # the idle loop's action: nothing changes
    await api.release(static({"profiles": {"1g.10gb": 7}}).to_annotation())
    third = await agent.act("config")  # destroys: the kubelet is asked (helper process)
    print(json.dumps({
        "states": [first.state, idle.state, third.state],
        "grpc": sorted(m for m in sys.modules if m == "grpc" or m.startswith("grpc.")),
        "rss_kib": rss(),
    }))

asyncio.run(main(*sys.argv[1:]))
"""


def test_the_agent_never_imports_grpc(fake_node: Make) -> None:
    node = fake_node("A100-SXM4-80GB", 1)
    double = PodResourcesDouble(socket_path()).start()
    try:
        run = subprocess.run(
            [sys.executable, "-c", AGENT, str(node.binary), str(node.state), double.socket],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        got = json.loads(run.stdout.strip().splitlines()[-1])
        assert got["states"] == ["success", "success", "success"], got
        assert got["grpc"] == [], got
        assert double.calls == 2  # before the mode change and before the destroys; never idle
    finally:
        double.stop()

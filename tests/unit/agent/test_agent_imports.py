"""What `vgpu-operator agent` loads: its own code, not the controller's. The agent runs on every
GPU node for as long as the node lives, so every module it imports is paid for once per node
(bench/agent_cost.py measures it). Each check runs in a fresh interpreter, as the chart starts
the agent: the console script's parser built for `agent`, then the modules `run_agent` imports."""

from __future__ import annotations

import json
import subprocess
import sys

from vgpu_operator.commands import cli

PROBE = """
import contextlib, io, json, sys
from vgpu_operator.commands import cli
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    cli.main(["agent", "--help"])
from vgpu_operator import endpoints, health
from vgpu_operator.agent import kubelet, loop, metrics, nodeapi, smi
from vgpu_operator.kubeapi import lite, source
# vgpu_operator puts lazy placeholders for kubernetes-asyncio's client packages in sys.modules
# (vgpu_operator.lazy_client): names only, the library is not imported through them here
print(json.dumps(sorted(m for m, v in sys.modules.items() if type(v).__name__ != "LazyPackage")))
"""
# Never needed by an idle agent: the controller's frame and core, the CLI's other subcommands,
# the kubelet's gRPC (its PodResources call is a subprocess of its own, agent/podresources_call.py),
# the controller's API client and its web and metrics libraries (the agent's own are kubeapi.lite,
# vgpu_operator.endpoints and vgpu_operator.exposition), PyYAML (a kubeconfig in YAML loads it;
# in its pod the agent reads none).
NOT_LOADED = (
    "kopf",
    "grpc",
    "ruamel",
    "aiohttp",
    "kubernetes_asyncio",
    "prometheus_client",
    "yaml",
    "vgpu_operator.kubeapi.aio",
    "vgpu_operator.kubeapi.watch",
    "vgpu_operator.kubeapi.credentials",
    "vgpu_operator.controller",
    "vgpu_operator.core.rules",
    "vgpu_operator.core.volcano",
    "vgpu_operator.core.rollout",
    "vgpu_operator.commands.doctor",
    "vgpu_operator.commands.validate",
    "vgpu_operator.commands.plan",
    "vgpu_operator.commands.cleanup",
    "vgpu_operator.models.config",
)


def test_the_agent_loads_none_of_the_controller() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    modules = json.loads(out.stdout)
    assert "vgpu_operator.agent.loop" in modules
    loaded = [m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_LOADED)]
    assert loaded == []


def test_the_agent_alone_parses_as_the_whole_command_line_does() -> None:
    alone, whole = cli.build_parser("agent"), cli.build_parser()
    for argv in (
        ["agent", "--node", "n", "--resync=5", "--metrics-port=9091", "--pod-resources-socket="],
        ["agent", "--once", "--log-format", "json", "-v"],
    ):
        assert alone.parse_args(argv) == whole.parse_args(argv)

    def subparser(parser: object) -> str:
        (action,) = [a for a in parser._actions if a.dest == "command"]  # type: ignore[attr-defined]
        return str(action.choices["agent"].format_help())

    assert subparser(alone) == subparser(whole)
    assert alone.format_usage() == whole.format_usage()

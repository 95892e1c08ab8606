"""`vgpu-operator agent`: arguments, their environment defaults, and the demo's agent plumbing."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from vgpu_devcluster.agentproc import AgentProcess, FakeGpus, fake_model
from vgpu_devcluster.demo import node_table
from vgpu_devcluster.fakesmi_models import FAKE_MODELS
from vgpu_devcluster.nodes import GPU_MODELS
from vgpu_operator.agent.cli import add_subcommand, cmd_agent
from vgpu_operator.commands import cli


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_subcommand(parser.add_subparsers())
    return parser.parse_args(["agent", *argv])


def test_defaults_come_from_the_downward_api_and_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-7")
    monkeypatch.setenv("VGPU_NVIDIA_SMI", "/usr/local/nvidia/bin/nvidia-smi")
    args = parse()
    assert (args.node, args.nvidia_smi) == ("gpu-7", "/usr/local/nvidia/bin/nvidia-smi")
    assert (args.resync, args.retry, args.timeout, args.once) == (300.0, 30.0, 60.0, False)
    args = parse("--node", "n", "--nvidia-smi", "/x", "--resync", "5", "--once")
    assert (args.node, args.nvidia_smi, args.resync, args.once) == ("n", "/x", 5.0, True)
    monkeypatch.delenv("VGPU_NVIDIA_SMI")
    assert parse().nvidia_smi == "nvidia-smi"


def test_no_node_name_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert cmd_agent(parse()) == 2


def test_the_main_cli_has_the_agent_subcommand() -> None:
    args = cli.build_parser().parse_args(["agent", "--node", "n1", "--once"])
    assert args.func is cmd_agent and args.node == "n1"


def test_every_simulated_gpu_model_has_a_fake() -> None:
    for key, model in GPU_MODELS.items():
        assert FAKE_MODELS[fake_model(key)].nvml_name == model.nvml_name


def test_agent_subprocess_command_line(tmp_path: Path) -> None:
    gpus = FakeGpus.create(tmp_path / "n1", "n1", "H200", 2)
    assert [g["model"] for g in gpus.load()["gpus"]] == ["H200", "H200"]
    agent = AgentProcess("n1", tmp_path / "kc", gpus, tmp_path / "log", resync=60, once=True)
    argv = agent.argv()
    assert argv[1:5] == ["-m", "vgpu_operator.commands.cli", "agent", "--node"]
    assert argv[argv.index("--nvidia-smi") + 1] == str(gpus.binary)
    assert "--resync=60" in argv and argv[-1] == "--once"


def test_the_demo_table_shows_the_agent_state() -> None:
    def node(name: str, state: str | None) -> dict[str, object]:
        labels = {"vgpu.volcano.sh/state": state} if state else {}
        return {"metadata": {"name": name, "labels": labels, "annotations": {}}}

    rows = [
        line.split() for line in node_table([node("a", "blocked"), node("b", None)]).splitlines()
    ]
    assert rows[0][-1] == "STATE"
    assert (rows[1][0], rows[1][-1]) == ("a", "blocked")
    assert (rows[2][0], rows[2][-1]) == ("b", "-")

"""Helpers for the agent tests: the reference samples and fake nvidia-smi nodes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vgpu_operator.agent.smi import NvidiaSmi
from vgpu_operator.devcluster import fakesmi_state as fs

SAMPLES = Path(__file__).parent / "samples"
REFERENCE = Path(__file__).resolve().parents[4] / "shared" / "reference" / "mig-anchors.md"


def sample(name: str) -> str:
    """A sample copied verbatim from mig-anchors.md §3 (test_agent_samples checks the copy)."""
    return (SAMPLES / name).read_text()


@dataclass
class FakeNode:
    """A simulated GPU node: its state file, its `nvidia-smi` and a driver pointed at it."""

    state: Path
    binary: Path
    driver: NvidiaSmi

    def log(self) -> list[dict[str, object]]:
        return fs.read_log(self.state)

    def count(self, effect: str) -> int:
        return fs.count_effect(self.state, effect)

    def calls(self, flag: str) -> int:
        return sum(1 for e in self.log() if flag in e["argv"])  # type: ignore[operator]

    def load(self) -> fs.NodeState:
        return fs.load(self.state)


def make_node(
    tmp_path: Path, model: str, count: int, timeout: float = 20.0, **kwargs: object
) -> FakeNode:
    """A fake node under `tmp_path` with `count` GPUs of `model` (fakesmi_state.init_state)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    binary = fs.write_wrapper(bindir)
    state = tmp_path / f"{model.replace(' ', '_')}-{count}.json"
    fs.init_state(state, model, count, **kwargs)  # type: ignore[arg-type]
    env = {fs.ENV_STATE: str(state)}
    return FakeNode(state, binary, NvidiaSmi(str(binary), timeout=timeout, env=env))

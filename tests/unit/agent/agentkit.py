"""Helpers for the agent tests: the reference samples and fake nvidia-smi nodes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.agent.smi import NvidiaSmi

SAMPLES = Path(__file__).parent / "samples"
REFERENCE = Path(__file__).resolve().parents[4] / "shared" / "reference" / "mig-anchors.md"
TRANSCRIPTS = Path(__file__).parent / "transcripts"

_YOKATAYAMA = (
    "yokatayama/e-learning@5b608b49540d4476a3f7f021e0664b8495ed7111:"
    "vmware/tkgs/nvidia-ai-enterprise/mig-enabled/README.md (A100-PCIE-40GB, driver 510.47.03)"
)
# Where each file in transcripts/ was seen: real nvidia-smi output, copied as printed (an
# `_excerpt` is a contiguous part of a longer listing; "reconstructed" says from what).
SOURCES: dict[str, str] = {
    "h100_cgi15_C.txt": "the comment block of a public shell script in GitHub's code index "
    "(repository not recorded), NVIDIA H100 80GB HBM3",
    "a100_cgi19_cci.txt": "https://github.com/rapidsai/dask-cuda/issues/583 (A100, AWS p4d)",
    "lcip_a100_pcie_40gb_r510.txt": _YOKATAYAMA,
    "lgip_a100_pcie_40gb_r510.txt": _YOKATAYAMA,
    "lgip_h200_gpu2_excerpt.txt": "https://github.com/NVIDIA/mig-parted/issues/120 (NVIDIA H200)",
    "lgip_h100_nvl_excerpt.txt": "https://github.com/NVIDIA/gpu-operator/pull/900 (H100 NVL)",
    "lgip_gh200_144g_excerpt.txt": "https://github.com/NVIDIA/mig-parted/pull/139 (GH200 144G)",
    "reset_in_use_r450.txt": "https://github.com/NVIDIA/gpu-operator/issues/118 "
    "(`nvidia-smi --gpu-reset` while nvidia-persistenced holds the GPU)",
    "reset_unable_old.txt": "a public capture of `nvidia-smi --gpu-reset -i 0` with a CUDA "
    "process on the GPU (repository not recorded)",
}


def sample(name: str) -> str:
    """A sample copied verbatim from mig-anchors.md §3 (test_agent_samples checks the copy)."""
    return (SAMPLES / name).read_text()


def transcript(name: str) -> str:
    """Real nvidia-smi output from transcripts/; its source is SOURCES[name]."""
    assert name in SOURCES, f"{name}: no source recorded"
    return (TRANSCRIPTS / name).read_text()


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

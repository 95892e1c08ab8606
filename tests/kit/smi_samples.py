"""Helpers for the agent and fake nvidia-smi tests: real nvidia-smi output
(tests/data/nvidia-smi/samples/ and transcripts/) and fake nvidia-smi nodes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from vgpu_devcluster import fakesmi
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.agent.smi import NvidiaSmi

SAMPLES = Path(__file__).parents[1] / "data" / "nvidia-smi" / "samples"
TRANSCRIPTS = Path(__file__).parents[1] / "data" / "nvidia-smi" / "transcripts"

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
    # models.gpu_catalog_unconfirmed: each listing as far as its public copy goes
    "lgip_h100_nvl_excerpt.txt": "https://github.com/NVIDIA/gpu-operator/pull/900 (H100 NVL)",
    "lgip_gh200_144g_excerpt.txt": "https://github.com/NVIDIA/mig-parted/pull/139 (GH200 144G)",
    "lgip_b200_excerpt.txt": "https://github.com/NVIDIA/mig-parted/pull/166 (B200; the same "
    "listing in https://github.com/NVIDIA/gpu-operator/pull/1242)",
    "lgip_b200_second_excerpt.txt": "https://github.com/NVIDIA/mig-parted/pull/187 (B200, another "
    "driver: 1g.23gb 20.50 GiB; the same in https://github.com/NVIDIA/gpu-operator/pull/1351)",
    "lgip_gb200_excerpt.txt": "https://github.com/NVIDIA/mig-parted/issues/227 (a production "
    "GB200)",
    "lgip_gb200_early_excerpt.txt": "https://github.com/NVIDIA/gpu-operator/pull/1303 (an earlier "
    "GB200 board, whose 1g profile was named 1g.24gb)",
    "lgip_rtx_pro_6000_gpu1_excerpt.txt": "https://github.com/bigstack-oss/cubecos/issues/312 "
    "(RTX PRO 6000 Blackwell, GPU 1 of the node)",
    "lgip_rtx_pro_6000_gpu2_excerpt.txt": "https://github.com/bigstack-oss/cubecos/issues/312 "
    "(RTX PRO 6000 Blackwell, GPU 2 of the node)",
    "lgip_rtx_pro_6000_gcp_excerpt.txt": "https://github.com/GoogleCloudPlatform/"
    "container-engine-accelerators/pull/564 (RTX PRO 6000 Blackwell)",
    "reset_in_use_r450.txt": "https://github.com/NVIDIA/gpu-operator/issues/118 "
    "(`nvidia-smi --gpu-reset` while nvidia-persistenced holds the GPU)",
    "reset_unable_old.txt": "a public capture of `nvidia-smi --gpu-reset -i 0` with a CUDA "
    "process on the GPU (repository not recorded)",
}


# Where each file in samples/ was seen: nvidia-smi output as NVIDIA's MIG user guide and public
# issues print it, copied verbatim (samples/SHA256SUMS pins each copy; test_agent_parse checks it).
# The fake nvidia-smi is tested against these character for character (test_fakesmi_golden).
MIG_USER_GUIDE = (
    "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html"
)
SAMPLE_SOURCES: dict[str, str] = {
    "create_cgi_9_3g.txt": f"{MIG_USER_GUIDE} (`nvidia-smi mig -cgi 9,3g.20gb -C`, A100-40GB)",
    "create_insufficient.txt": f'{MIG_USER_GUIDE}, "Example 2: Creation of a 3-2-1-1 geometry" '
    "(`-cgi 19,19,14,9` on A100-40GB)",
    "destroy_ci.txt": f"{MIG_USER_GUIDE} (`nvidia-smi mig -dci`)",
    "destroy_gi.txt": f"{MIG_USER_GUIDE} (`nvidia-smi mig -dgi`)",
    "destroy_in_use.txt": f"{MIG_USER_GUIDE} (`nvidia-smi mig -dgi` on a GPU instance in use)",
    "lci.txt": "a public capture of `nvidia-smi mig -lci` on an H100 (repository not recorded)",
    "lgi_legacy.txt": f"{MIG_USER_GUIDE} (`nvidia-smi mig -lgi` after two 3g.20gb)",
    "lgip_legacy_a100_40gb_r510.txt": f"{_YOKATAYAMA}: transcripts/lgip_a100_pcie_40gb_r510.txt "
    "with the rows between 2g.10gb and 7g.40gb elided as `...`",
    "lgipp_a100.txt": f"{MIG_USER_GUIDE} (`nvidia-smi mig -lgipp`, A100)",
    "list_gpus_h100.txt": "NVIDIA/cloud-native-docs@52dcb7b8d956:"
    "gpu-operator/manifests/output/mig-mixed-nvidia-smi.txt (`nvidia-smi -L`, H100 80GB HBM3)",
    "mode_disable.txt": f"{MIG_USER_GUIDE} (`nvidia-smi -i 0 -mig 0`)",
    "mode_enable.txt": f"{MIG_USER_GUIDE} (`nvidia-smi -i 0 -mig 1`)",
    "mode_pending_in_use.txt": "https://github.com/NVIDIA/gpu-operator/issues/118 (the same "
    "text in https://github.com/NVIDIA/gpu-operator/issues/1845)",
    "mode_pending_passthrough.txt": f"{MIG_USER_GUIDE} (`-mig 1` in a passthrough VM, where "
    "the GPU cannot be reset)",
    "query_bus_mode.txt": f"{MIG_USER_GUIDE} "
    "(`nvidia-smi -i 0 --query-gpu=pci.bus_id,mig.mode.current --format=csv`)",
    "reset_not_supported.txt": f"{MIG_USER_GUIDE} (`nvidia-smi --gpu-reset` in a passthrough VM)",
    "reset_refused.txt": "https://github.com/NVIDIA/mig-parted/issues/181 "
    "(`nvidia-smi -r` while `nvidia_drm` holds the GPU)",
}

# One-line samples, quoted from their sources (INLINE_SOURCES).
INLINE = {
    "reset_ok": "GPU 00000000:C1:00.0 was successfully reset.",
    "no_gi": "No GPU instances found: Not Found",
    "no_ci": "No compute instances found: Not Found",
    "cci": "Successfully created compute instance on GPU  0 GPU instance ID  1 using profile "
    "MIG 1c.3g.20gb (ID  0)",
    "no_mig": "No MIG-supported devices found.",
}
INLINE_SOURCES = {
    "reset_ok": "https://github.com/NVIDIA/gpu-operator/issues/118",
    "no_gi": "public captures of `nvidia-smi mig -lgi` with no instance (repositories not "
    "recorded; the same wording in each)",
    "no_ci": "public captures of `nvidia-smi mig -lci` with no instance (repositories not "
    "recorded; the same wording in each)",
    "cci": f"{MIG_USER_GUIDE} (`nvidia-smi mig -cci 0,0,0 -gi 1`)",
    "no_mig": "a third-party document on a GPU that is not MIG-capable (UNCONFIRMED: not seen "
    "in NVIDIA's documentation)",
}


def sample(name: str) -> str:
    """A sample copied verbatim from its source, SAMPLE_SOURCES[name]."""
    assert name in SAMPLE_SOURCES, f"{name}: no source recorded"
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


class InProcessSmi:
    """The fake nvidia-smi called in process (`fakesmi.main`, the code its wrapper runs) on a
    state file under `tmp_path`: `smi(*argv)` returns (stdout, exit code)."""

    def __init__(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ):
        self.path = tmp_path / "state.json"
        self.capsys = capsys
        monkeypatch.setenv(fs.ENV_STATE, str(self.path))

    def init(self, model: str, count: int = 1, **kw: object) -> InProcessSmi:
        fs.init_state(self.path, model, count, **kw)  # type: ignore[arg-type]
        return self

    def __call__(self, *args: str) -> tuple[str, int]:
        self.capsys.readouterr()
        rc = fakesmi.main(list(args))
        return self.capsys.readouterr().out, rc

    def gpu(self, i: int = 0) -> fs.GpuState:
        return fs.load(self.path)["gpus"][i]

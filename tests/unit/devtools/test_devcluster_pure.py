"""Pure parts of the local control plane: node manifests, binary cache layout, the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vgpu_devcluster import binaries
from vgpu_devcluster.nodes import GPU_MODELS, NodeSpec, gpu_node_manifest, is_ready
from vgpu_operator import __version__, contract


def test_gpu_node_carries_gfd_labels_and_capacity() -> None:
    node = gpu_node_manifest(NodeSpec(name="n1", model="H100-80GB-HBM3", gpus=8, labels={"a": "b"}))
    labels = node["metadata"]["labels"]
    assert labels[contract.GFD_PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    assert labels[contract.GFD_COUNT] == "8"
    assert labels[contract.GFD_MEMORY] == str(GPU_MODELS["H100-80GB-HBM3"].memory_mib)
    assert labels[contract.GFD_MIG_CAPABLE] == "true"
    assert labels["a"] == "b"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_consumer_gpu_is_not_mig_capable_and_cpu_node_has_no_gpu() -> None:
    rtx = gpu_node_manifest(NodeSpec(name="r", model="RTX-4090", gpus=2))
    assert rtx["metadata"]["labels"][contract.GFD_MIG_CAPABLE] == "false"
    cpu = gpu_node_manifest(NodeSpec(name="c"))
    assert contract.GFD_PRODUCT not in cpu["metadata"]["labels"]
    assert "nvidia.com/gpu" not in cpu["status"]["capacity"]


def test_is_ready_reads_the_ready_condition() -> None:
    assert is_ready({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert not is_ready({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert not is_ready({})


def test_binary_cache_is_keyed_by_tool_and_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    tool = binaries.TOOL_BY_NAME["kube-apiserver"]
    assert binaries.tool_dir(tool) == tmp_path / "vgpu-operator" / "kube-apiserver-v1.35.4"
    assert binaries.tool_dir(binaries.TOOL_BY_NAME["kwok"]).name == "kwok-v0.8.0"


def test_kubebuilder_assets_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("kube-apiserver", "etcd"):
        exe = tmp_path / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    assert binaries.ensure("kube-apiserver") == tmp_path / "kube-apiserver"
    assert binaries.ensure("etcd") == tmp_path / "etcd"
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "missing"))
    with pytest.raises(binaries.BuildError, match="KUBEBUILDER_ASSETS"):
        binaries.ensure("etcd")


def test_wrapper_module_replaces_every_staging_module() -> None:
    gomod = (binaries.wrapper_module_dir() / "go.mod").read_text()
    assert "k8s.io/kubernetes v1.35.4" in gomod
    replaces = [line for line in gomod.splitlines() if "=> k8s.io/" in line]
    assert len(replaces) == 31
    assert all(line.strip().endswith("v0.35.4") for line in replaces)


def test_cli_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "vgpu_operator.commands.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == f"vgpu-operator {__version__}"

"""The simulated HAMi plugin counts a node's GPUs as the real one does: from the hardware (a kwok
node's `nvidia.com/gpu` capacity stands in for NVML), never more than it because a label says
so (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/util/util.go `GetDevices`)."""

from __future__ import annotations

from typing import Any

from vgpu_devcluster.fakeplugin import node_gpus
from vgpu_devcluster.nodes import NodeSpec, gpu_node_manifest
from vgpu_operator import contract


def kwok_node(gpus: int, **labels: str) -> dict[str, Any]:
    return gpu_node_manifest(NodeSpec(name="n1", model="RTX-4090", gpus=gpus, labels=labels))


def test_the_gpus_are_the_hardwares() -> None:
    found = node_gpus(kwok_node(2))
    assert [g.index for g in found] == [0, 1]
    assert len({g.uuid for g in found}) == 2


def test_a_label_claiming_more_gpus_counts_no_further_than_the_hardware() -> None:
    for hostile in ("100000000", "1" * 13):
        node = kwok_node(2, **{contract.GFD_COUNT: hostile})
        assert [g.index for g in node_gpus(node)] == [0, 1]


def test_a_label_claiming_fewer_gpus_is_what_is_registered() -> None:
    node = kwok_node(4, **{contract.GFD_COUNT: "1"})
    assert [g.index for g in node_gpus(node)] == [0]

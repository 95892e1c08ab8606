"""One node's GPU counts cannot stall or poison a configuration pass (core.volcano.node_inputs):
the review's `nvidia.com/gpu.count` values on a static-MIG node with a released configuration and
no inventory (node04: "9"*63 raised OverflowError; node05: 10^12 MemoryError; 10^8 took 3.8 GiB;
node09: 200000 made a 5.2 MiB node-config) are refused, memory stays small, the node's entry
filters every index a policy may name, and the other nodes' entries are written as usual. The
same holds for an inventory or register annotation listing more GPUs than a node may have."""

from __future__ import annotations

import json
import time
import tracemalloc
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.kit import hostile
from tests.kit.volcano_fixtures import findings, gpu_node, healthy, replace
from vgpu_operator import bounds, contract
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.volcano import node_inputs
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.writes import plan_writes
from vgpu_operator.models.inventory import GpuInfo, Inventory
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import MigLayout, MigSpec
from vgpu_operator.models.volcano import REGISTER_ANNOTATION

NOW = datetime(2026, 3, 1, tzinfo=UTC)
STATIC = NodeConfig(
    mode="mig",
    policy="static",
    generation=1,
    mig=MigSpec(partitioning="static", layout=[MigLayout(profiles={"1g.10gb": 7})]),
)
HOSTILE_COUNTS = hostile.GPU_COUNTS
ALL_INDEXES = list(range(bounds.MAX_GPUS_PER_NODE))


def static_node(name: str, count: str | None = None, **annotations: str) -> dict[str, Any]:
    node = gpu_node(name, "H100-80GB-HBM3", 8, released=STATIC, tainted=False)
    if count is not None:
        node["metadata"]["labels"][contract.GFD_COUNT] = count
    node["metadata"]["annotations"].update(annotations)
    return node


def with_nodes(*nodes: dict[str, Any]) -> ClusterSnapshot:
    base = healthy()
    return replace(base, nodes=[*base.nodes, *nodes])


def entries(snapshot: ClusterSnapshot) -> dict[str, dict[str, Any]]:
    plan = plan_writes(snapshot, NOW)
    [write] = [w for w in plan.configmaps if w.name == "volcano-vgpu-node-config"]
    text = write.body["data"]["config.json"]
    assert len(text.encode()) < bounds.CONFIGMAP_DATA_LIMIT
    return {e["name"]: e for e in json.loads(text)["nodeconfig"]}


@pytest.mark.parametrize("count", HOSTILE_COUNTS)
def test_a_hostile_gpu_count_is_refused_and_the_other_nodes_proceed(count: str) -> None:
    snap = with_nodes(static_node("bad", count), static_node("good"))
    tracemalloc.start()
    started = time.perf_counter()
    try:
        gpus = snap.gpus_by_node
        got = entries(snap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 5
    assert peak < 32 * 1024 * 1024  # 10^8 GPUs took 3.8 GiB before
    assert gpus["bad"] is None and gpus["good"] == list(range(8))
    # the refused node's entry filters every index (a HAMi plugin pod there registers nothing);
    # the other static node gets its own GPUs, the vGPU nodes their usual entries
    assert got["bad"]["filterdevices"]["index"] == ALL_INDEXES
    assert got["good"]["filterdevices"]["index"] == list(range(8))
    assert got["gpu-a"]["operatingmode"] == "hami-core"
    assert got["gpu-b"]["operatingmode"] == "mig"
    # a finding names the node and the field; no other node is named
    [finding] = findings(snap, "node-input-bounds")
    assert [(o.kind, o.name) for o in finding.objects] == [("Node", "bad")]
    assert f"label {contract.GFD_COUNT}" in finding.message
    assert f"more than the {bounds.MAX_GPUS_PER_NODE} GPUs" in finding.message
    assert finding.severity == "error"


def test_no_rule_trips_over_a_hostile_count() -> None:
    hami = NodeConfig(mode="hami-core", policy="pool", generation=1)
    vgpu = gpu_node("bad-hami", "RTX-4090", 2, released=hami)
    vgpu["metadata"]["labels"][contract.GFD_COUNT] = "9" * 63  # and no register records yet
    snap = with_nodes(vgpu, *(static_node(f"bad-{i}", c) for i, c in enumerate(HOSTILE_COUNTS)))
    results = run_rules(snap)
    assert not [f for f in results.findings if "could not be evaluated" in f.message]
    named = {o.name for f in results.for_rule("node-input-bounds") for o in f.objects}
    assert named == {"bad-hami", *(f"bad-{i}" for i in range(len(HOSTILE_COUNTS)))}
    # the memory-entry rule does not multiply the count it refused (63 digits x 24564 MiB)
    assert "bad-hami" in {n["metadata"]["name"] for n in snap.vgpu_nodes}
    # only the unit, said always: no entry count from the count it refused
    assert [f.severity for f in results.for_rule("gpu-memory-factor")] == ["info"]


def gpu(index: int) -> GpuInfo:
    return GpuInfo(
        index=index,
        uuid=f"GPU-{index}",
        name="NVIDIA H100 80GB HBM3",
        bus_id=f"0:{index}",
        memory_mib=81559,
        mig_capable=True,
    )


@pytest.mark.parametrize(
    ("inventory", "problem"),
    [
        (Inventory(gpus=[gpu(i) for i in range(bounds.MAX_GPUS_PER_NODE + 1)]), "lists 65 GPUs"),
        (Inventory(gpus=[gpu(0), gpu(10**300)]), "GPU index 100000000000... (301 digits)"),
        (Inventory(gpus=[gpu(-1)]), "GPU index -1, outside 0-63"),
    ],
)
def test_an_inventory_over_the_bound_is_not_used(inventory: Inventory, problem: str) -> None:
    bad = static_node("bad", **{contract.ANN_INVENTORY: inventory.to_annotation()})
    snap = with_nodes(bad, static_node("good"))
    assert node_inputs.gpu_indexes({}, inventory) is None
    got = entries(snap)
    assert got["bad"]["filterdevices"]["index"] == ALL_INDEXES
    assert got["good"]["filterdevices"]["index"] == list(range(8))
    [finding] = findings(snap, "node-input-bounds")
    assert finding.objects[0].name == "bad"
    assert f"annotation {contract.ANN_INVENTORY} (gpus)" in finding.message
    assert problem in finding.message


def test_an_inventory_within_the_bound_gives_the_indexes() -> None:
    inventory = Inventory(gpus=[gpu(3), gpu(1)])
    assert node_inputs.gpu_indexes({contract.GFD_COUNT: "9" * 63}, inventory) == [1, 3]
    assert node_inputs.inventory_problem(inventory) is None


def test_register_records_over_the_bound_are_read_as_unreadable() -> None:
    record = "GPU-{i},10,81559,NVIDIA-NVIDIA H100 80GB HBM3,true,hami-core:"
    raw = "".join(record.format(i=i) for i in range(bounds.MAX_GPUS_PER_NODE + 1))
    node = gpu_node("many", "H100-80GB-HBM3", 8)
    node["metadata"].setdefault("annotations", {})[REGISTER_ANNOTATION] = raw
    snap = with_nodes(node)
    assert snap.registered(node) == []
    [finding] = findings(snap, "node-input-bounds")
    assert finding.objects[0].name == "many"
    assert REGISTER_ANNOTATION in finding.message and "65 GPU records" in finding.message

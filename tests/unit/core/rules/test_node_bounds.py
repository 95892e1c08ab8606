"""The `node-input-bounds` rule: every node over a bound is named with the field, and only it;
a node whose node-config entry would be too large is named with the ConfigMap, and the write
plan leaves its entry out while the other nodes' entries are written."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from tests.kit.volcano_fixtures import findings, gpu_node, healthy, replace
from vgpu_operator import bounds, contract
from vgpu_operator.core.rules import RULES, run_rules
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.writes import plan_writes
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import FilterDevices, HamiCoreSpec

NOW = datetime(2026, 3, 1, tzinfo=UTC)
PLAIN = NodeConfig(mode="hami-core", policy="pool", generation=1)
# what a node's kubelet may write into the node's own `vgpu.volcano.sh/config`: 3,000 UUIDs
FORGED = NodeConfig(
    mode="hami-core",
    policy="pool",
    generation=1,
    hamiCore=HamiCoreSpec(filterDevices=FilterDevices(uuid=[f"GPU-{i:036d}" for i in range(3000)])),
)


def snapshot(*nodes: dict[str, Any]) -> ClusterSnapshot:
    base = healthy()
    return replace(base, nodes=[*base.nodes, *nodes])


def test_the_rule_is_registered_and_a_healthy_cluster_passes_it() -> None:
    assert "node-input-bounds" in RULES
    assert findings(healthy(), "node-input-bounds") == []


def test_an_oversized_entry_is_named_with_the_node_and_the_configmap() -> None:
    big = gpu_node("big", "RTX-4090", 2, released=FORGED)
    snap = snapshot(big, gpu_node("gpu-c", "RTX-4090", 2, released=PLAIN))
    [finding] = findings(snap, "node-input-bounds")
    assert [str(o) for o in finding.objects] == [
        "Node big",
        "ConfigMap kube-system/volcano-vgpu-node-config",
    ]
    assert "config.json entry for big" in finding.message
    assert f"more than the {bounds.MAX_NODE_ENTRY_BYTES}" in finding.message
    # what enforce writes: every other node's entry, not this one
    [write] = [w for w in plan_writes(snap, NOW).configmaps if w.name == "volcano-vgpu-node-config"]
    text = write.body["data"]["config.json"]
    names = {e["name"] for e in json.loads(text)["nodeconfig"]}
    assert "gpu-c" in names and "big" not in names
    assert len(text.encode()) < 64 * 1024
    # and no other rule reports the refused entry as merely out of date
    results = run_rules(snap)
    stale = [f for f in results.for_rule("node-config-rendered") if "big" in f.message]
    assert stale == []
    assert not [f for f in results.findings if "could not be evaluated" in f.message]


def test_each_field_over_its_bound_is_one_finding_naming_it() -> None:
    node = gpu_node("n", "RTX-4090", 2)
    node["metadata"]["labels"][contract.GFD_COUNT] = "1000000000000"
    node["metadata"]["annotations"] = {
        contract.ANN_INVENTORY: json.dumps(
            {
                "gpus": [
                    {
                        "index": i,
                        "uuid": f"GPU-{i}",
                        "name": "NVIDIA GeForce RTX 4090",
                        "bus_id": f"0:{i}",
                        "memory_mib": 24564,
                        "mig_capable": False,
                    }
                    for i in range(100)
                ]
            }
        )
    }
    got = findings(snapshot(node), "node-input-bounds")
    assert all([str(o) for o in f.objects] == ["Node n"] for f in got)
    fields = sorted(f.message.split(": ", 2)[1] for f in got)
    assert fields == [
        f"annotation {contract.ANN_INVENTORY} (gpus)",
        f"label {contract.GFD_COUNT}",
    ]
    assert all(f.fix and f.severity == "error" for f in got)

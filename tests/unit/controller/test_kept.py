"""controller/kept.py: what the Node informer keeps of each Node, and what Nodes share."""

from __future__ import annotations

import json
from typing import Any

from vgpu_operator.controller.kept import indexed_node, kept_node
from vgpu_operator.controller.snapshot import compact_node


def pool_node(name: str) -> dict[str, Any]:
    body = {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"kubernetes.io/hostname": name, "pool": "a"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"taints": [{"key": "vgpu.volcano.sh/pool", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "64", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "63", "nvidia.com/gpu": "8"},
            "images": [{"names": ["a"], "sizeBytes": 1}],
        },
    }
    decoded: dict[str, Any] = json.loads(json.dumps(body))  # decoded apart, as events are
    return decoded


def test_a_pools_nodes_share_what_they_repeat() -> None:
    """Two Nodes of one pool: equal annotations, taints, capacity and allocatable are one object
    each, the facts hold the kept Node's labels and taints, and what is kept is the compact Node
    (no managedFields, no images)."""
    a, b = indexed_node(pool_node("gpu-1")), indexed_node(pool_node("gpu-2"))
    assert a.obj == compact_node(pool_node("gpu-1"))
    assert "managedFields" not in a.obj["metadata"] and "images" not in a.obj["status"]
    assert a.obj["metadata"]["annotations"] is b.obj["metadata"]["annotations"]
    assert a.obj["spec"]["taints"] is b.obj["spec"]["taints"]
    for key in ("capacity", "allocatable"):
        assert a.obj["status"][key] is b.obj["status"][key], key
    assert a.obj["metadata"]["labels"] is not b.obj["metadata"]["labels"]  # the hostname differs
    assert a.facts.labels is a.obj["metadata"]["labels"]
    assert a.facts.taints[0] is a.obj["spec"]["taints"][0]
    assert a.facts.capacity is b.facts.capacity and dict(a.facts.capacity) == {
        "nvidia.com/gpu": "8"
    }


def test_a_node_whose_part_differs_keeps_its_own() -> None:
    other = pool_node("gpu-3")
    other["status"]["capacity"]["nvidia.com/gpu"] = "4"
    a, c = kept_node(pool_node("gpu-1")), kept_node(other)
    assert c["status"]["capacity"] == {"cpu": "64", "nvidia.com/gpu": "4"}
    assert a["status"]["capacity"] is not c["status"]["capacity"]
    assert a["status"]["allocatable"] is c["status"]["allocatable"]

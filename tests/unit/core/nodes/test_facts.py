"""core/nodes/facts.py `node_facts`: what the facts keep of a Node, and what they share with it."""

from __future__ import annotations

import json
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts


def node(labels: dict[str, Any], annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {
        "metadata": {"name": "gpu-1", "labels": labels, "annotations": annotations or {}},
        "status": {"capacity": {"cpu": "64", "nvidia.com/gpu": "8"}},
    }
    decoded: dict[str, Any] = json.loads(json.dumps(body))  # as a watch event decodes it
    return decoded


def test_the_facts_share_a_decoded_nodes_labels() -> None:
    """The controller keeps each Node and its facts: a decoded Node's labels (all strings) are
    not copied, so 5,000 Nodes do not hold their labels twice."""
    raw = node({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "pool": "a"})
    facts = node_facts(raw)
    assert facts.labels is raw["metadata"]["labels"]
    assert dict(facts.capacity) == {"nvidia.com/gpu": "8"}
    assert not hasattr(facts, "__dict__")  # slots: no dict per Node


def test_labels_that_are_not_all_strings_are_copied_as_strings() -> None:
    raw = {"metadata": {"name": "gpu-1", "labels": {"a": 1, "b": None, "c": "x"}}}
    facts = node_facts(raw)
    assert dict(facts.labels) == {"a": "1", "c": "x"}
    assert facts.labels is not raw["metadata"]["labels"]


def test_only_the_contracts_annotations_are_kept() -> None:
    other = node({}, {"kwok.x-k8s.io/node": "fake"})
    assert dict(node_facts(other).annotations) == {}
    assert dict(node_facts(other).errors) == {}
    owned = node({}, {contract.ANN_OWNED: "not json", "kwok.x-k8s.io/node": "fake"})
    facts = node_facts(owned)
    assert list(facts.annotations) == [contract.ANN_OWNED]
    assert contract.ANN_OWNED in facts.errors

"""Structural-schema rules, checked on the generated CRD and shown to catch violations."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from vgpu_operator.crdcheck import check_structural
from vgpu_operator.crdgen import policy_crd

SCHEMA = policy_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def schema_nodes(node: dict[str, Any], path: str = "root") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every node that is a field, an array item or a map value (the ones needing a type)."""
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from schema_nodes(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_nodes(node["additionalProperties"], f"{path}.*")


def test_every_node_has_a_type_except_where_kubernetes_allows_none() -> None:
    untyped = []
    for path, node in schema_nodes(SCHEMA):
        if "type" in node:
            assert node["type"] in ("object", "array", "string", "integer", "number", "boolean")
            continue
        exempt = node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields"
        )
        assert exempt, f"{path} has no type"
        untyped.append(path)
    # the documented exception: MigLayout.gpus, "all" | [int] (mig's layout and a dra pool's);
    # and the int-or-string rollout.maxUnavailable (a count or a percent, as a Deployment's)
    assert untyped == [
        "root.spec.mig.layout[].gpus",
        "root.spec.dra.layout[].gpus",
        "root.spec.rollout.maxUnavailable",
    ]


def test_generated_crd_passes_the_checker() -> None:
    assert check_structural(SCHEMA) == []


def test_status_is_fully_specified_so_nothing_is_pruned() -> None:
    status = SCHEMA["properties"]["status"]
    for path, node in schema_nodes(status, "status"):
        assert not node.get("x-kubernetes-preserve-unknown-fields"), path
        if node.get("type") == "object":
            assert "properties" in node or "additionalProperties" in node, path


GOOD = {"type": "object", "properties": {"a": {"type": "string"}}}


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "object", "properties": {"a": {}}}, "openAPIV3Schema.a: type is missing"),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "needs items"),
        ({"type": "object", "properties": {"a": {"$ref": "#/x"}}}, "$ref is not allowed"),
        ({"type": "object", "properties": {"a": {"type": "string", "title": "A"}}}, "title"),
        ({"type": "object", "properties": {"a": {"type": "null"}}}, "null type"),
        ({"type": "string"}, "the root must be an object"),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "additionalProperties": {"type": "string"},
            },
            "properties and additionalProperties together",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "a": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                },
            },
            "type must not be set inside a junctor",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "object", "anyOf": [{"properties": {"b": {}}}]}},
            },
            "property b is not specified outside the junctor",
        ),
        (
            {"type": "object", "properties": {"n": {"type": "number", "exclusiveMinimum": 0}}},
            "exclusiveMinimum must be a boolean",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "l": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["k"],
                        "items": {"type": "object", "properties": {"k": {"type": "string"}}},
                    }
                },
            },
            "list-map key k is neither required nor defaulted",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "propertyNames": {}}}},
            "unknown key propertyNames",
        ),
    ],
)
def test_checker_catches_non_structural_schemas(schema: dict[str, Any], problem: str) -> None:
    assert check_structural(GOOD) == []
    found = check_structural(schema)
    assert any(problem in p for p in found), found

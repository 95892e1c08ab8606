"""Structural-schema rules of apiextensions, checked before a CRD is written (and by tests).

A schema the apiserver would refuse as non-structural fails here first, with the same wording
where it can, so `vgpu-operator crds` never writes a CRD that cannot be installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Keys a CRD's JSONSchemaProps accepts, besides the x-kubernetes-* extensions.
ALLOWED_KEYS = frozenset(
    {
        "description", "type", "format", "default", "enum", "nullable",
        "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum", "multipleOf",
        "maxLength", "minLength", "pattern", "maxItems", "minItems",
        "maxProperties", "minProperties", "required", "items", "properties",
        "additionalProperties", "allOf", "anyOf", "oneOf", "not",
    }
)  # fmt: skip
_JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
_FORBIDDEN_IN_JUNCTOR = (
    "type",
    "description",
    "default",
    "nullable",
    "title",
    "additionalProperties",
)


def check_structural(schema: Mapping[str, Any]) -> list[str]:
    """Problems that would make the apiserver reject `schema` as non-structural (empty if none).

    Follows apiextensions' rules: a type on every node (root, properties, items,
    additionalProperties) except int-or-string and preserve-unknown-fields nodes; arrays have
    items; no `$ref`, `title`, `const`, `patternProperties`, null types; `properties` and
    `additionalProperties` not together; inside junctors no type, description, default,
    nullable, additionalProperties or x-kubernetes-* keys, and every property or items named
    there also specified outside; list-map keys required or defaulted.
    """
    problems: list[str] = []
    _check(schema, "openAPIV3Schema", problems, root=True)
    return problems


def _check(node: Mapping[str, Any], path: str, problems: list[str], root: bool = False) -> None:
    for key in node:
        if key in ("$ref", "title", "const", "patternProperties", "$defs", "definitions"):
            problems.append(f"{path}: {key} is not allowed")
        elif key not in ALLOWED_KEYS and not key.startswith("x-kubernetes-"):
            problems.append(f"{path}: unknown key {key}")
    typ = node.get("type")
    exempt = node.get("x-kubernetes-int-or-string") or node.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if typ is None and not exempt:
        problems.append(f"{path}: type is missing")
    if typ == "null" or node.get("nullable") is False:
        problems.append(f"{path}: null type")
    if root and typ != "object":
        problems.append(f"{path}: the root must be an object")
    if typ == "array" and "items" not in node:
        problems.append(f"{path}: an array needs items")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties together")
    if root and "additionalProperties" in node:
        problems.append(f"{path}: additionalProperties at the root")
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in node and not isinstance(node[key], bool):
            problems.append(f"{path}: {key} must be a boolean")
    if node.get("x-kubernetes-list-type") == "map":
        items = node.get("items", {})
        for key in node.get("x-kubernetes-list-map-keys", []):
            if key not in items.get("required", []) and "default" not in items.get(
                "properties", {}
            ).get(key, {}):
                problems.append(f"{path}: list-map key {key} is neither required nor defaulted")
    for name, sub in node.get("properties", {}).items():
        _check(sub, f"{path}.{name}", problems)
    if isinstance(node.get("items"), Mapping):
        _check(node["items"], f"{path}[]", problems)
    if isinstance(node.get("additionalProperties"), Mapping):
        _check(node["additionalProperties"], f"{path}.*", problems)
    for junctor in _JUNCTORS:
        subs = node.get(junctor)
        if subs is None:
            continue
        for i, sub in enumerate(subs if isinstance(subs, list) else [subs]):
            _check_junctor(sub, node, f"{path}.{junctor}[{i}]", problems)


def _check_junctor(
    node: Mapping[str, Any], outside: Mapping[str, Any], path: str, problems: list[str]
) -> None:
    int_or_string = outside.get("x-kubernetes-int-or-string") and node in (
        {"type": "integer"},
        {"type": "string"},
    )
    for key in node:
        if key in _FORBIDDEN_IN_JUNCTOR and not int_or_string:
            problems.append(f"{path}: {key} must not be set inside a junctor")
        if key.startswith("x-kubernetes-"):
            problems.append(f"{path}: {key} must not be set inside a junctor")
    for name, sub in node.get("properties", {}).items():
        if name not in outside.get("properties", {}):
            problems.append(f"{path}: property {name} is not specified outside the junctor")
        else:
            _check_junctor(sub, outside["properties"][name], f"{path}.{name}", problems)
    if "items" in node:
        if "items" not in outside:
            problems.append(f"{path}: items is not specified outside the junctor")
        else:
            _check_junctor(node["items"], outside["items"], f"{path}[]", problems)

"""A small validator for the subset of OpenAPI v3 the generated CRD uses, applied the way the
apiserver applies it (value validations per type, list-map uniqueness, unknown fields under
strict field validation). CEL rules are not evaluated here: the models mirror them."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

Error = tuple[str, str]  # (field path, message)

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def validate(value: Any, schema: Mapping[str, Any], path: str, strict: bool = True) -> list[Error]:
    if value is None:
        return []  # the apiserver drops nulls of non-nullable fields before validating
    typ = schema.get("type")
    if typ is not None:
        ok = isinstance(value, _TYPES[typ]) and not (
            typ in ("integer", "number") and isinstance(value, bool)
        )
        if not ok:
            return [(path, f"Invalid value: must be of type {typ}")]
    elif schema.get("x-kubernetes-int-or-string") and not isinstance(value, (int, str)):
        return [(path, "must be an integer or a string")]
    errors: list[Error] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append((path, f"Unsupported value: {value!r}"))
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append((path, f"should match '{schema['pattern']}'"))
        if len(value) > schema.get("maxLength", len(value)):
            errors.append((path, "Too long"))
        if len(value) < schema.get("minLength", 0):
            errors.append((path, "Too short"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and (value <= low if schema.get("exclusiveMinimum") else value < low):
            errors.append((path, f"should be greater than {low}"))
        if high is not None and (value >= high if schema.get("exclusiveMaximum") else value > high):
            errors.append((path, f"should be less than {high}"))
    if isinstance(value, list):
        errors += _array(value, schema, path, strict)
    if isinstance(value, dict):
        errors += _object(value, schema, path, strict)
    return errors


def _array(value: list[Any], schema: Mapping[str, Any], path: str, strict: bool) -> list[Error]:
    errors: list[Error] = []
    if len(value) > schema.get("maxItems", len(value)):
        errors.append((path, "Too many"))
    if len(value) < schema.get("minItems", 0):
        errors.append((path, "Too few"))
    items = schema.get("items")
    if items is not None:
        for i, item in enumerate(value):
            errors += validate(item, items, f"{path}[{i}]", strict)
    if schema.get("x-kubernetes-list-type") == "map":
        keys = schema["x-kubernetes-list-map-keys"]
        seen: set[tuple[Any, ...]] = set()
        for i, item in enumerate(value):
            key = tuple(item.get(k) for k in keys)
            if key in seen:
                errors.append(
                    (f"{path}[{i}]", f"Duplicate value: {dict(zip(keys, key, strict=True))}")
                )
            seen.add(key)
    return errors


def _object(
    value: dict[str, Any], schema: Mapping[str, Any], path: str, strict: bool
) -> list[Error]:
    errors: list[Error] = []
    for key in schema.get("required", []):
        if key not in value:
            errors.append((f"{path}.{key}", "Required value"))
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    if len(value) > schema.get("maxProperties", len(value)):
        errors.append((path, "Too many properties"))
    for key, sub in value.items():
        child = f"{path}.{key}"
        if props is not None and key in props:
            errors += validate(sub, props[key], child, strict)
        elif isinstance(extra, Mapping):
            errors += validate(sub, extra, child, strict)
        elif (
            strict and props is not None and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            errors.append((child, f'unknown field "{child}"'))
    return errors


def cel_rules(schema: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, str]]]:
    """Every CEL rule with the field path its errors name (`[]` for any list index)."""
    for rule in schema.get("x-kubernetes-validations", []):
        yield path + rule.get("fieldPath", ""), rule
    for key, sub in schema.get("properties", {}).items():
        yield from cel_rules(sub, f"{path}.{key}" if path else key)
    if isinstance(schema.get("items"), Mapping):
        yield from cel_rules(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from cel_rules(schema["additionalProperties"], f"{path}.*")


def generic(path: str) -> str:
    """`spec.mig.layout[0].profiles` -> `spec.mig.layout[].profiles`."""
    return re.sub(r"\[\d+\]", "[]", path)

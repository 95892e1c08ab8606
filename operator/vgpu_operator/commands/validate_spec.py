"""A VGPUNodePolicy spec's model errors as the apiserver would say them (`vgpu-operator
validate`): each at the field the apiserver names, found by walking pydantic's location through
the document (a union member's tag is no field), a CEL rule's twin (models.admission) with the
rule's message and expression, a map key's pattern with the CEL rule crdgen made of it, and a
value of a type a typeless CRD node does not check (crdgen's `gpus` union) as the operator's.
The CRD schema itself is read from crdgen, the same as `vgpu-operator crds` prints."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, Literal

from pydantic import ValidationError

from vgpu_operator.crdgen import policy_crd
from vgpu_operator.models.admission import AdmissionRule, PolicyModel

Who = Literal["apiserver", "operator"]
Part = str | int

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LEADING_FIELD = re.compile(r"^(spec(?:\.[A-Za-z]+)+): ")


@dataclass(frozen=True)
class Problem:
    """One problem: the field, what is wrong, the fix, who refuses the document for it
    (`apiserver`: `kubectl apply` fails; `operator`: applied, then the policy stalls or the
    controller does not start; None: nothing reads it), and the CRD's CEL rule it is, if one."""

    field: str
    message: str
    fix: str
    refused_by: Who | None
    rule: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "field": self.field,
            "message": self.message,
            "fix": self.fix,
            "refusedBy": self.refused_by,
        }
        if self.rule is not None:
            out["rule"] = self.rule
        return out


def dotted(prefix: str, parts: Sequence[Part]) -> str:
    """`spec`, `('mig', 'layout', 0, 'gpus')` -> `spec.mig.layout[0].gpus`; a key that is not an
    identifier as `['kubernetes.io/hostname']`."""
    out = prefix
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


@cache
def policy_schema() -> dict[str, Any]:
    """The openAPIV3Schema of the generated VGPUNodePolicy CRD."""
    schema: dict[str, Any] = policy_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def schema_at(parts: Sequence[Part]) -> Mapping[str, Any] | None:
    """The CRD schema node of a path from the object's root (None: the schema has none)."""
    node: Mapping[str, Any] = policy_schema()
    for part in parts:
        if isinstance(part, int):
            below = node.get("items")
        else:
            props = node.get("properties") or {}
            below = props[part] if part in props else node.get("additionalProperties")
        if not isinstance(below, Mapping):
            return None
        node = below
    return node


def explain_path(parts: Sequence[Part]) -> str:
    """What `kubectl explain vnp.<path>` takes: the fields, without list indexes or map keys."""
    names: list[str] = []
    node: Mapping[str, Any] | None = policy_schema()
    for part in parts:
        if node is None or isinstance(part, int):
            node = node.get("items") if node is not None else None
            continue
        props = node.get("properties") or {}
        if part not in props:
            break
        names.append(part)
        node = props[part]
    return ".".join(names)


def _rule_classes(cls: type[PolicyModel]) -> Iterator[type[PolicyModel]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _rule_classes(sub)


@cache
def admission_rules() -> dict[str, AdmissionRule]:
    """Every policy model's AdmissionRule by the error text its model raises."""
    return {r.error(): r for cls in _rule_classes(PolicyModel) for r in cls.RULES}


def unknown_field(field: str, allowed: Sequence[str]) -> Problem:
    return Problem(
        field,
        f'unknown field "{field}"',
        f"remove it or correct its spelling; the fields allowed here are: {', '.join(allowed)}",
        "apiserver",
    )


@dataclass(frozen=True)
class _Located:
    parts: list[Part]  # below `spec`, through the data
    value: Any  # the data at that path
    key: bool  # the error is about the last part as a map key
    tagged: bool  # the location went through a union member's tag


def _holds(data: Any, part: Part) -> bool:
    """`part` is an index (a key) of the list (the mapping) `data`."""
    if isinstance(part, int):
        return isinstance(data, list) and 0 <= part < len(data)
    return isinstance(data, Mapping) and part in data


def _locate(loc: Sequence[Part], data: Any, missing: bool) -> _Located:
    """A pydantic location walked through the data: a part that is no key or index of it is a
    union member's tag (`literal['all']`, `constrained-int`), or, last, a missing field."""
    parts: list[Part] = []
    tagged = False
    for i, part in enumerate(loc):
        if part == "[key]":
            return _Located(parts, data, True, tagged)
        if _holds(data, part):
            parts.append(part)
            data = data[part]
        elif missing and i == len(loc) - 1:
            parts.append(part)
            data = None
        else:
            tagged = True
    return _Located(parts, data, False, tagged)


def _checked_kinds(node: Mapping[str, Any]) -> set[type]:
    """The value types whose validations a typeless CRD node carries (crdgen: a union's
    branches side by side); a value of another type passes the apiserver."""
    kinds: set[type] = set()
    if {"pattern", "enum", "maxLength", "minLength"} & node.keys():
        kinds.add(str)
    if {"items", "maxItems", "minItems"} & node.keys():
        kinds.add(list)
    if {"minimum", "maximum"} & node.keys():
        kinds |= {int, float}
    return kinds


def _refused_by(parts: Sequence[Part], value: Any) -> Who:
    node = schema_at(["spec", *parts])
    typeless = (
        node is not None
        and "type" not in node
        and node.get("x-kubernetes-preserve-unknown-fields")
        and not node.get("x-kubernetes-int-or-string")
    )
    if typeless and node is not None and type(value) not in _checked_kinds(node):
        return "operator"
    return "apiserver"


_FIXES = (
    ("literal_error", "use one of the values named above"),
    ("enum", "use one of the values named above"),
    ("greater_than", "use a value inside the range named above"),
    ("less_than", "use a value inside the range named above"),
    ("string_pattern_mismatch", "use a value of the form the pattern above describes"),
    ("too_long", "use fewer entries or characters"),
    ("too_short", "use more entries or characters"),
    ("missing", "add it"),
)


def _fix(kind: str, explain: str) -> str:
    fix = next((f for prefix, f in _FIXES if kind.startswith(prefix)), "")
    if not fix:
        fix = "give a value of the type named above" if kind.endswith("_type") else "correct it"
    return _explained(fix, explain)


def _explained(fix: str, explain: str) -> str:
    return f"{fix} (kubectl explain vnp.{explain})" if explain else fix


def spec_errors(exc: ValidationError, data: Any) -> list[Problem]:
    """The spec model's errors as problems: each at the field the apiserver names, a CEL
    rule's with the rule's message and expression, a union's branches in one problem."""
    found: list[tuple[Problem, bool, bool]] = []
    for err in exc.errors():
        kind = str(err["type"])
        at = _locate(err["loc"], data, kind == "missing")
        found.append((_problem(err, kind, at), at.tagged and not at.key, _own_type(kind, at)))
    return _merge_unions(found)


def _own_type(kind: str, at: _Located) -> bool:
    """The error of a union branch of the value's own type (a literal's: a string's), which
    says more than the other branches' "should be a valid ..."."""
    if kind == "literal_error":
        return isinstance(at.value, str)
    return not kind.endswith("_type")


def _problem(err: Any, kind: str, at: _Located) -> Problem:
    field = dotted("spec", at.parts)
    explain = explain_path(["spec", *at.parts])
    message = str(err["msg"])
    if at.key:
        return _key_problem(at, message, err.get("ctx") or {})
    if kind == "extra_forbidden":
        parent = schema_at(["spec", *at.parts[:-1]]) or {}
        return unknown_field(field, sorted(parent.get("properties") or {}))
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
        rule = admission_rules().get(message)
        if rule is not None:  # a CEL rule's Python twin (models.admission)
            field += rule.field
            explain = explain_path(["spec", *at.parts, *rule.field.lstrip(".").split(".")])
            fix = f"change {field}, or the fields the message names, so that the rule holds"
            return Problem(field, rule.message, _explained(fix, explain), "apiserver", rule.cel)
        leading = _LEADING_FIELD.match(message)
        if leading:  # a model check naming its field (the CRD's list-map uniqueness)
            field, message = leading.group(1), message[leading.end() :]
    return Problem(field, message, _fix(kind, explain), _refused_by(at.parts, at.value))


def _key_problem(at: _Located, message: str, ctx: Mapping[str, Any]) -> Problem:
    """A map key the model's key pattern refuses: the apiserver's CEL rule on that map
    (crdgen turns a key pattern into `self.all(k, k.matches(P))`) says the same."""
    field = dotted("spec", at.parts[:-1])
    key = at.parts[-1] if at.parts else ""
    node = schema_at(["spec", *at.parts[:-1]]) or {}
    wanted = f"every key must match {ctx.get('pattern')}"
    for rule in node.get("x-kubernetes-validations") or []:
        if rule.get("message") == wanted and "fieldPath" not in rule:
            return Problem(
                field,
                wanted,
                f"rename the key {key!r} to match the pattern",
                "apiserver",
                rule["rule"],
            )
    return Problem(dotted(field, [key]), message, "correct the key", "apiserver")


def _merge_unions(found: list[tuple[Problem, bool, bool]]) -> list[Problem]:
    """A value no branch of a union takes fails each branch: one problem, without the
    branches of another type when a branch of the value's own type says more."""
    order: list[Problem | str] = []
    unions: dict[str, list[tuple[Problem, bool]]] = {}
    for problem, tagged, own in found:
        if not tagged:
            order.append(problem)
            continue
        if problem.field not in unions:
            unions[problem.field] = []
            order.append(problem.field)
        unions[problem.field].append((problem, own))
    out = []
    for item in order:
        if isinstance(item, Problem):
            out.append(item)
            continue
        branches = unions[item]
        telling = [p for p, own in branches if own]
        if not telling and any(_below(other, item) for other in unions):
            continue  # a branch of the value's type went deeper and says what is wrong there
        telling = telling or [p for p, _ in branches]
        messages = "; or ".join(dict.fromkeys(p.message for p in telling))
        operator = all(p.refused_by == "operator" for p in telling)
        out.append(
            replace(
                telling[0], message=messages, refused_by="operator" if operator else "apiserver"
            )
        )
    return out


def _below(field: str, parent: str) -> bool:
    return field.startswith(parent) and field[len(parent) : len(parent) + 1] in ("[", ".")


def list_map_duplicates(data: Any) -> list[Problem]:
    """Entries of a list-map (`x-kubernetes-list-type: map`) of the spec with the keys of an
    earlier one: the apiserver's "Duplicate value", at the later entry."""
    return list(_duplicates(data, ["spec"]))


def _duplicates(data: Any, parts: list[Part]) -> Iterator[Problem]:
    node = schema_at(parts)
    if node is None:
        return
    if isinstance(data, Mapping):
        for key, value in data.items():
            yield from _duplicates(value, [*parts, key])
    elif isinstance(data, list):
        keys = node.get("x-kubernetes-list-map-keys") or []
        seen: set[str] = set()
        for i, item in enumerate(data):
            if node.get("x-kubernetes-list-type") == "map" and isinstance(item, Mapping):
                ident = {k: item.get(k) for k in keys}
                text = json.dumps(ident, sort_keys=True)
                if text in seen:
                    yield Problem(
                        dotted("", [*parts, i]),
                        f"Duplicate value: {text}",
                        f"keep one entry per {' and '.join(keys)}",
                        "apiserver",
                    )
                seen.add(text)
            yield from _duplicates(item, [*parts, i])

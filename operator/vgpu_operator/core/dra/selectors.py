"""The simple CEL selectors of DRA, read without a CEL interpreter, and what a DeviceClass says
with them: which driver's devices it selects and which extended resource it maps. Pure.

Selectors are CEL. Only the simple forms the driver's DeviceClasses and examples use are read
(kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/
templates/deviceclass-gpu.yaml, demo/specs/): a conjunction (`&&`) of `device.driver == '...'`
and `device.attributes["<domain>"].<name> == <literal>` (or `!=`; a string, integer or boolean
literal). Any other expression (capacity comparisons, version functions, `||`, parentheses) is
not read: `parse` returns None, and the callers say nothing of what it selects. An attribute a
device does not have makes the expression fail with a runtime error for that device, which is
then never allocated to the claim (the allocator's `selectorsMatch` returns the error:
kubernetes/kubernetes@v1.35.4:staging/src/k8s.io/dynamic-resource-allocation/structured/).

Attribute names: in a slice an unqualified attribute belongs to the slice's driver domain, so
`device.attributes["gpu.nvidia.com"].productName` reads `productName` of a `gpu.nvidia.com`
device, and `device.attributes["resource.kubernetes.io"].pciBusID` the qualified
`resource.kubernetes.io/pciBusID` (kubernetes/api@v0.35.4:resource/v1/types.go
`QualifiedName`, `Device.Attributes`).

A DeviceClass may map an extended resource onto its devices, `spec.extendedResourceName`
(KEP-5004, feature gate DRAExtendedResource: the field is in kubernetes/api@v0.34.0 and later,
alpha and off through 1.35, beta and on from 1.36: kubernetes/api@v0.36.0:resource/v1/types.go
`DeviceClassSpec.ExtendedResourceName`). A pod asking that resource in its containers' requests
is then served by the class's devices on a node whose allocatable does not have the resource
(a device plugin's), through a claim kube-scheduler makes for it. Where the gate is off the
apiserver drops the field, so a class read from a 1.35 cluster maps nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]

_STRING = r"'([^'\\]*)'|\"([^\"\\]*)\""
_LITERAL = rf"(?:{_STRING}|(-?[0-9]+)|(true|false))"
_DRIVER = re.compile(rf"^device\.driver\s*(==|!=)\s*{_LITERAL}$")
_ATTRIBUTE = re.compile(
    rf"^device\.attributes\[(?:{_STRING})\]\.([A-Za-z][A-Za-z0-9_]*)\s*(==|!=)\s*{_LITERAL}$"
)


@dataclass(frozen=True)
class Term:
    """`device.driver` (attribute None) or one attribute compared with a literal."""

    attribute: str | None  # qualified name
    equal: bool
    value: Any


def _literal(groups: Sequence[str | None]) -> Any:
    single, double, number, boolean = groups
    if single is not None:
        return single
    if double is not None:
        return double
    if number is not None:
        return int(number)
    return boolean == "true"


def parse(expression: str) -> list[Term] | None:
    """The terms of a simple selector; None when it is not one of the simple forms."""
    unquoted = re.sub(_STRING, "''", expression)
    if re.search(r"\|\||[()!?:]", unquoted.replace("!=", "==")):
        return None
    terms = []
    for part in expression.split("&&"):
        text = part.strip()
        m = _DRIVER.match(text)
        if m:
            terms.append(Term(None, m.group(1) == "==", _literal(m.groups()[1:5])))
            continue
        m = _ATTRIBUTE.match(text)
        if m is None:
            return None
        domain = m.group(1) if m.group(1) is not None else m.group(2)
        terms.append(Term(f"{domain}/{m.group(3)}", m.group(4) == "==", _literal(m.groups()[4:8])))
    return terms


def matches(driver: str, attributes: Mapping[str, Any], terms: Sequence[Term]) -> bool:
    """Whether a device of `driver` with these attributes (qualified names) passes every
    term."""
    for t in terms:
        if t.attribute is None:
            actual: Any = driver
        elif t.attribute in attributes:
            actual = attributes[t.attribute]
        else:
            return False  # no such attribute: a runtime error, no match
        if (actual == t.value) != t.equal:
            return False
    return True


def expressions(holder: Obj) -> list[str]:
    """The CEL expressions of a DeviceClass's spec or of a request's `exactly`."""
    return [
        str(((s or {}).get("cel") or {}).get("expression") or "")
        for s in holder.get("selectors") or []
    ]


def pinned_to(terms: Iterable[Term], drivers: Iterable[str]) -> str | None:
    """The one of `drivers` these terms select devices of: by `device.driver == '<driver>'`, or
    by an attribute compared for equality in the driver's own domain (a device of another
    driver has no such attribute unless it qualifies it so). None: not pinned to any."""
    wanted = set(drivers)
    terms = list(terms)
    for t in terms:
        if t.attribute is None and t.equal and t.value in wanted:
            return str(t.value)
    for t in terms:
        domain = t.attribute.rpartition("/")[0] if t.attribute is not None else None
        if t.equal and domain in wanted:
            return domain
    return None


def class_name(device_class: Obj) -> str:
    return str((device_class.get("metadata") or {}).get("name"))


def class_driver(device_class: Obj, driver: str) -> bool:
    """Whether the DeviceClass selects devices of `driver` only (its selectors pin it)."""
    parsed = [parse(e) for e in expressions(device_class.get("spec") or {})]
    if not parsed or any(p is None for p in parsed):
        return False
    return pinned_to([t for p in parsed for t in p or ()], [driver]) == driver


def extended_resources(device_classes: Iterable[Obj], driver: str) -> dict[str, tuple[str, ...]]:
    """Extended resource name -> the DeviceClasses of `driver` mapping it
    (`spec.extendedResourceName`); empty where the apiserver drops the field (before 1.36, or
    with DRAExtendedResource off)."""
    out: dict[str, list[str]] = {}
    for dc in device_classes:
        name = (dc.get("spec") or {}).get("extendedResourceName")
        if name and class_driver(dc, driver):
            out.setdefault(str(name), []).append(class_name(dc))
    return {k: tuple(sorted(v)) for k, v in out.items()}

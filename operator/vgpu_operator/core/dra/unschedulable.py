"""Claim pods that can never be scheduled on the DRA pools: pure fit checks of a pending pod's
ResourceClaims against what the cluster's DRA nodes publish. Pure.

A pod asking for a device through a ResourceClaim stays Pending when no node can satisfy its
claim; kube-scheduler says why only in the pod's `FailedScheduling` Events, as "cannot allocate
all claims". `claim_causes(pod, claims, offer)` names each reason that is certain, with the fix:

- `dra-device-class-missing`: a request names a DeviceClass that does not exist (the scheduler
  cannot allocate a claim of an unknown class);
- `dra-no-matching-device`: no device a DRA node publishes passes the request's DeviceClass
  selectors and its own selectors (or no node has as many as the request's count: the devices of
  one claim come from one node's slices).

Selectors are CEL. Only the simple forms the driver's DeviceClasses and examples use are
evaluated (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/
templates/deviceclass-gpu.yaml, demo/specs/): a conjunction (`&&`) of `device.driver == '...'` and
`device.attributes["<domain>"].<name> == <literal>` (or `!=`; a string, integer or boolean
literal). A request with any other selector (capacity comparisons, version functions, `||`,
parentheses) is not evaluated: nothing is said of it, since it might fit. An attribute a device
does not have makes the expression fail with a runtime error for that device, which is then never
allocated to the claim (the allocator's `selectorsMatch` returns the error:
kubernetes/kubernetes@v1.35.4:staging/src/k8s.io/dynamic-resource-allocation/structured/).

Attribute names: in a slice an unqualified attribute belongs to the slice's driver domain, so
`device.attributes["gpu.nvidia.com"].productName` reads `productName` of a `gpu.nvidia.com`
device, and `device.attributes["resource.kubernetes.io"].pciBusID` the qualified
`resource.kubernetes.io/pciBusID` (kubernetes/api@v0.35.4:resource/v1/types.go
`QualifiedName`, `Device.Attributes`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]

# cause id -> the Event reason
REASONS: dict[str, str] = {
    "dra-device-class-missing": "DeviceClassMissing",
    "dra-no-matching-device": "NoMatchingDRADevice",
}


@dataclass(frozen=True)
class ClaimCause:
    id: str  # a key of REASONS
    message: str  # the cause and the fix


@dataclass(frozen=True)
class Device:
    """One published device: its driver, attributes (qualified names) and node."""

    node: str
    driver: str
    name: str
    attributes: Mapping[str, Any]  # "<domain>/<name>" -> the literal value


@dataclass(frozen=True)
class DraOffer:
    """What the DRA nodes publish. `classes`: DeviceClass name -> object; `devices`: every device
    of the DRA nodes' slices (newest pool generation only)."""

    classes: Mapping[str, Obj]
    devices: tuple[Device, ...]
    dra_nodes: tuple[str, ...]


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def _value(attribute: Obj) -> Any:
    for kind in ("string", "int", "bool", "version"):
        if kind in attribute:
            return attribute[kind]
    return None


def offer(
    device_classes: Iterable[Obj], resource_slices: Iterable[Obj], dra_nodes: Iterable[str]
) -> DraOffer:
    """The offer of the DRA nodes: their slices' devices (any driver; the newest generation of
    each pool), every DeviceClass."""
    nodes = tuple(sorted(set(dra_nodes)))
    slices = [s for s in resource_slices if _spec(s).get("nodeName") in nodes]
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        pool = _spec(s).get("pool") or {}
        key = (str(_spec(s).get("driver")), str(pool.get("name")))
        newest[key] = max(newest.get(key, 0), int(pool.get("generation") or 0))
    devices = []
    for s in slices:
        spec, pool = _spec(s), _spec(s).get("pool") or {}
        driver = str(spec.get("driver"))
        if int(pool.get("generation") or 0) != newest[(driver, str(pool.get("name")))]:
            continue
        for d in spec.get("devices") or []:
            attributes = {
                (str(k) if "/" in str(k) else f"{driver}/{k}"): _value(v or {})
                for k, v in (d.get("attributes") or {}).items()
            }
            devices.append(Device(str(spec["nodeName"]), driver, str(d.get("name")), attributes))
    classes = {str((c.get("metadata") or {}).get("name")): c for c in device_classes}
    return DraOffer(classes, tuple(devices), nodes)


# --- the simple CEL forms --------------------------------------------------------------------

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


def _matches(device: Device, terms: Sequence[Term]) -> bool:
    for t in terms:
        if t.attribute is None:
            actual: Any = device.driver
        elif t.attribute in device.attributes:
            actual = device.attributes[t.attribute]
        else:
            return False  # no such attribute: a runtime error, no match
        if (actual == t.value) != t.equal:
            return False
    return True


def _selectors(holder: Obj) -> list[str]:
    """The CEL expressions of a DeviceClass's spec or of a request's `exactly`."""
    return [
        str(((s or {}).get("cel") or {}).get("expression") or "")
        for s in holder.get("selectors") or []
    ]


def _requests(claim_spec: Obj) -> Iterator[tuple[str, Obj]]:
    """(name, the `exactly` of a request): v1 keeps the ask under `exactly`; a request of
    `firstAvailable` sub-requests is not evaluated (any of them may fit)."""
    for r in (claim_spec.get("devices") or {}).get("requests") or []:
        exactly = (r or {}).get("exactly")
        if exactly:
            yield str(r.get("name")), exactly


# --- the checks ------------------------------------------------------------------------------


def _claim_keys(pod: Obj) -> list[tuple[str, str]]:
    """(pod's name for the claim, "namespace/claim") of each claim the pod references: by name,
    or the one generated from its template (`status.resourceClaimStatuses`)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    namespace = meta.get("namespace")
    generated = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out = []
    for ref in spec.get("resourceClaims") or []:
        name = str(ref.get("name"))
        claim = ref.get("resourceClaimName") or generated.get(name)
        if claim:
            out.append((name, f"{namespace}/{claim}"))
    return out


def claim_causes(pod: Obj, claims: Mapping[str, Obj], dra: DraOffer) -> list[ClaimCause]:
    """Why this pending pod's claims can never be allocated; empty when they may be.
    `claims`: "namespace/name" -> the ResourceClaim's spec (a claim not there is not checked)."""
    out: list[ClaimCause] = []
    for pod_name, key in _claim_keys(pod):
        spec = claims.get(key)
        if spec is None:
            continue
        for request, ask in _requests(spec):
            cause = _request_cause(pod_name, key, request, ask, dra)
            if cause is not None and cause not in out:
                out.append(cause)
    return out


def _request_cause(
    pod_name: str, key: str, request: str, ask: Obj, dra: DraOffer
) -> ClaimCause | None:
    class_name = str(ask.get("deviceClassName") or "")
    where = f"request {request} of ResourceClaim {key} (the pod's claim {pod_name})"
    device_class = dra.classes.get(class_name)
    if device_class is None:
        known = ", ".join(sorted(dra.classes)) or "none"
        return ClaimCause(
            "dra-device-class-missing",
            f"{where} asks for DeviceClass {class_name}, which does not exist (DeviceClasses: "
            f"{known}): the scheduler cannot allocate it. Fix: install the driver that provides "
            f"{class_name} (NVIDIA's DRA driver chart creates gpu.nvidia.com and mig.nvidia.com), "
            "or ask for an existing class in the claim's template",
        )
    selectors = [*_selectors(_spec(device_class)), *_selectors(ask)]
    parsed = [parse(e) for e in selectors]
    if any(p is None for p in parsed):
        return None  # not a simple form: not evaluated
    terms = [t for p in parsed for t in p or ()]
    fitting = [d for d in dra.devices if _matches(d, terms)]
    count = int(ask.get("count") or 1) if ask.get("allocationMode", "ExactCount") != "All" else 1
    per_node: dict[str, int] = {}
    for d in fitting:
        per_node[d.node] = per_node.get(d.node, 0) + 1
    if max(per_node.values(), default=0) >= count:
        return None
    nodes = ", ".join(dra.dra_nodes[:5]) or "no DRA node"
    asked = " && ".join(f"`{e}`" for e in selectors) or "any device"
    if fitting:
        most = max(per_node.values())
        why = f"it asks for {count} devices and no DRA node publishes more than {most} passing"
    else:
        why = "no device published by a DRA node passes"
    return ClaimCause(
        "dra-no-matching-device",
        f"{where} can never be allocated: {why} {asked} (DRA nodes: {nodes}). Fix: change the "
        "claim's template to what the DRA pools publish (`kubectl get resourceslices -o yaml` "
        "shows each device's attributes), or add nodes with such GPUs to a dra pool",
    )

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

Only requests whose selectors pin the configured driver (`device.driver == '<driver>'`, or an
attribute of the driver's own domain: core.dra.selectors `pinned_to`) are matched against the
devices, since only that driver's slices are read; selectors beyond the simple CEL forms are not
evaluated (nothing is said of them: they might fit). While a DRA node's devices are not known
(it is on its way into or out of a dra pool, or has published no slice yet), nothing is said of
any request either: that node may hold what it asks.

A claim made from a pod's ResourceClaimTemplate is the template's claim spec, copied by
kube-controller-manager's resourceclaim controller when the pod is created
(kubernetes/kubernetes@v1.35.4:pkg/controller/resourceclaim/controller.go `handleClaim`); the
pod's status then names it (`status.resourceClaimStatuses`), and that claim is what is checked.
`claim_ask` is what the controller keeps of a claim for these checks: the requests of a claim
not yet allocated (an allocated one has fit).

`serves_extended` answers the other way a pod reaches DRA devices from Kubernetes 1.36: an
extended resource asked in its containers that a DeviceClass of the driver maps
(core.dra.selectors); the vGPU fit checks count the DRA nodes for such a pod
(core.volcano.never_fit).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_operator.core.dra.driver import DRIVER, REQUIRED_CLASSES
from vgpu_operator.core.dra.selectors import (
    Term,
    class_name,
    expressions,
    extended_resources,
    matches,
    parse,
    pinned_to,
)
from vgpu_operator.models.gpu_resources import claim_drivers

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

    @property
    def reason(self) -> str:
        return REASONS[self.id]


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
    of the driver's slices on the DRA nodes (newest pool generation only); `unknown`: the DRA
    nodes whose devices are not known (not settled in a dra pool, or no slice published)."""

    classes: Mapping[str, Obj]
    devices: tuple[Device, ...]
    dra_nodes: tuple[str, ...]
    driver: str = DRIVER
    unknown: tuple[str, ...] = ()


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def _value(attribute: Obj) -> Any:
    for kind in ("string", "int", "bool", "version"):
        if kind in attribute:
            return attribute[kind]
    return None


def offer(
    device_classes: Iterable[Obj],
    resource_slices: Iterable[Obj],
    dra_nodes: Iterable[str],
    *,
    driver: str = DRIVER,
    unsettled: Iterable[str] = (),
) -> DraOffer:
    """The offer of the DRA nodes: the devices of `driver`'s slices on them (the newest
    generation of each pool), every DeviceClass. `unsettled`: DRA nodes whose devices may
    change (a node with no slice of the driver is not known either)."""
    nodes = tuple(sorted(set(dra_nodes)))
    slices = [
        s
        for s in resource_slices
        if _spec(s).get("nodeName") in nodes and _spec(s).get("driver") == driver
    ]
    newest: dict[str, int] = {}
    for s in slices:
        pool = _spec(s).get("pool") or {}
        key = str(pool.get("name"))
        newest[key] = max(newest.get(key, 0), int(pool.get("generation") or 0))
    devices = []
    for s in slices:
        spec, pool = _spec(s), _spec(s).get("pool") or {}
        if int(pool.get("generation") or 0) != newest[str(pool.get("name"))]:
            continue
        for d in spec.get("devices") or []:
            attributes = {
                (str(k) if "/" in str(k) else f"{driver}/{k}"): _value(v or {})
                for k, v in (d.get("attributes") or {}).items()
            }
            devices.append(Device(str(spec["nodeName"]), driver, str(d.get("name")), attributes))
    published = {str(_spec(s).get("nodeName")) for s in slices}
    unknown = sorted({*unsettled, *(n for n in nodes if n not in published)} & set(nodes))
    classes = {class_name(c): c for c in device_classes}
    return DraOffer(classes, tuple(devices), nodes, driver, tuple(unknown))


def _requests(claim_spec: Obj) -> Iterator[tuple[str, Obj]]:
    """(name, the `exactly` of a request): v1 keeps the ask under `exactly`; a request of
    `firstAvailable` sub-requests is not evaluated (any of them may fit)."""
    for r in (claim_spec.get("devices") or {}).get("requests") or []:
        exactly = (r or {}).get("exactly")
        if exactly:
            yield str(r.get("name")), exactly


_ASKED = ("deviceClassName", "selectors", "count", "allocationMode")


def claim_ask(claim: Obj) -> Obj | None:
    """What the checks read of a ResourceClaim not yet allocated: its requests' device class,
    selectors, count and allocation mode; None for an allocated claim or one with nothing to
    check."""
    if claim_drivers(claim):
        return None
    asked = [
        {"name": name, "exactly": {k: ask[k] for k in _ASKED if k in ask}}
        for name, ask in _requests(_spec(claim))
    ]
    return {"devices": {"requests": asked}} if asked else None


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


def claim_keys(pod: Obj) -> list[str]:
    """The "namespace/name" of each ResourceClaim the pod references that exists by now."""
    return [key for _, key in _claim_keys(pod)]


def claim_causes(pod: Obj, claims: Mapping[str, Obj], dra: DraOffer) -> list[ClaimCause]:
    """Why this pending pod's claims can never be allocated; empty when they may be.
    `claims`: "namespace/name" -> the ResourceClaim's spec, or what `claim_ask` keeps of it (a
    claim not there is not checked)."""
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


def _terms(selectors: Iterable[str]) -> list[Term] | None:
    parsed = [parse(e) for e in selectors]
    if any(p is None for p in parsed):
        return None
    return [t for p in parsed for t in p or ()]


def _per_node(dra: DraOffer, terms: list[Term]) -> dict[str, int]:
    """DRA node -> how many of its devices pass `terms`."""
    out: dict[str, int] = {}
    for d in dra.devices:
        if matches(d.driver, d.attributes, terms):
            out[d.node] = out.get(d.node, 0) + 1
    return out


def _request_cause(
    pod_name: str, key: str, request: str, ask: Obj, dra: DraOffer
) -> ClaimCause | None:
    wanted = str(ask.get("deviceClassName") or "")
    where = f"request {request} of ResourceClaim {key} (the pod's claim {pod_name})"
    device_class = dra.classes.get(wanted)
    if device_class is None:
        known = ", ".join(sorted(dra.classes)) or "none"
        return ClaimCause(
            "dra-device-class-missing",
            f"{where} asks for DeviceClass {wanted}, which does not exist (DeviceClasses: "
            f"{known}): the scheduler cannot allocate it. Fix: install the driver that provides "
            f"{wanted} (NVIDIA's DRA driver chart creates {' and '.join(REQUIRED_CLASSES)}), "
            "or ask for an existing class in the claim's template",
        )
    selectors = [*expressions(_spec(device_class)), *expressions(ask)]
    terms = _terms(selectors)
    if terms is None or pinned_to(terms, [dra.driver]) is None or dra.unknown:
        return None  # not a simple form, another driver's, or a DRA node not known yet
    per_node = _per_node(dra, terms)
    count = int(ask.get("count") or 1) if ask.get("allocationMode", "ExactCount") != "All" else 1
    if max(per_node.values(), default=0) >= count:
        return None
    nodes = ", ".join(dra.dra_nodes[:5]) or "no DRA node"
    asked = " && ".join(f"`{e}`" for e in selectors) or "any device"
    if per_node:
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


# --- extended resources backed by DRA (Kubernetes 1.36+) --------------------------------------


def _count(value: Any) -> int:
    text = str(value).strip()
    return int(text) if text.isdigit() else 1


def _extended_asks(pod: Obj, names: Collection[str]) -> list[dict[str, int]]:
    """Per (init) container: each of `names` it asks (limits, else requests; non-zero)."""
    spec = pod.get("spec") or {}
    out = []
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        res = (c or {}).get("resources") or {}
        asked = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        kept = {str(k): _count(v) for k, v in asked.items() if k in names and str(v) != "0"}
        if kept:
            out.append(kept)
    return out


def serves_extended(pod: Obj, names: Collection[str], dra: DraOffer) -> bool:
    """Whether the DRA nodes may serve every one of `names` the pod asks, as extended resources
    a DeviceClass of the driver maps onto its devices: each is mapped, and each container's ask
    of it fits the devices one DRA node publishes that pass a mapping class (a DRA node whose
    devices are not known, or a class whose selectors are not read, may hold any). False when
    the pod asks none of `names`, or the cluster maps none (before Kubernetes 1.36)."""
    asks = _extended_asks(pod, names)
    mapped = extended_resources(dra.classes.values(), dra.driver)
    if not asks or not mapped:
        return False
    for container in asks:
        for name, count in container.items():
            if name not in mapped:
                return False
            if not dra.unknown and not any(
                _holds(dra, dra.classes[c], count) for c in mapped[name]
            ):
                return False
    return True


def _holds(dra: DraOffer, device_class: Obj, count: int) -> bool:
    terms = _terms(expressions(_spec(device_class)))
    if terms is None:
        return True
    return max(_per_node(dra, terms).values(), default=0) >= count

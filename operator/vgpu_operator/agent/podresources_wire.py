"""The kubelet's PodResources v1 `List` answer, decoded by hand from the protobuf wire format.

The messages are those of kubernetes/kubelet@v0.35.4:pkg/apis/podresources/v1/api.proto (pinned
with its SHA256 in tests/data/podresources/): the request `ListPodResourcesRequest {}` encodes as
zero bytes, and the agent reads only these fields of the response:

    ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
    PodResources       { string name = 1; string namespace = 2;
                         repeated ContainerResources containers = 3; }
    ContainerResources { string name = 1; repeated ContainerDevices devices = 2;
                         repeated DynamicResource dynamic_resources = 5; }
    ContainerDevices   { string resource_name = 1; repeated string device_ids = 2; }
    DynamicResource    { string claim_name = 2; string claim_namespace = 3;
                         repeated ClaimResource claim_resources = 4; }
    ClaimResource      { string driver_name = 2; string pool_name = 3; string device_name = 4; }

Every other field (topology, cpu_ids, memory, CDI devices, fields a newer kubelet adds) is
skipped by its wire type (https://protobuf.dev/programming-guides/encoding/). Why by hand and not
generated code: five nested messages of strings need about sixty lines, and the agent's image then
needs no protobuf runtime (whose generated modules check the runtime's version at import); the
tests encode answers with classes generated from the pinned proto and decode them here.

Anything malformed raises WireError: an answer the agent cannot read never reads as "nothing is
allocated".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Allocation", "WireError", "decode_list_response"]

METHOD = "/v1.PodResourcesLister/List"  # package v1, service PodResourcesLister, rpc List
# The kubelet's endpoint (`podresources` under its root directory) and the call's bound (the
# kubelet's node e2e tests use 10 s too: agent.podresources_call).
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_TIMEOUT = 10.0

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class WireError(ValueError):
    """Bytes that are not a ListPodResourcesResponse."""


@dataclass(frozen=True)
class Allocation:
    """Devices one container of a pod holds: of a device plugin's resource (`dra` False), or of
    a DRA claim (`dra` True: `resource` is the DRA driver, `device_ids` its device names)."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    dra: bool = False

    @property
    def pod_ref(self) -> str:
        return f"{self.namespace}/{self.pod}"


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if i >= len(buf) or shift > 63:
            raise WireError("truncated or overlong varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of one message; groups (types 3, 4) are not proto3."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        value: int | bytes
        if wire == _VARINT:
            value, i = _varint(buf, i)
        elif wire in (_I64, _I32):
            width = 8 if wire == _I64 else 4
            if i + width > len(buf):
                raise WireError("truncated fixed-width field")
            value, i = buf[i : i + width], i + width
        elif wire == _LEN:
            size, i = _varint(buf, i)
            if i + size > len(buf):
                raise WireError("length-delimited field runs past the message")
            value, i = buf[i : i + size], i + size
        else:
            raise WireError(f"wire type {wire} (field {number})")
        yield number, wire, value


def _bytes(wire: int, value: int | bytes, what: str) -> bytes:
    if wire != _LEN or not isinstance(value, bytes):
        raise WireError(f"{what}: wire type {wire}, expected length-delimited")
    return value


def _text(wire: int, value: int | bytes, what: str) -> str:
    try:
        return _bytes(wire, value, what).decode("utf-8")
    except UnicodeDecodeError as e:
        raise WireError(f"{what}: not UTF-8") from e


def _claim_device(buf: bytes) -> tuple[str, str]:
    driver, device, pool = "", "", ""
    for number, wire, value in _fields(buf):
        if number == 2:
            driver = _text(wire, value, "ClaimResource.driver_name")
        elif number == 3:
            pool = _text(wire, value, "ClaimResource.pool_name")
        elif number == 4:
            device = _text(wire, value, "ClaimResource.device_name")
    return driver, f"{pool}/{device}" if pool else device


def _container(ns: str, pod: str, buf: bytes) -> list[Allocation]:
    name = ""
    devices: list[tuple[str, tuple[str, ...]]] = []
    claims: list[tuple[str, str]] = []
    for number, wire, value in _fields(buf):
        if number == 1:
            name = _text(wire, value, "ContainerResources.name")
        elif number == 2:
            resource, ids = "", []
            for n, w, v in _fields(_bytes(wire, value, "ContainerResources.devices")):
                if n == 1:
                    resource = _text(w, v, "ContainerDevices.resource_name")
                elif n == 2:
                    ids.append(_text(w, v, "ContainerDevices.device_ids"))
            devices.append((resource, tuple(ids)))
        elif number == 5:
            for n, w, v in _fields(_bytes(wire, value, "ContainerResources.dynamic_resources")):
                if n == 4:
                    claims.append(_claim_device(_bytes(w, v, "DynamicResource.claim_resources")))
    out = [Allocation(ns, pod, name, resource, ids) for resource, ids in devices]
    drivers: dict[str, list[str]] = {}
    for driver, device in claims:
        drivers.setdefault(driver, []).append(device)
    out += [Allocation(ns, pod, name, d, tuple(ids), dra=True) for d, ids in drivers.items()]
    return out


def _pod(buf: bytes) -> list[Allocation]:
    name, ns = "", ""
    containers: list[bytes] = []
    for number, wire, value in _fields(buf):
        if number == 1:
            name = _text(wire, value, "PodResources.name")
        elif number == 2:
            ns = _text(wire, value, "PodResources.namespace")
        elif number == 3:
            containers.append(_bytes(wire, value, "PodResources.containers"))
    return [a for c in containers for a in _container(ns, name, c)]


def decode_list_response(buf: bytes) -> list[Allocation]:
    """Every container's devices in a ListPodResourcesResponse (containers with none left out)."""
    out: list[Allocation] = []
    for number, wire, value in _fields(buf):
        if number == 1:
            out += _pod(_bytes(wire, value, "ListPodResourcesResponse.pod_resources"))
    return [a for a in out if a.device_ids]

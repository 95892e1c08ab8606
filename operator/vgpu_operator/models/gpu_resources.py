"""What counts as a GPU consumer: one definition for the drain, the pod index, `plan`, the
never-fit warnings and the node agent's in-use check.

A pod consumes a node's GPUs when any (init) container requests or limits, non-zero, an extended
resource a GPU may back, or when it holds a ResourceClaim allocated by a GPU DRA driver (the
operator config's `gpuDraDrivers`, default `gpu.nvidia.com`).

Which driver allocated a claim is on the ResourceClaim, not on the pod
(kubernetes/api@v0.34.0:resource/v1/types.go `AllocationResult.Devices.Results[].Driver`); the
pod names its claims in `spec.resourceClaims[].resourceClaimName`, or, for one made from a
template, in `status.resourceClaimStatuses[].resourceClaimName` (kubernetes/api@v0.34.0:
core/v1/types.go `PodResourceClaim`, `PodResourceClaimStatus`: unset there, no claim was
needed). A claim counts unless it is shown otherwise: without the claims at hand (no claim
index, or not synced), a claim not found in them, a template's claim whose name the pod does not
show yet, and a claim not (yet) allocated all count; only a claim allocated to devices of other
drivers alone does not. A pod bound to a node runs only where its claims' allocation is
available, so its claims are on its node.

A GPU may back:
- NVIDIA's names and everything else in the `nvidia.com/` domain: `nvidia.com/gpu`,
  `nvidia.com/mig-<profile>` (NVIDIA/k8s-device-plugin, MIG strategy mixed),
  `nvidia.com/gpu.shared` (its time-slicing and MPS `renameByDefault`), and HAMi's own
  `nvidia.com/gpumem`, `nvidia.com/gpucores`, `nvidia.com/gpumem-percentage`
  (Project-HAMi/HAMi@v2.6.0:charts/hami/values.yaml `resourceName`, `resourceMem`, `resourceCores`);
- Volcano's vGPU names and HAMi's domain (`volcano.sh/vgpu-*`, `hami.io/*`), legacy GPU sharing
  (`volcano.sh/gpu-memory`, `volcano.sh/gpu-number`), Ascend NPUs (`huawei.com/Ascend*`);
- any other name that says gpu or mig (a device plugin's renamed resource), the operator
  config's own resource names, and every name the NVIDIA device plugin's configs may advertise
  (the ConfigMap `nvidiaDevicePluginConfig` names, `models.nvidia_plugin_config`; the plugin
  qualifies each with `nvidia.com/`, so the domain already covers them, and reading them keeps
  the definition right should a later plugin not).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

GPU_DOMAINS = ("nvidia.com/", "volcano.sh/vgpu", "hami.io/", "huawei.com/Ascend")
_GPU_WORDS = re.compile(r"gpu|mig", re.IGNORECASE)


def gpu_backed(resource: str, names: Collection[str] = ()) -> bool:
    """Whether an allocation of this resource may be a GPU (or NPU) of the node."""
    return (
        resource in names
        or resource.startswith(GPU_DOMAINS)
        or bool(_GPU_WORDS.search(resource.rsplit("/", 1)[-1]))
    )


def _containers(pod: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]


DEFAULT_DRA_DRIVERS = ("gpu.nvidia.com",)  # NVIDIA/k8s-dra-driver-gpu's GPU driver
# A ResourceClaim ("namespace/name") -> the drivers of its allocation's devices (empty: not
# allocated).
ClaimDrivers = Mapping[str, frozenset[str]]


def pod_claims(pod: Mapping[str, Any]) -> list[str | None]:
    """The ResourceClaims the pod holds, as "namespace/name"; None for one made from a template
    whose name the pod's status does not show yet. A template entry its status shows without a
    name needed no claim, and is left out."""
    spec = pod.get("spec") or {}
    entries = [e for e in spec.get("resourceClaims") or [] if isinstance(e, Mapping)]
    if not entries:
        return []
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if isinstance(s, Mapping)
    }
    out: list[str | None] = []
    for entry in entries:
        name = entry.get("resourceClaimName")
        if not name and entry.get("name") in statuses:
            name = statuses[entry.get("name")]
            if not name:
                continue  # generating a claim was not necessary
        out.append(f"{namespace}/{name}" if name else None)
    return out


def claim_drivers(claim: Mapping[str, Any]) -> frozenset[str]:
    """The drivers of a ResourceClaim's allocated devices (empty: not allocated)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return frozenset(
        str(r["driver"]) for r in results if isinstance(r, Mapping) and r.get("driver")
    )


def claim_counts(allocated: frozenset[str] | None, drivers: Collection[str]) -> bool:
    """Whether a claim makes its pod a GPU consumer: unknown (None) or not allocated (empty),
    or allocated by one of `drivers`."""
    return not allocated or any(d in drivers for d in allocated)


def claims_gpu(
    pod: Mapping[str, Any],
    drivers: Collection[str] = DEFAULT_DRA_DRIVERS,
    claims: ClaimDrivers | None = None,
) -> bool:
    """Whether one of the pod's ResourceClaims counts (`claims` None: every claim counts)."""
    held = pod_claims(pod)
    if claims is None:
        return bool(held)
    return any(key is None or claim_counts(claims.get(key), drivers) for key in held)


def gpu_consumer(
    pod: Mapping[str, Any],
    names: Collection[str] = (),
    drivers: Collection[str] = DEFAULT_DRA_DRIVERS,
    claims: ClaimDrivers | None = None,
) -> bool:
    """Whether the pod consumes a GPU (see the module docstring)."""
    for c in _containers(pod):
        res = (c or {}).get("resources") or {}
        for part in ("limits", "requests"):
            for key, value in (res.get(part) or {}).items():
                if gpu_backed(str(key), names) and str(value) not in ("0", ""):
                    return True
    return claims_gpu(pod, drivers, claims)

"""The feature gates a cluster's dra pools need, each reported as proven (on or off) from what
the API shows, or as not observable: never guessed. Pure.

- `DynamicResourceAllocation` (kube-apiserver, kube-scheduler): GA and on since Kubernetes 1.34,
  locked on in 1.35; proven on when the apiserver serves resource.k8s.io/v1 (`api` below).
- `DRAPartitionableDevices` (KEP-4815; kube-apiserver, kube-scheduler; alpha and off through 1.35,
  beta and on from 1.36), needed by `dynamic-mig` pools: proven on in kube-apiserver by a
  ResourceSlice that kept its shared counters (`spec.sharedCounters`, a device's
  `consumesCounters`), fields the apiserver drops on write while the gate is off
  (`dropDisabledDRAPartitionableDevicesFields` in kubernetes/kubernetes@v1.35.4:
  pkg/registry/resource/resourceslice/strategy.go); kube-scheduler's own setting is not visible
  through the API.
- vc-scheduler's `DRAPartitionableDevices`: Volcano's `predicates` plugin hands the gate to the
  embedded DRA plugin (`EnablePartitionableDevices` in volcano-sh/volcano@v1.14.4:
  pkg/scheduler/plugins/predicates/predicates.go, `EnableDRAPartitionableDevices` in v1.15.1);
  proven by vc-scheduler's `--feature-gates` flag, otherwise not observable (its
  default follows its Kubernetes libraries and, from v1.15, the connected cluster's version:
  volcano-sh/volcano@v1.15.1:cmd/scheduler/app/server.go). The operator never sets it.
- the driver's `DynamicMIG`: proven by the gates its kubelet plugin DaemonSet starts it with (the
  `gpus` container's `FEATURE_GATES` or `--feature-gates`, as `core.rules.second_owners` reads
  them), or proven on by a slice of the driver with shared counters (the plugin publishes
  partitionable MIG devices only under it, kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
  cmd/gpu-kubelet-plugin/nvlib.go `GetPerGpuAllocatableDevices`); otherwise only what the
  operator config says (`dra.dynamicMIG`), which is not an observation.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from vgpu_operator.core.dra.driver import RESOURCE_API

Obj = Mapping[str, Any]
Evidence = Literal["on", "off", "not observable"]


@dataclass(frozen=True)
class GateReading:
    """One gate of one component: what the API shows of it, and from what."""

    gate: str
    component: str
    state: Evidence
    why: str


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def has_counters(resource_slice: Obj) -> bool:
    """A slice that kept shared counters (or a device consuming them)."""
    spec = _spec(resource_slice)
    if spec.get("sharedCounters"):
        return True
    return any((d or {}).get("consumesCounters") for d in spec.get("devices") or [])


def dynamic_resource_allocation(served: Collection[str]) -> GateReading:
    if RESOURCE_API in served:
        return GateReading(
            "DynamicResourceAllocation",
            "kube-apiserver",
            "on",
            f"the apiserver serves {RESOURCE_API}",
        )
    return GateReading(
        "DynamicResourceAllocation",
        "kube-apiserver",
        "off",
        f"the apiserver does not serve {RESOURCE_API}",
    )


def partitionable_devices_apiserver(slices: Sequence[Obj], driver: str) -> GateReading:
    kept = [s for s in slices if _spec(s).get("driver") == driver and has_counters(s)]
    if kept:
        name = str((kept[0].get("metadata") or {}).get("name", ""))
        return GateReading(
            "DRAPartitionableDevices",
            "kube-apiserver",
            "on",
            f"ResourceSlice {name} kept its shared counters (dropped on write with the gate off)",
        )
    return GateReading(
        "DRAPartitionableDevices",
        "kube-apiserver",
        "not observable",
        f"no ResourceSlice of {driver} carries shared counters, which would prove it (the "
        "driver publishes them only under its DynamicMIG gate)",
    )


def partitionable_devices_volcano(flags: Mapping[str, bool] | None) -> GateReading:
    """vc-scheduler's own gate, from the feature gates it starts with (`flags`: gate -> value
    as its `--feature-gates` gives them; None: no scheduler found)."""
    gate, component = "DRAPartitionableDevices", "vc-scheduler"
    if flags is None:
        return GateReading(gate, component, "not observable", "vc-scheduler was not found")
    value = flags.get(gate)
    if value is None:
        return GateReading(
            gate,
            component,
            "not observable",
            "vc-scheduler has no --feature-gates entry for it: its default follows its "
            "Kubernetes libraries and (Volcano v1.15+) the cluster's version",
        )
    return GateReading(
        gate,
        component,
        "on" if value else "off",
        f"vc-scheduler runs with --feature-gates {gate}={str(value).lower()}",
    )


def dynamic_mig(
    slices: Sequence[Obj], driver: str, plugin_gates: Mapping[str, bool] | None, said: bool
) -> GateReading:
    """The driver's `DynamicMIG`: what its kubelet plugin starts with (`plugin_gates`: its
    container's `FEATURE_GATES` or `--feature-gates`; None: the container was not found), or a
    slice with shared counters."""
    gate, component = "DynamicMIG", f"{driver} kubelet plugin"
    value = (plugin_gates or {}).get(gate)
    if value is not None:
        return GateReading(
            gate,
            component,
            "on" if value else "off",
            f"its DaemonSet starts it with {gate}={str(value).lower()}",
        )
    if any(_spec(s).get("driver") == driver and has_counters(s) for s in slices):
        return GateReading(
            gate,
            component,
            "on",
            "its ResourceSlices publish partitionable MIG devices (shared counters)",
        )
    return GateReading(
        gate,
        component,
        "not observable",
        f"neither its DaemonSet nor a slice of {driver} shows it; the operator config says "
        f"dra.dynamicMIG: {str(said).lower()} (taken as said, not observed)",
    )

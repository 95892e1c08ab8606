"""Which pods hold a GPU or a GPU instance, from the kubelet's device allocations (pure).

The kubelet's PodResources `List` names, per container, the resource and the device IDs the
device plugin registered (agent.podresources_wire). An allocated but idle device has no
process, so nvidia-smi's process list alone cannot tell; this can. Device IDs as each plugin
registers them:

- NVIDIA's k8s-device-plugin: the NVML UUID of the device, `GPU-<uuid>` for a whole GPU and
  `MIG-<uuid>` for a MIG device (NVIDIA/k8s-device-plugin@v0.18.2:internal/rm/devices.go
  `BuildDevice`: `dev.ID = uuid`; internal/rm/nvml_devices.go: `GetUUID` of the GPU or of the
  MIG device), whatever `--device-id-strategy` says (that only changes what the container is
  told, internal/plugin/server.go `uniqueDeviceIDsFromAnnotatedDeviceIDs`). Drivers before R470
  named MIG devices `MIG-GPU-<gpu uuid>/<gi>/<ci>` (accepted by
  NVIDIA/go-nvlib@3c161560521e:pkg/nvlib/device/identifier.go). Shared (time-sliced, MPS)
  replicas, `nvidia.com/gpu.shared` or any renamed resource, are `<uuid>::<replica>`
  (internal/rm/devices.go `NewAnnotatedID`; internal/rm/device_map.go
  `updateDeviceMapWithReplicas`).
- HAMi's volcano-vgpu-device-plugin: `volcano.sh/vgpu-number` registers `<uuid>-<i>` for each of
  `deviceSplitCount` slots of a device, `volcano.sh/vgpu-memory` `<uuid>-memory-<i>` and
  `volcano.sh/vgpu-cores` `<uuid>-core-<i>` (names configurable: `resourceCountName`,
  ...; Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/plugin/server.go `apiDevices`).
  The kubelet picks those slots itself; `Allocate` ignores them for whole GPUs and gives the
  container the GPUs Volcano's scheduler wrote into the pod's annotation (same file, `Allocate`:
  `util.GetNextDeviceRequest`). So such an ID does not say which GPU the pod has: it cannot be
  mapped, and counts on every GPU of the node. HAMi's own plugin (`nvidia.com/gpu`,
  `nvidia.com/gpumem`, `nvidia.com/gpucores`) registers the same `<uuid>-<i>` form.
- DRA (kubelet `dynamic_resources`): the driver's own device names; not mapped, so a claim of
  a GPU driver counts on every GPU.

Anything not mapped to a GPU of this node counts as in use on every GPU when its resource is
one a GPU may back (`gpu_backed`); a GPU UUID of this node counts under any resource name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from vgpu_operator.agent.parse_actions import ListedGpu
from vgpu_operator.agent.podresources_wire import Allocation
from vgpu_operator.core.mig.partition import Step, StepKind
from vgpu_operator.models.gpu_resources import gpu_backed
from vgpu_operator.models.inventory import GpuInfo

_REPLICA = re.compile(r"^(.+)::\d+$")  # NVIDIA's AnnotatedID
_LEGACY_MIG = re.compile(r"^MIG-(GPU-[^/]+)/(\d+)/(\d+)$")
_HAMI_SLOT = re.compile(r"^(?:GPU|MIG)-.+-(?:memory-|core-)?\d+$")


@dataclass(frozen=True)
class Touch:
    """What a GPU's steps destroy or reset: the whole GPU (a MIG mode change, a reset) or
    these GPU instances."""

    whole: bool
    gis: frozenset[int]


def touched(steps: Iterable[Step]) -> Touch | None:
    """None when the steps only create."""
    steps = list(steps)
    whole = any(s.kind in (StepKind.SET_MODE, StepKind.RESET) for s in steps)
    kinds = (StepKind.DESTROY_GI, StepKind.DESTROY_CI)
    gis = frozenset(s.gi for s in steps if s.kind in kinds and s.gi is not None)
    if not whole and not gis:
        return None
    return Touch(whole, gis)


@dataclass(frozen=True)
class Target:
    """The GPU (by UUID) and GPU instances one device ID is: `gpu` None when it cannot be
    mapped (then `why`), `gis` None for the whole GPU."""

    gpu: str | None
    gis: frozenset[int] | None = None
    why: str = ""


def resolve(device_id: str, listed: list[ListedGpu], gpus: dict[str, GpuInfo]) -> Target:
    """Map one device ID through `nvidia-smi -L` (`listed`) and the observed GPUs (their
    instances, by UUID)."""
    base = m.group(1) if (m := _REPLICA.match(device_id)) else device_id
    by_uuid = {g.uuid.upper(): g for g in listed}
    if (gpu := by_uuid.get(base.upper())) is not None:
        return Target(gpu.uuid)
    if m := _LEGACY_MIG.match(base):
        parent = by_uuid.get(m.group(1).upper())
        if parent is not None:
            return Target(parent.uuid, frozenset({int(m.group(2))}))
        return Target(None, why="a MIG device of no GPU nvidia-smi lists")
    for g in listed:
        for mig in g.migs:
            if mig.uuid.upper() == base.upper():
                return Target(g.uuid, _instances_named(gpus.get(g.uuid), mig.profile))
    if _HAMI_SLOT.match(base):
        return Target(
            None,
            why="a shared slot: HAMi's plugin gives the container the GPU the scheduler "
            "annotated, not this ID's",
        )
    return Target(None, why="not a GPU or MIG device nvidia-smi lists")


def _instances_named(gpu: GpuInfo | None, profile: str) -> frozenset[int] | None:
    """The GPU instances a MIG device of `profile` (`-L`: `3g.40gb`, or `1c.3g.40gb` for a
    compute instance smaller than its GPU instance) may be; None (the whole GPU) when none
    matches. `-L` numbers MIG devices, not GPU instances: every instance of that profile is
    a candidate."""
    if gpu is None:
        return None
    found = frozenset(
        gi.id
        for gi in gpu.instances
        if profile == gi.name
        or profile.endswith(f".{gi.name}")
        or any(ci.name == profile for ci in gi.cis)
    )
    return found or None


@dataclass(frozen=True)
class Holder:
    """A container holding a device that is (or may be) what the steps destroy or reset."""

    allocation: Allocation
    device_id: str
    why: str = ""  # set when the ID could not be mapped

    def __str__(self) -> str:
        a = self.allocation
        kind = "DRA claim of" if a.dra else "resource"
        text = f"pod {a.pod_ref} (container {a.container}, {kind} {a.resource}: {self.device_id}"
        return f"{text}; {self.why})" if self.why else f"{text})"


def holders(
    allocations: Iterable[Allocation],
    gpu: GpuInfo,
    touch: Touch,
    listed: list[ListedGpu],
) -> list[Holder]:
    """The allocations that hold `gpu` or one of the instances `touch` destroys (a MIG device
    of another GPU is not mapped to its instances: it does not hold this one)."""
    out = []
    for a in allocations:
        for device in a.device_ids:
            t = (
                Target(None, why="a DRA device")
                if a.dra
                else resolve(device, listed, {gpu.uuid: gpu})
            )
            if t.gpu is None:
                if gpu_backed(a.resource):
                    out.append(Holder(a, device, t.why))
            elif t.gpu.upper() == gpu.uuid.upper() and (
                touch.whole or t.gis is None or t.gis & touch.gis
            ):
                out.append(Holder(a, device))
    return out

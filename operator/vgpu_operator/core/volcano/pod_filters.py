"""The pod annotations that narrow which GPUs Volcano may give a vGPU pod, as the scheduler reads
them. Pure.

- `nvidia.com/use-gputype` / `nvidia.com/nouse-gputype`: comma-separated strings, each compared,
  upper-cased, as a substring of the GPU's registered type `NVIDIA-<NVML name>` (upper-cased);
  with `use-gputype` a GPU must match one of them and `nouse-gputype` is not read at all; with
  only `nouse-gputype` a GPU must match none. An empty string (`""`, or an empty item such as the
  end of `"A100,"`) is a substring of every type: in `use-gputype` it admits every GPU, in
  `nouse-gputype` it excludes every GPU (`checkGPUtype`,
  volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/utils.go, the same at
  v1.12.0 to v1.16.0-alpha.1; up to v1.11 a one-value `nouse-gputype` excluded nothing:
  core.volcano.component_versions).
- `volcano.sh/vgpu-use-gpuuuid` / `volcano.sh/vgpu-nouse-gpuuuid` (Volcano v1.16.0-alpha.0 and
  later): comma-separated GPU UUIDs, spaces trimmed and empty items dropped, compared exactly
  with the UUID the device plugin registered; with an allow list a GPU must be in it, and it must
  not be in the deny list (`gpuUUIDFilter`, volcano-sh/volcano@v1.16.0-alpha.1:
  pkg/scheduler/api/devices/nvidia/vgpu/utils.go, type.go).

Both are checked GPU by GPU in the same loop as memory and cores (`fitInCertainDevice`), in
hami-core and in MIG mode (the MIG node's GPUs are registered by their own UUIDs and types).
The HAMi plugin does not read them (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0 defines the
two type names in pkg/util/types.go and reads neither).

What is known of a GPU: its registered type and UUID from the plugin's register records
(`volcano.sh/node-vgpu-register`, models.volcano `RegisteredGpu`: the NVML UUID and
`NVIDIA-<NVML name>`, Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/plugin/register.go),
else the NVML name and UUID of the agent's inventory (the same NVML values). A node known only by
GPU Feature Discovery's labels has no GPU list here: it is not narrowed, and so still counts as
one that may fit (the warnings say only what is certain).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from vgpu_operator.core.volcano import component_versions
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.volcano import MigGeometryEntry, RegisteredGpu, device_type
from vgpu_operator.models.volcano_views import Version

USE_GPU_TYPE = "nvidia.com/use-gputype"
NOUSE_GPU_TYPE = "nvidia.com/nouse-gputype"
USE_GPU_UUID = "volcano.sh/vgpu-use-gpuuuid"
NOUSE_GPU_UUID = "volcano.sh/vgpu-nouse-gpuuuid"
SHOWN = 5  # GPUs named in a message at most


@dataclass(frozen=True)
class GpuFacts:
    """One GPU of a node as the scheduler sees it. `memory`: MiB / gpuMemoryFactor (None:
    unknown); `instances`, `per_gpu`: in MIG mode, the MiB of the instance types its model's
    geometry has and the most instances one layout has."""

    uuid: str | None  # None: not known
    type: str  # `NVIDIA-<NVML name>`
    memory: int | None = None
    instances: tuple[int, ...] = ()
    per_gpu: int = 1


@dataclass(frozen=True)
class GpuFilter:
    """The narrowing annotations of one pod that its scheduler's version reads."""

    use_types: tuple[str, ...] | None = None  # None: annotation absent
    nouse_types: tuple[str, ...] | None = None  # None: absent, or not read (use_types given)
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()
    given: tuple[tuple[str, str], ...] = ()  # (annotation, value) as read, for messages
    nouse_ignored: bool = False  # nouse-gputype given beside use-gputype, which wins

    def type_allowed(self, device_type: str) -> bool:
        upper = device_type.upper()
        if self.use_types is not None:
            return any(t.upper() in upper for t in self.use_types)
        if self.nouse_types is not None:
            return not any(t.upper() in upper for t in self.nouse_types)
        return True

    def uuid_allowed(self, uuid: str | None) -> bool | None:
        """None: the filter is on and the GPU's UUID is not known."""
        if not self.use_uuids and not self.nouse_uuids:
            return True
        if uuid is None:
            return None
        if not uuid or (self.use_uuids and uuid not in self.use_uuids):
            return False
        return uuid not in self.nouse_uuids

    def allows(self, gpu: GpuFacts) -> bool:
        """Whether the scheduler may give this GPU to the pod; an unknown UUID counts as allowed
        (only what is certain is excluded)."""
        return self.type_allowed(gpu.type) and self.uuid_allowed(gpu.uuid) is not False


def registered_gpus(records: Iterable[RegisteredGpu]) -> tuple[GpuFacts, ...]:
    """A node's GPUs as the plugin registered them (what the scheduler reads)."""
    return tuple(GpuFacts(r.uuid, r.type, r.memory) for r in records)


def inventory_gpus(inventory: Inventory, factor: int) -> tuple[GpuFacts, ...]:
    """A node's GPUs as its agent lists them (NVML's UUID and name, as the plugin registers)."""
    return tuple(
        GpuFacts(g.uuid or None, device_type(g.name), g.memory_mib // factor)
        for g in inventory.gpus
    )


def with_layouts(
    gpus: Iterable[GpuFacts], entries: Sequence[MigGeometryEntry]
) -> tuple[GpuFacts, ...]:
    """MIG GPUs with their instance sizes and most instances, from the first knownMigGeometries
    entry that matches each one's type (the scheduler's `extractGeometryFromType`)."""
    out = []
    for gpu in gpus:
        entry = next((e for e in entries if e.matches(gpu.type)), None)
        groups = entry.allowed_geometries if entry is not None else []
        sizes = tuple(sorted({t.memory for g in groups for t in g.geometries}))
        most = max((sum(t.count for t in g.geometries) for g in groups), default=1)
        out.append(replace(gpu, instances=sizes, per_gpu=max(most, 1)))
    return tuple(out)


def _uuids(value: str | None) -> tuple[str, ...]:
    """`parseGPUUUIDList`: split on ',', spaces trimmed, empty items dropped."""
    return tuple(u.strip() for u in (value or "").split(",") if u.strip())


def read(annotations: Mapping[str, str], version: Version | None) -> GpuFilter | None:
    """The pod's filter as a scheduler of `version` reads it; None when it reads none."""
    use = annotations.get(USE_GPU_TYPE)
    nouse = annotations.get(NOUSE_GPU_TYPE) if use is None else None
    given: list[tuple[str, str]] = []
    use_types: tuple[str, ...] | None = None
    nouse_types: tuple[str, ...] | None = None
    if use is not None:
        use_types = tuple(str(use).split(","))
        given.append((USE_GPU_TYPE, str(use)))
    elif nouse is not None and (
        "," in str(nouse) or component_versions.scheduler_single_nouse_type_excludes(version)
    ):
        nouse_types = tuple(str(nouse).split(","))
        given.append((NOUSE_GPU_TYPE, str(nouse)))
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()
    if component_versions.scheduler_reads_gpu_uuid_filter(version):
        use_uuids = _uuids(annotations.get(USE_GPU_UUID))
        nouse_uuids = _uuids(annotations.get(NOUSE_GPU_UUID))
        given.extend(
            (a, str(annotations[a])) for a in (USE_GPU_UUID, NOUSE_GPU_UUID) if a in annotations
        )
    if use_types is None and nouse_types is None and not use_uuids and not nouse_uuids:
        return None
    ignored = use is not None and NOUSE_GPU_TYPE in annotations
    return GpuFilter(use_types, nouse_types, use_uuids, nouse_uuids, tuple(given), ignored)


def kept(gpus: Sequence[GpuFacts], f: GpuFilter) -> tuple[GpuFacts, ...] | None:
    """The GPUs the filter leaves; None when it excludes none of them (or none is known)."""
    left = tuple(g for g in gpus if f.allows(g))
    return None if len(left) == len(gpus) else left


def _value(value: str, limit: int = 80) -> str:
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"


def _empty_items(f: GpuFilter) -> str:
    """The note for an empty type item, which matches every GPU type."""
    if f.use_types is None and f.nouse_types is not None and "" in f.nouse_types:
        return (
            f" ({NOUSE_GPU_TYPE} has an empty item, e.g. a trailing comma: the empty string is "
            "part of every GPU type, so it excludes every GPU)"
        )
    return ""


def _fixes(f: GpuFilter) -> str:
    out = []
    if f.use_types is not None:
        out.append(f"add a part of one of those types to {USE_GPU_TYPE}")
    if f.nouse_types is not None:
        out.append(f"take the items that match them out of {NOUSE_GPU_TYPE}")
    if f.use_uuids:
        out.append(f"add one of those UUIDs to {USE_GPU_UUID}")
    if f.nouse_uuids:
        out.append(f"take those UUIDs out of {NOUSE_GPU_UUID}")
    return ", or ".join(out)


def excluded_text(f: GpuFilter, fitting: Iterable[GpuFacts], version: Version | None) -> str:
    """What the pod's annotations do, the GPUs that would hold the pod without them (`fitting`),
    and the fix."""
    annotations = ", ".join(f"{a}: {_value(v)}" for a, v in f.given)
    what, verb = ("annotation", "excludes") if len(f.given) == 1 else ("annotations", "exclude")
    fits = sorted({(g.type, g.uuid or "") for g in fitting if not f.allows(g)})
    shown = "; ".join(f"{t} {u}".rstrip() for t, u in fits[:SHOWN]) or "excluded"
    more = f" and {len(fits) - SHOWN} more" if len(fits) > SHOWN else ""
    how = []
    if f.use_types is not None or f.nouse_types is not None:
        how.append(
            "a GPU type item matches, ignoring case, as a part of the registered type "
            "NVIDIA-<NVML name>"
            + (
                f"; with {USE_GPU_TYPE} given, {NOUSE_GPU_TYPE} is not read"
                if f.nouse_ignored
                else ""
            )
        )
    if f.use_uuids or f.nouse_uuids:
        how.append(f"GPU UUIDs are compared exactly with the registered ones (Volcano {version})")
    return (
        f"the pod's {what} {annotations} {verb} every GPU that could hold it"
        f"{_empty_items(f)}: the GPUs that would are {shown}{more}; {'; '.join(how)}. Fix: "
        f"{_fixes(f)}, or remove the {what}"
    )

"""`volcano-vgpu-device-config` / `device-config.yaml`.

The operator owns, in the `nvidia:` section: the four resource names, `gpuMemoryFactor` (the
configured one; unset, the live one is kept; a change is said in the notes: it changes the unit
of every pod's vgpu-memory request), the defaults (`deviceSplitCount`, `deviceMemoryScaling`,
`deviceCoreScaling`, `defaultMemory`, `defaultCores`, `defaultGPUNum`, `overwriteEnv`) and
`knownMigGeometries`, to which it only appends (core.volcano.geometry), and whose MIG memory it
lowers to what each instance surely has (core.volcano.mig_memory). With Ascend vNPU on it also
owns the top-level `vnpus:` section, a copy of the one in `hami-scheduler-device` in the form
the scheduler's version parses (render.vnpus; the scheduler reads both sections from this one
ConfigMap: volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/config.go). Every other
section and key, and every comment, is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from pydantic import ValidationError
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from vgpu_operator.core.volcano.component_versions import scheduler_vnpus_form
from vgpu_operator.core.volcano.geometry import (
    ReportedGpuModel,
    build_known_geometries,
    catalog_for,
)
from vgpu_operator.core.volcano.mig_memory import (
    MemoryCorrection,
    corrected,
    describe,
    hardware_memory,
    memory_corrections,
    provably_above,
)
from vgpu_operator.core.volcano.render.common import (
    Rendered,
    RenderError,
    RoundTrip,
    cm_data,
    keep_trailing_newline,
    load_mapping,
    number,
    plain,
    stamp,
)
from vgpu_operator.core.volcano.render.vnpus import keeps, vnpus_for_scheduler
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.volcano import MigGeometryEntry
from vgpu_operator.models.volcano_views import Version

GEOMETRIES_KEY = "knownMigGeometries"


def desired_nvidia(config: OperatorConfig) -> dict[str, Any]:
    """The owned scalar keys of `nvidia:`, in the shipped manifest's order."""
    names = config.resource_names
    d = config.device_defaults
    return {
        "resourceCountName": names.count,
        "resourceMemoryName": names.memory,
        "resourceMemoryPercentageName": names.memory_percentage,
        "resourceCoreName": names.cores,
        "overwriteEnv": d.overwrite_env,
        "defaultMemory": d.default_memory,
        "defaultCores": d.default_cores,
        "defaultGPUNum": d.default_gpu_num,
        "deviceSplitCount": d.device_split_count,
        "deviceMemoryScaling": number(d.device_memory_scaling),
        "deviceCoreScaling": number(d.device_core_scaling),
        "gpuMemoryFactor": config.memory_factor,
    }


def existing_geometries(nvidia: Mapping[str, Any]) -> list[MigGeometryEntry] | None:
    """The current list, or None when it is there but not in the expected shape."""
    raw = nvidia.get(GEOMETRIES_KEY)
    if raw is None:
        return []
    if not isinstance(raw, list):
        return None
    try:
        return [MigGeometryEntry.model_validate(plain(item)) for item in raw]
    except ValidationError:
        return None


def _lower_in_place(nvidia: MutableMapping[str, Any], fixes: Sequence[MemoryCorrection]) -> None:
    """Set the corrected memory in the existing list (text and comments around it stay)."""
    items = nvidia[GEOMETRIES_KEY]
    for f in fixes:
        items[f.entry]["allowedGeometries"][f.group]["geometries"][f.template]["memory"] = (
            f.hardware
        )


def _set_geometries(nvidia: MutableMapping[str, Any], appended: Sequence[MigGeometryEntry]) -> None:
    items = [e.to_yaml_data() for e in appended]
    current = nvidia.get(GEOMETRIES_KEY)
    if isinstance(current, list):
        current.extend(items)  # in place: existing entries keep their text and comments
    else:
        seq = CommentedSeq()
        seq.extend(items)
        nvidia[GEOMETRIES_KEY] = seq


def render_device_config(
    cm: Mapping[str, Any] | None,
    config: OperatorConfig,
    now: str,
    *,
    mig_models: Sequence[str] = (),
    reported: Sequence[ReportedGpuModel] = (),
    vnpus: Any = None,
    scheduler_version: Version | None = None,
) -> Rendered:
    """Render the device config ConfigMap.

    `mig_models`: NVML names of the GPUs on MIG-mode nodes (each must end up covered);
    `reported`: the profiles node agents report; `vnpus`: the `vnpus:` value of
    `hami-scheduler-device` to mirror (only used with `ascendVnpu.enabled`; None: leave as is),
    written in the form `scheduler_version` parses (None: not known).
    """
    ref = config.device_config
    current = cm_data(cm).get(ref.key, "")
    later: list[MemoryCorrection] = []
    lowered: list[MemoryCorrection] = []
    rt, doc = load_mapping(current, f"{ref.name}/{ref.key}", "overwrite")
    notes: list[str] = []
    changed = False
    nvidia = doc.get("nvidia")
    if not isinstance(nvidia, MutableMapping):
        nvidia = CommentedMap()
        doc["nvidia"] = nvidia
        changed = True
    factor = plain(nvidia.get("gpuMemoryFactor"))
    if isinstance(factor, int) and factor >= 1 and factor != config.memory_factor:
        # an unset gpuMemoryFactor is the live one (core/volcano/snapshot.py): only an explicit
        # setting changes it, and that changes the unit of every pod's request: said
        notes.append(
            f"gpuMemoryFactor {factor} -> {config.memory_factor} (the operator config's): a "
            f"volcano.sh/vgpu-memory request of N now means N x {config.memory_factor} MiB, "
            f"not N x {factor} MiB"
        )
    for key, value in desired_nvidia(config).items():
        if key not in nvidia or plain(nvidia[key]) != value:
            nvidia[key] = value
            changed = True
    existing = existing_geometries(nvidia)
    if existing is None:
        notes.append(
            f"{GEOMETRIES_KEY} is not in the Volcano format (models/allowedGeometries/group); "
            "left as it is"
        )
    else:
        plan = build_known_geometries(
            existing,
            mig_models,
            catalog_for(config),
            reported,
            from_inventory=config.mig_geometries.from_inventory,
            builtins=config.mig_geometries.builtins,
        )
        fixes = memory_corrections(plan.entries, hardware_memory(reported))
        kept = [f for f in fixes if f.entry < len(existing) and provably_above(f)]
        # The figures of a GPU the cluster has are lowered now (a pod asking what the template
        # promises gets less); those of a model no node has ride along with the next write,
        # never a write (and the restarts it costs) of their own.
        present = {*mig_models, *(r.nvml_name for r in reported)}
        later = [f for f in kept if f.model not in present]
        if urgent := [f for f in kept if f.model in present]:
            _lower_in_place(nvidia, urgent)
            changed = True
        lowered = [*urgent, *(f for f in fixes if f.entry >= len(existing))]
        appended = [
            corrected(e, [f for f in fixes if f.entry == len(existing) + i])
            for i, e in enumerate(plan.appended)
        ]
        if appended or GEOMETRIES_KEY not in nvidia:
            _set_geometries(nvidia, appended)
            changed = True
        if plan.uncovered:
            notes.append(
                "no knownMigGeometries entry for " + ", ".join(plan.uncovered) + " (add the "
                "model to migGeometries.catalog in the operator config)"
            )
    if config.ascend_vnpu.enabled and vnpus is not None:
        form = scheduler_vnpus_form(scheduler_version)
        desired = vnpus_for_scheduler(vnpus, form)
        if not keeps(doc.get("vnpus"), desired, form):
            doc["vnpus"] = desired
            changed = True
    data = cm_data(cm)
    if not changed:
        return Rendered(data=data, notes=tuple(notes))
    if later:
        _lower_in_place(nvidia, later)
        lowered += later
    if lowered:
        notes.append(
            "knownMigGeometries memory lowered to the instances': "
            + "; ".join(describe(f) for f in lowered)
        )
    data[ref.key] = keep_trailing_newline(current, rt.dump(doc))
    return Rendered(
        data=data, annotations=stamp(now), changed=True, create=cm is None, notes=tuple(notes)
    )


def vnpus_section(cm: Mapping[str, Any] | None, key: str) -> Any:
    """The `vnpus:` value of `hami-scheduler-device` (None when absent or unreadable)."""
    text = cm_data(cm).get(key, "")
    try:
        doc = RoundTrip(text).load()
    except RenderError:
        return None
    return doc.get("vnpus") if isinstance(doc, Mapping) else None

"""`volcano-vgpu-device-config` / `device-config.yaml`.

The operator owns, in the `nvidia:` section: the four resource names, `gpuMemoryFactor`, the
defaults (`deviceSplitCount`, `deviceMemoryScaling`, `deviceCoreScaling`, `defaultMemory`,
`defaultCores`, `defaultGPUNum`, `overwriteEnv`) and `knownMigGeometries`, to which it only
appends (core.volcano.geometry). With Ascend vNPU on it also owns the top-level `vnpus:` section, a
copy
of the one in `hami-scheduler-device` (the scheduler reads both sections from this one ConfigMap:
volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/config.go). Every other section and key,
and every comment, is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from pydantic import ValidationError
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from vgpu_operator.core.volcano.geometry import (
    ReportedGpuModel,
    build_known_geometries,
    catalog_for,
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
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.volcano import MigGeometryEntry

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
        "gpuMemoryFactor": config.gpu_memory_factor,
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
) -> Rendered:
    """Render the device config ConfigMap.

    `mig_models`: NVML names of the GPUs on MIG-mode nodes (each must end up covered);
    `reported`: the profiles node agents report; `vnpus`: the `vnpus:` value of
    `hami-scheduler-device` to mirror (only used with `ascendVnpu.enabled`; None: leave as is).
    """
    ref = config.device_config
    current = cm_data(cm).get(ref.key, "")
    rt, doc = load_mapping(current, f"{ref.name}/{ref.key}", "overwrite")
    notes: list[str] = []
    changed = False
    nvidia = doc.get("nvidia")
    if not isinstance(nvidia, MutableMapping):
        nvidia = CommentedMap()
        doc["nvidia"] = nvidia
        changed = True
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
        if plan.appended or GEOMETRIES_KEY not in nvidia:
            _set_geometries(nvidia, plan.appended)
            changed = True
        if plan.uncovered:
            notes.append(
                "no knownMigGeometries entry for " + ", ".join(plan.uncovered) + " (add the "
                "model to migGeometries.catalog in the operator config)"
            )
    if config.ascend_vnpu.enabled and vnpus is not None and plain(doc.get("vnpus")) != plain(vnpus):
        doc["vnpus"] = plain(vnpus)
        changed = True
    data = cm_data(cm)
    if not changed:
        return Rendered(data=data, notes=tuple(notes))
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

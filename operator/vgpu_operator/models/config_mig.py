"""The operator configuration's `migGeometries`: the `knownMigGeometries` catalog the operator
renders into the scheduler's device config, checked strictly (the payload model is as lenient as
the Go readers are): every group must fit, as a whole, on each catalog GPU its models match
(memory slices and placements, models.mig_placement), not only by its compute slices; and every
model string must match alike in the scheduler and the device plugin (models.volcano
`prefix_only_match`).

A group whose models match no GPU of models.gpu_catalog (an unconfirmed row's GPU, or one no
row knows) can only be checked here by its compute slices: no MIG GPU has more than seven, but
which memory slices a `<G>g.<GB>gb` profile takes, how many of it the GPU allows and where it may
start are the GPU's own (`nvidia-smi mig -lgip`/`-lgipp`), not derivable from the name. Such a
group is accepted here and checked against the listing a node's agent reports for the GPU (the
rule `mig-geometry-groups`: an error where the listing shows it cannot exist, an info where no
node lists the GPU yet)."""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from vgpu_operator.models import gpu_catalog, gpu_catalog_unconfirmed, mig_placement
from vgpu_operator.models.config_refs import ConfigModel, cross_field_error
from vgpu_operator.models.volcano import DEVICE_TYPE_PREFIX, MigGeometryEntry, prefix_only_match

MIG_PROFILE = re.compile(r"^[1-8]g\.[0-9]+gb([+-][a-z.]+)?$")
# The scheduler encodes a MIG pick as `<GPU-UUID>[<group>-<position>]` and splits it on "-"
# expecting two parts (volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/mig.go);
# the pod annotation joins fields, devices and containers with "," ":" ";" (nvidia/vgpu/utils.go
# `encodePodDevices`). A group name with any of these, or brackets, breaks the pick.
BASE_PROFILE = re.compile(r"^[1-8]g\.[0-9]+gb$")
MIG_GROUP = re.compile(r"^[A-Za-z0-9_.]+$")
MAX_COMPUTE_SLICES = 7  # the most any MIG GPU has (A100, H100, H200); A30 has 4


def _compute_slices(models: list[str]) -> tuple[int, str]:
    """The compute slices of the GPUs an entry's model strings match (substrings of
    `NVIDIA-<NVML name>`): the fewest of the known models matched, else the most any MIG GPU
    has; and the model that sets the limit."""
    limit, which = MAX_COMPUTE_SLICES, ""
    for gpu in gpu_catalog.MIG_MODELS.values():
        if any(m and m in f"NVIDIA-{gpu.nvml_name}" for m in models) and (
            gpu.compute_slices < limit
        ):
            limit, which = gpu.compute_slices, gpu.nvml_name
    return limit, which


def _matched_models(models: list[str]) -> list[gpu_catalog.GpuModel]:
    """The catalog's MIG models an entry's model strings match (substrings of `NVIDIA-<name>`)."""
    return [
        gpu
        for gpu in gpu_catalog.MIG_MODELS.values()
        if any(m and m in f"NVIDIA-{gpu.nvml_name}" for m in models)
    ]


def group_misfit(gpus: list[gpu_catalog.GpuModel], profiles: dict[str, int]) -> tuple[str, str]:
    """Why a group cannot exist on one of the GPUs the entry serves, and the fix ("" : it can).
    The device plugin creates the whole group on one GPU (`GenerateMigTemplate`,
    Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/plugin/server.go); the operator's own
    placement (models.mig_placement) decides whether nvidia-mig-parted can."""
    for gpu in gpus:
        base = [p for p in profiles if BASE_PROFILE.match(p)]
        missing = [p for p in base if gpu.profile(p) is None]
        if missing:
            known = ", ".join(p.name for p in gpu.profiles if BASE_PROFILE.match(p.name))
            return (
                f"{gpu.nvml_name} has no MIG profile {', '.join(missing)}",
                f"use its profiles ({known}), or narrow models to the GPUs that have it",
            )
        if len(base) < len(profiles):
            continue  # a +me/-me/+gfx profile the catalog does not list: not judged
        why = mig_placement.misfit(gpu, profiles)
        if why is not None:
            return (
                why,
                "use fewer or smaller instances (a group is one whole-GPU layout; see "
                f"nvidia-smi mig -lgip/-lgipp on a {gpu.nvml_name})",
            )
    return "", ""


def _check_catalog_entry(path: str, entry: MigGeometryEntry) -> None:
    """The payload model is lenient (the Go readers are); the catalog is checked strictly."""

    def fail(where: str, problem: str, fix: str) -> None:
        raise cross_field_error(path + where, problem, fix)

    if entry.model_extra:
        fail("", f"unknown keys {sorted(entry.model_extra)}", "use models and allowedGeometries")
    if not entry.models or any(not m.strip() for m in entry.models):
        fail(".models", "needs at least one non-empty model string", "add NVML name substrings")
    known = [g.nvml_name for g in gpu_catalog.GPU_MODELS.values()]
    known += sorted(gpu_catalog_unconfirmed.unconfirmed_names())
    for m, model in enumerate(entry.models):
        why = prefix_only_match(model, known)
        if why:
            fail(
                f".models[{m}]",
                f"{model!r} matches in the scheduler and not in the device plugin: {why}; the "
                "scheduler then picks a MIG instance the plugin finds no group for, and the "
                "container starts without it",
                "write a part of the NVML name as nvidia-smi --query-gpu=name prints it, without "
                f"{DEVICE_TYPE_PREFIX!r} (e.g. A100-SXM4-40GB or H100 80GB HBM3)",
            )
    if not entry.allowed_geometries:
        fail(".allowedGeometries", "needs at least one group", "add a group of MIG profiles")
    groups: set[str] = set()
    limit, limited_by = _compute_slices(list(entry.models))
    gpus = _matched_models(list(entry.models))
    for g, group in enumerate(entry.allowed_geometries):
        where = f".allowedGeometries[{g}]"
        if group.model_extra:
            fail(where, f"unknown keys {sorted(group.model_extra)}", "use group and geometries")
        if not group.group or group.group in groups:
            fail(where + ".group", "group names must be set and unique", "name each group once")
        if not MIG_GROUP.match(group.group):
            fail(
                where + ".group",
                f"{group.group!r}: the scheduler splits MIG device ids on '-' and the pod "
                "annotation on ',', ':' and ';'",
                "use letters, digits, '_' and '.' only (e.g. group1)",
            )
        groups.add(group.group)
        if not group.geometries:
            fail(where + ".geometries", "needs at least one profile", "add name/memory/count")
        for t, tmpl in enumerate(group.geometries):
            at = f"{where}.geometries[{t}]"
            if tmpl.model_extra:
                fail(at, f"unknown keys {sorted(tmpl.model_extra)}", "use name, memory, count")
            if not MIG_PROFILE.match(tmpl.name):
                fail(at + ".name", f"{tmpl.name!r} is not a MIG profile", "write e.g. 1g.10gb")
            if tmpl.memory <= 0:
                fail(at + ".memory", "must be > 0", "give the profile's memory in MiB")
            if not 1 <= tmpl.count <= 7:
                fail(at + ".count", "must be 1..7", "give how many of this profile the group has")
        used = sum(int(t.name.split("g.", 1)[0]) * t.count for t in group.geometries)
        if used > limit:
            gpu = (
                f"{limited_by} has"
                if limited_by
                else "its models match no GPU of the catalog (so only compute slices can be "
                "checked here), and no MIG GPU has more than"
            )
            fail(
                where + ".geometries",
                f"the group needs {used} compute slices (the <G> of <G>g.<GB>gb times the count), "
                f"but {gpu} {limit}: the device plugin's nvidia-mig-parted apply fails, which "
                "stops the plugin",
                f"keep each group within {limit} compute slices",
            )
        profiles: dict[str, int] = {}
        for tmpl in group.geometries:
            profiles[tmpl.name] = profiles.get(tmpl.name, 0) + tmpl.count
        why, fix = group_misfit(gpus, profiles)
        if why:
            fail(
                where + ".geometries",
                f"the group cannot exist: {why}; the device plugin's nvidia-mig-parted apply "
                "fails, which stops the plugin",
                fix,
            )


class MigGeometries(ConfigModel):
    """The `knownMigGeometries` catalog: entries here first, then the built-in defaults (A30,
    A100 40/80 GB, H100, H200) and the built-in MIG catalog's other models (`builtins`), then,
    for a model none of these knows, entries built from the profiles node agents report
    (`fromInventory`; only reports that pass core.volcano.geometry's sanity check)."""

    builtins: bool = True
    from_inventory: bool = Field(default=True, alias="fromInventory")
    catalog: list[MigGeometryEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _catalog_valid(self) -> MigGeometries:
        seen: dict[str, int] = {}
        for i, entry in enumerate(self.catalog):
            _check_catalog_entry(f"catalog[{i}]", entry)
            for model in entry.models:
                if model in seen:
                    raise cross_field_error(
                        f"catalog[{i}].models",
                        f"model {model!r} is already listed in catalog[{seen[model]}]; the "
                        "scheduler only ever uses the first match",
                        "list each model once",
                    )
                seen[model] = i
        return self

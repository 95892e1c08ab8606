"""Rules on the knownMigGeometries entries as the components read them: model strings that match
in the scheduler and not in the device plugin, and groups that cannot exist on the GPUs they
serve.

- Model strings: the scheduler tests a string against `NVIDIA-<NVML name>`, the plugin against
  the NVML name alone (models.volcano `prefix_only_match`).
- Groups: the plugin creates a whole group on one GPU with `nvidia-mig-parted apply` and stops
  (`klog.Fatalf`) when that fails (`GenerateMigTemplate`, `ApplyMigTemplate`,
  Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/plugin/server.go); a group that does not
  fit the GPU's memory slices and placements fails there (NVIDIA/mig-parted@v0.15.0:
  pkg/mig/config/config.go). A GPU the catalog knows is judged by the catalog
  (models.config_mig `group_misfit`, the check the operator config's own catalog passes); one it
  does not know, by the profiles and placements a node's agent read from the driver (`-lgip`,
  `-lgipp`: core.mig.place `geometry_of_gpu`), where one does. Only the first entry matching a
  GPU serves it (`extractGeometryFromType`), so only that one is judged for it.

Both read the scheduler's device config and the plugin's (when it reads another one).
"""

from __future__ import annotations

from collections.abc import Iterator

from vgpu_operator import contract
from vgpu_operator.core.mig.place import geometry_of_gpu
from vgpu_operator.core.rules.base import Issue, ObjectRef, cm_ref, error, info, rule
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, DeviceConfigSource, name_of
from vgpu_operator.models import gpu_catalog, gpu_catalog_unconfirmed, mig_placement
from vgpu_operator.models.config_mig import BASE_PROFILE, group_misfit
from vgpu_operator.models.inventory import GpuInfo
from vgpu_operator.models.volcano import (
    DEVICE_TYPE_PREFIX,
    MigGeometryGroup,
    first_match,
    prefix_only_match,
)

CRASH = (
    "the device plugin's nvidia-mig-parted apply fails when a pod gets an instance of it, and "
    "the plugin stops (the pod fails with UnexpectedAdmissionError)"
)


def _sources(s: ClusterSnapshot) -> list[DeviceConfigSource]:
    found = {(x.namespace, x.name): x for x in (s.scheduler_device_config, s.plugin_device_config)}
    return [found[k] for k in sorted(found)]


def _short(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


@rule("mig-model-strings", "knownMigGeometries models match alike in scheduler and plugin")
def check_model_strings(s: ClusterSnapshot) -> Iterator[Issue]:
    """Each model string, against the catalogs' GPU names and the cluster's."""
    names = sorted(
        {
            *(g.nvml_name for g in gpu_catalog.GPU_MODELS.values()),
            *gpu_catalog_unconfirmed.unconfirmed_names(),
            *s.mig_gpu_names,
            *(r.nvml_name for r in s.reported_models),
        }
    )
    for src in _sources(s):
        for e, entry in enumerate(src.nvidia.geometries() if src.nvidia else []):
            for m, model in enumerate(entry.models):
                why = prefix_only_match(model, names)
                if why is None:
                    continue
                yield error(
                    cm_ref(src.namespace, src.name),
                    f"knownMigGeometries[{e}].models[{m}] {_short(model)} matches in the "
                    f"scheduler and not in the device plugin: {why}; the scheduler gives pods a "
                    "MIG instance of this entry that the plugin finds no group for "
                    "(GenerateMigTemplate: position -1), and the container starts without it",
                    fix=f"edit the string in {src.namespace}/{src.name} to a part of the NVML "
                    f"name (nvidia-smi --query-gpu=name), without {DEVICE_TYPE_PREFIX!r}, then "
                    "restart the scheduler and the plugin; model strings are not part of a pod's "
                    "pick (group names and order are)",
                )


def _profiles(group: MigGeometryGroup) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in group.geometries:
        out[t.name] = out.get(t.name, 0) + t.count
    return out


def _listed(s: ClusterSnapshot) -> dict[str, tuple[str, GpuInfo]]:
    """NVML name -> (node, GPU) of the first GPU no catalog row knows whose agent read its
    profiles and placements from the driver."""
    out: dict[str, tuple[str, GpuInfo]] = {}
    for node in s.nodes:
        inv = s.inventory(node)
        for gpu in inv.gpus if inv is not None else []:
            if gpu_catalog.model_for_name(gpu.name) is not None or gpu.name in out:
                continue
            if gpu.profiles_source == "driver" and any(p.placements for p in gpu.profiles):
                out[gpu.name] = (name_of(node), gpu)
    return out


@rule("mig-geometry-groups", "every knownMigGeometries group can exist on the GPUs it serves")
def check_groups(s: ClusterSnapshot) -> Iterator[Issue]:
    """Errors where a node has the GPU, info where none has it yet (no pod can get the group);
    info too for a GPU on a MIG node that neither the catalog nor any agent's listing describes."""
    present = set(s.mig_gpu_names)
    listed = _listed(s)
    for src in _sources(s):
        entries = src.nvidia.geometries() if src.nvidia else []
        where = f"{src.namespace}/{src.name}"
        for e, entry in enumerate(entries):
            for gpu in gpu_catalog.MIG_MODELS.values():
                if first_match(entries, gpu.nvml_name) is not entry:
                    continue
                for group in entry.allowed_geometries:
                    why, fix = group_misfit([gpu], _profiles(group))
                    if why:
                        report = error if gpu.nvml_name in present else info
                        yield report(
                            cm_ref(src.namespace, src.name),
                            f"knownMigGeometries[{e}] group {group.group!r} cannot exist on "
                            f"{gpu.nvml_name} (the catalog's geometry): {why}; {CRASH}",
                            fix=f"{fix}; change the group in {where} (keeping its name and "
                            "place) and restart the scheduler and the plugin",
                        )
            for name, (node, gpu_info) in sorted(listed.items()):
                if first_match(entries, name) is not entry:
                    continue
                geometry = geometry_of_gpu(gpu_info, None)
                if geometry is None:
                    continue
                for group in entry.allowed_geometries:
                    profiles = _profiles(group)
                    base = {p: n for p, n in profiles.items() if BASE_PROFILE.match(p)}
                    missing = [p for p in base if geometry.shape(p) is None]
                    problem = (
                        f"its listing has no profile {', '.join(missing)}"
                        if missing
                        else mig_placement.geometry_misfit(geometry, name, base)
                    )
                    if problem:
                        yield error(
                            (cm_ref(src.namespace, src.name), ObjectRef(kind="Node", name=node)),
                            f"knownMigGeometries[{e}] group {group.group!r} cannot exist on "
                            f"{name}, which no catalog row knows, by the profiles the agent of "
                            f"{node} read from the driver ({contract.ANN_INVENTORY}): {problem}; "
                            f"{CRASH}",
                            fix="use the profiles, counts and placements nvidia-smi mig "
                            f"-lgip/-lgipp lists on {node}; change the group in {where} (keeping "
                            "its name and place) and restart the scheduler and the plugin",
                        )
        unknown = sorted(
            n
            for n in present
            if gpu_catalog.model_for_name(n) is None
            and n not in listed
            and first_match(entries, n) is not None
        )
        if unknown:
            yield info(
                cm_ref(src.namespace, src.name),
                f"the knownMigGeometries groups serving {', '.join(unknown)} are checked by their "
                "compute slices only: no catalog row gives these GPUs' memory slices and "
                "placements, and no node's agent has listed them from the driver",
                fix="run the agent on those nodes (it reports nvidia-smi mig -lgip/-lgipp), or "
                "compare each group with nvidia-smi mig -lgipp there yourself",
            )

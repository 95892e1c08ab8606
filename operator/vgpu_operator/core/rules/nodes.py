"""Rules on the nodes: what the device plugin registered (the node annotation
`volcano.sh/node-vgpu-register`, Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/util/types.go),
MIG geometry coverage (`knownMigGeometries` models,
volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/utils.go;
Project-HAMi/volcano-vgpu-device-plugin#102) and the memory entry count (`checkDeviceEntries`,
Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/rm/rm.go;
Project-HAMi/volcano-vgpu-device-plugin#18/#56)."""

from __future__ import annotations

import math
from collections.abc import Iterator

from vgpu_operator import bounds, contract
from vgpu_operator.core.rules.base import Issue, ObjectRef, cm_ref, error, info, rule, warning
from vgpu_operator.core.volcano.geometry import (
    build_known_geometries,
    catalog_for,
    disagreements,
    known_names,
    report_problem,
    reported_from_inventory,
    shadowed,
)
from vgpu_operator.core.volcano.memory_unit import plugin_memory_unit
from vgpu_operator.core.volcano.mig_memory import (
    hardware_memory,
    may_correct,
    memory_corrections,
    provably_above,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, Obj, labels_of, name_of
from vgpu_operator.models import gpu_catalog
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, device_type, first_match

MAX_MEMORY_ENTRIES = 60000


def _node(node: Obj) -> ObjectRef:
    return ObjectRef(kind="Node", name=name_of(node))


@rule("node-registration", "each vGPU node is registered by the plugin in its configured mode")
def check_registration(s: ClusterSnapshot) -> Iterator[Issue]:
    can_restart = s.config.restarts.allowed
    for node in s.vgpu_nodes:
        name = name_of(node)
        records = s.registered(node)
        if records is None:
            yield error(
                _node(node),
                f"{name} has no {REGISTER_ANNOTATION}: the device plugin has not registered its "
                "GPUs, so the scheduler gives it no vGPU device",
                fix="check that a device plugin pod runs on the node (see plugin-placement) and "
                "its log",
            )
            continue
        if not records:
            yield error(
                _node(node),
                f"{name}: {REGISTER_ANNOTATION} cannot be read",
                fix="restart the node's device plugin pod",
            )
            continue
        if any(r.mode is None for r in records):
            yield error(
                _node(node),
                f"{name}: register records have no mode field (plugin before v1.10); Volcano "
                "v1.12+ rejects them",
                fix="upgrade the device plugin",
            )
            continue
        want = s.node_config.effective_for(name).mode
        modes = sorted({r.mode or "" for r in records})
        if modes != [want]:
            yield error(
                _node(node),
                f"{name} is registered in mode {', '.join(modes)} but its node-config entry says "
                f"{want}: the plugin pod read config.json before the entry changed (pods pinned "
                "to the other mode are rejected there)",
                fix=f"restart the device plugin pod on {name}",
                fixable=can_restart,
            )


@rule("mig-geometry-coverage", "knownMigGeometries covers every GPU model on MIG nodes")
def check_mig_coverage(s: ClusterSnapshot) -> Iterator[Issue]:
    src = s.scheduler_device_config
    geometries = s.scheduler_nvidia.geometries()
    fallback = src.parsed is None
    where = "the built-in defaults" if fallback else f"{src.namespace}/{src.name}"
    ref = s.config.device_config
    ours = s.device_source(ref.namespace, ref.name)
    # what the operator's device config holds (or will hold once rendered)
    ours_plan = build_known_geometries(
        ours.nvidia.geometries() if ours.nvidia else [],
        s.mig_gpu_names,
        catalog_for(s.config),
        s.reported_models,
        from_inventory=s.config.mig_geometries.from_inventory,
        builtins=s.config.mig_geometries.builtins,
    )
    coverable = {n for n in s.mig_gpu_names if first_match(ours_plan.entries, n) is not None}
    reads_ours = not fallback and (src.namespace, src.name) == ref.ref()

    for node in s.mig_nodes:
        names, source = s.gpu_names(node)
        if not names:
            yield warning(
                _node(node),
                f"{name_of(node)} is a MIG node but its GPU model is unknown (no register "
                "records, inventory or GFD label)",
                fix="let the agent report the inventory, or check the device plugin",
            )
            continue
        for nvml in names:
            if first_match(geometries, nvml) is not None:
                continue
            approx = (
                f" (model taken from the GFD label {labels_of(node).get(contract.GFD_PRODUCT)!r}; "
                "the real NVML name may differ)"
                if source == "label"
                else ""
            )
            fixable = nvml in coverable and s.scheduler_conf is not None
            if fixable and reads_ours:
                fix = "the operator appends the entry"
            elif fixable:
                fix = (
                    f"point the scheduler at {ref.namespace}/{ref.name}, which covers the model "
                    "(see device-config-location)"
                )
            else:
                fix = (
                    f"add an entry whose models include a substring of {nvml!r} to "
                    "migGeometries.catalog in the operator config"
                )
            yield error(
                (_node(node), cm_ref(src.namespace, src.name)),
                f"no knownMigGeometries model in {where} matches the {nvml} GPUs of "
                f"{name_of(node)}{approx}: the scheduler treats the node as hami-core ('mig "
                "type not found', vvdp #102) while its plugin runs MIG",
                fix=fix,
                fixable=fixable,
            )


@rule("mig-memory-above-hardware", "no MIG template promises more memory than its instance")
def check_mig_memory(s: ClusterSnapshot) -> Iterator[Issue]:
    """The scheduler gives a pod the first template whose memory covers its request
    (`pickFromGroup`, volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/mig.go);
    above the instance's real memory (core.volcano.mig_memory) the pod gets an instance too small
    for it and runs out of memory (no HAMi-core limit in mig mode)."""
    src = s.scheduler_device_config
    if src.parsed is None:
        return
    ref = s.config.device_config
    fixable = (src.namespace, src.name) == ref.ref()
    hardware = hardware_memory(s.reported_models)
    present = {*s.mig_gpu_names, *(r.nvml_name for r in s.reported_models)}
    corrections = memory_corrections(s.scheduler_nvidia.geometries(), hardware)
    for c in filter(provably_above, corrections):
        # an error where a node has the GPU; for a model no node has, no pod can get such an
        # instance yet: said (info), and enforce lowers it with the next write of the device
        # config, not with a write and restarts of its own
        report = error if c.model in present else info
        yield report(
            cm_ref(src.namespace, src.name),
            f"knownMigGeometries gives {c.profile} of {c.model} ({c.group_name}) {c.memory} MiB, "
            f"but the instance has {c.hardware} MiB (the lowest nvidia-smi mig -lgip or inventory "
            f"figure): a pod asking {c.hardware + 1}-{c.memory} MiB gets it and runs out of memory",
            fix=f"set its memory to {c.hardware} (enforce mode does)"
            if fixable
            else f"set its memory to {c.hardware} in {src.namespace}/{src.name}",
            fixable=fixable,
        )


@rule("mig-geometry-reports", "agent inventories agree with the MIG catalog")
def check_reports(s: ClusterSnapshot) -> Iterator[Issue]:
    """An inventory is anyone's who may annotate the Node: where it contradicts the built-in
    MIG catalog for a model the catalog knows, reports a model no catalog knows in a way that
    fails the sanity check, or names a GPU no catalog knows by a part of another GPU's name
    (`H1` of `NVIDIA H100 80GB HBM3`: core.volcano.geometry `shadowed`), knownMigGeometries is
    not taken from it and this says so. Neither is ever written. A model no catalog knows that
    is taken from an inventory is said too (info), and one another model's entry serves (its
    figures do not lower that entry: core.volcano.mig_memory `may_correct`)."""
    required = set(s.mig_gpu_names)
    geometries = s.scheduler_nvidia.geometries()
    listed = [m for e in geometries for m in e.models]
    others = known_names(catalog_for(s.config), required, listed, _reported_names(s))
    for node in s.nodes:
        inv = s.inventory(node)
        for reported in reported_from_inventory(inv) if inv is not None else []:
            hits = _shadowing(s, reported.nvml_name, others)
            if hits:
                more = f" and {len(hits) - 3} more" if len(hits) > 3 else ""
                yield warning(
                    _node(node),
                    f"the inventory of {name_of(node)} ({contract.ANN_INVENTORY}, gpus[].name) "
                    f"names a GPU {_short(reported.nvml_name)}, which no catalog knows and which "
                    f"is part of the name of {', '.join(hits[:3])}{more}: as a "
                    "knownMigGeometries model it would match those GPUs too (the components "
                    "match by substring), so nothing is taken from it",
                    fix="check the node's agent and its inventory annotation; to cover a real "
                    "model of that name, add it to migGeometries.catalog in the operator config",
                )
                continue
            served = first_match(geometries, reported.nvml_name)
            if served is not None and not may_correct(served, reported.nvml_name):
                yield info(
                    _node(node),
                    f"the inventory of {name_of(node)} reports {_short(reported.nvml_name)}, "
                    "which no catalog knows; the components serve it with the knownMigGeometries "
                    f"entry of {', '.join(served.models)} (by substring), whose figures no "
                    "inventory of another name changes",
                    fix="if the model is real and differs, add its own entry to "
                    "migGeometries.catalog in the operator config",
                )
            diff = disagreements(reported)
            if diff:
                yield warning(
                    _node(node),
                    f"the inventory of {name_of(node)} reports {reported.nvml_name} MIG "
                    f"profiles that differ from the built-in catalog: {'; '.join(diff)}; "
                    "knownMigGeometries keeps the catalog's values, its memory lowered to the "
                    "lower figure (mig-memory-above-hardware)",
                    fix="check the node's driver and the agent's inventory annotation "
                    f"({contract.ANN_INVENTORY}); a forged annotation changes nothing",
                )
                continue
            problem = report_problem(reported)
            known = gpu_catalog.model_for_name(reported.nvml_name) is not None or any(
                e.matches(f"NVIDIA-{reported.nvml_name}") for e in catalog_for(s.config)
            )
            if known or reported.nvml_name not in required:
                continue
            if problem is not None and s.config.mig_geometries.from_inventory:
                yield warning(
                    _node(node),
                    f"the inventory of {name_of(node)} reports {reported.nvml_name}, which no "
                    f"catalog knows, but {problem}: it is not added to knownMigGeometries",
                    fix="add the model to migGeometries.catalog in the operator config",
                )
            elif problem is None and s.config.mig_geometries.from_inventory:
                yield info(
                    _node(node),
                    f"the inventory of {name_of(node)} reports {reported.nvml_name}, which no "
                    "catalog knows: its knownMigGeometries entry is made from this report, with "
                    f"the model string {reported.nvml_name!r}",
                    fix="to pin the model's geometry, add it to migGeometries.catalog in the "
                    "operator config",
                )


def _reported_names(s: ClusterSnapshot) -> list[str]:
    return [r.nvml_name for r in s.reported_models]


def _shadowing(s: ClusterSnapshot, name: str, others: set[str]) -> list[str]:
    """The GPUs an inventory's model name would shadow, for a name no catalog knows."""
    if gpu_catalog.model_for_name(name) is not None or any(
        e.matches(device_type(name)) for e in catalog_for(s.config)
    ):
        return []
    return shadowed(name, others)


def _short(name: str, limit: int = 60) -> str:
    return repr(name) if len(name) <= limit else f"{name[:limit]!r}... ({len(name)} characters)"


@rule("gpu-memory-factor", "no node registers more than 60,000 memory entries")
def check_memory_factor(s: ClusterSnapshot) -> Iterator[Issue]:
    """The factor is also said, always, as what it does to every pod (info, with where it is
    set: `core.volcano.memory_unit`): a vgpu-memory request of N means N x factor MiB, in
    hami-core mode (the plugin registers each GPU's MiB / factor and limits the container to
    N x factor MiB) and in MIG mode (the scheduler multiplies the request by it:
    volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/mig.go)."""
    unit = plugin_memory_unit(s)
    factor = unit.factor
    src = s.plugin_device_config
    memory = s.config.resource_names.memory
    example = unit.example()
    yield info(
        cm_ref(src.namespace, src.name),
        unit.line(memory) + (f": {example}" if example else ""),
        fix=(
            f"write {memory} requests in units of {factor} MiB (N = MiB / {factor}), or ask "
            f"for a share with {s.config.resource_names.memory_percentage}"
            if factor > 1
            else f"none: {memory} requests are in MiB"
        ),
    )
    for node in s.vgpu_nodes:
        records = s.registered(node)
        if records:
            entries = sum(r.memory for r in records)
            total_mib = entries * factor
        else:
            lab = labels_of(node)
            count = bounds.gpu_count(lab.get(contract.GFD_COUNT))  # None: node-input-bounds
            try:
                total_mib = (count or 0) * int(lab.get(contract.GFD_MEMORY, "0"))
            except ValueError:
                continue
            entries = total_mib // factor
        if entries <= MAX_MEMORY_ENTRIES:
            continue
        need = math.ceil(total_mib / MAX_MEMORY_ENTRIES)
        yield warning(
            _node(node),
            f"{name_of(node)} registers {entries} memory entries with gpuMemoryFactor {factor} "
            f"(the plugin warns above {MAX_MEMORY_ENTRIES}; users then see "
            "volcano.sh/vgpu-memory: 0)",
            fix=f"set gpuMemoryFactor to at least {need} in the operator config (memory requests "
            f"are then in units of {need} MiB)",
        )

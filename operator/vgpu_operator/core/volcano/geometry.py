"""`knownMigGeometries`: one list for the whole cluster, built by appending only.

The scheduler encodes a MIG pick as `<GPU-UUID>[<group>-<position>]` and the device plugin looks the
group up in its own copy (`encodeMIGID` in
volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/mig.go, `GenerateMigTemplate` in
Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/plugin/server.go), so a model already in the
list must keep its group names and order forever: `build_known_geometries` takes the existing list
(from the current ConfigMap) and only ever appends entries for GPU models no entry covers yet.
Matching is the components' own: a model string is a substring of the device type `NVIDIA-<NVML
name>`.

Sources of appended entries, in order: the operator config's catalog, the built-in defaults
(A30, A100 40/80 GB, H100 80 GB, H200; memory values of the current plugin manifest where it has
the model, else of `models.gpu_catalog`, each lowered to what the instance surely has by
core.volcano.mig_memory before it is written), the other models of `models.gpu_catalog`, and
only for a model none of these knows, the profiles a node agent reports
(`vgpu.volcano.sh/inventory`). A GPU `models.gpu_catalog_unconfirmed` holds gets no built-in
(each is another GPU's figures: H200's for the H200 NVL), only an operator-config entry or its
agents' report.

The list is cluster-wide and append-only, and an inventory is written by whoever may annotate
that Node: so an inventory never changes what the catalog says about a model it knows (a
disagreement is a warning of the `mig-geometry-reports` rule, never a write), and an unknown
model is added from an inventory only when the report passes `report_problem`: the profiles were
read from the driver (`nvidia-smi mig -lgip`, not the agent's fallback table), every GPU of the
model on that node lists the same ones, and each is a well-formed `<G>g.<GB>gb` profile whose
memory matches its name (0.8 to 1.05 times <GB> GiB; the catalog's own range is 0.89 to 0.99),
fits the GPU, and whose count fits the GPU's seven compute slices. Nor may an inventory add
anything to another model's geometry: the entry made from a report has the reported NVML name
as its one model string, and the components match model strings as substrings, first entry
first; a name that is a substring of another GPU's device type (`shadowed`: an agent naming its
GPU `H1` would take every `NVIDIA H100 80GB HBM3`, `B` every "...GB" name) is refused, and the
`mig-geometry-reports` rule names the node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from vgpu_operator.models import gpu_catalog, gpu_catalog_unconfirmed
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.volcano import (
    MigGeometryEntry,
    MigGeometryGroup,
    MigTemplate,
    device_type,
    first_match,
)

BASE_PROFILE = re.compile(r"^[1-8]g\.[0-9]+gb$")  # no +me/-me/+gfx, no CI-only "1c.3g.20gb"


@dataclass(frozen=True)
class ReportedProfile:
    """`memory_mib`: round(-lgip GiB x 1024) as the agent reports it today, or with `exact` the
    driver's MiB (NVML `memorySizeMB`), taken as it is by core.volcano.mig_memory."""

    name: str
    memory_mib: int
    max_count: int
    exact: bool = False


@dataclass(frozen=True)
class ReportedGpuModel:
    """What an agent reports for one GPU model: its NVML name and its GPU-instance profiles;
    `memory_mib` the GPU's memory (0: not said), `problem` why the report as a whole is not
    trusted (its GPUs disagree, the profiles are not the driver's)."""

    nvml_name: str
    profiles: tuple[ReportedProfile, ...] = ()
    memory_mib: int = 0
    problem: str | None = None


def reported_from_inventory(inventory: Inventory) -> list[ReportedGpuModel]:
    """One entry per distinct NVML name of the node's MIG-capable GPUs."""
    out: dict[str, ReportedGpuModel] = {}
    for gpu in inventory.gpus:
        if not gpu.mig_capable:
            continue
        profiles = tuple(ReportedProfile(p.name, p.memory_mib, p.count) for p in gpu.profiles)
        seen = out.get(gpu.name)
        if seen is not None:
            if seen.problem is None and seen.profiles != profiles:
                out[gpu.name] = replace(
                    seen, problem="its GPUs list different profiles on the same node"
                )
            continue
        problem = None
        if profiles and gpu.profiles_source != "driver":
            problem = (
                f"its profiles come from the agent's table ({gpu.profiles_source}), not the driver"
            )
        out[gpu.name] = ReportedGpuModel(gpu.name, profiles, gpu.memory_mib, problem)
    return list(out.values())


_PROFILE_NAME = re.compile(r"^([1-8])g\.([0-9]+)gb(\+me|\+gfx|-me)?$")
MEMORY_RATIO = (0.8, 1.05)  # memory of a <G>g.<GB>gb profile / (<GB> GiB)


def report_problem(reported: ReportedGpuModel) -> str | None:
    """Why a report may not add its model to knownMigGeometries (None: it may); see the module
    docstring for what is checked."""
    if reported.problem is not None:
        return reported.problem
    if not any(BASE_PROFILE.match(p.name) for p in reported.profiles):
        return "it lists no GPU-instance profile"
    for p in reported.profiles:
        named = _PROFILE_NAME.match(p.name)
        if named is None:
            continue  # compute-instance or other listings: not used
        slices, gib = int(named.group(1)), int(named.group(2))
        low, high = (gib * 1024 * r for r in MEMORY_RATIO)
        if not low <= p.memory_mib <= high:
            return f"{p.name} has {p.memory_mib} MiB, not about {gib} GiB"
        if reported.memory_mib and p.memory_mib > reported.memory_mib:
            return f"{p.name} has more memory ({p.memory_mib} MiB) than the GPU"
        if not 1 <= p.max_count <= 7 or (BASE_PROFILE.match(p.name) and slices * p.max_count > 8):
            return f"{p.name} x{p.max_count} does not fit one GPU"
    return None


def _entry(models: list[str], groups: list[list[tuple[str, int, int]]]) -> MigGeometryEntry:
    return MigGeometryEntry(
        models=models,
        allowedGeometries=[
            MigGeometryGroup(
                group=f"group{i}",
                geometries=[MigTemplate(name=n, memory=m, count=c) for n, m, c in group],
            )
            for i, group in enumerate(groups, start=1)
        ],
    )


def _from_catalog(
    models: list[str], gpu: gpu_catalog.GpuModel, small: str, mid: str, half: str, full: str
) -> MigGeometryEntry:
    """The manifest's four-group shape: 7 x 1g; 3 x 2g + 1 x 1g; 2 x 3g; 1 x 7g."""

    def mib(name: str) -> int:
        profile = gpu.profile(name)
        if profile is None:  # pragma: no cover - a wrong table entry is a programming error
            raise KeyError(f"{gpu.nvml_name} has no profile {name}")
        return profile.memory_mib

    return _entry(
        models,
        [
            [(small, mib(small), 7)],
            [(mid, mib(mid), 3), (small, mib(small), 1)],
            [(half, mib(half), 2)],
            [(full, mib(full), 1)],
        ],
    )


# Model strings are substrings of real NVML names only (the manifest's "A100-40GB-PCIe",
# "A100-80GB-PCIe" and "A100-PCIE-80GB" match no real device and are left out).
BUILTIN_GEOMETRIES: tuple[MigGeometryEntry, ...] = (
    _entry(  # plugin manifest values
        ["A30"],
        [[("1g.6gb", 6144, 4)], [("2g.12gb", 12288, 2)], [("4g.24gb", 24576, 1)]],
    ),
    _entry(  # plugin manifest values
        ["A100-SXM4-40GB", "A100-PCIE-40GB"],
        [
            [("1g.5gb", 5120, 7)],
            [("2g.10gb", 10240, 3), ("1g.5gb", 5120, 1)],
            [("3g.20gb", 20480, 2)],
            [("7g.40gb", 40960, 1)],
        ],
    ),
    _entry(  # plugin manifest (HEAD/v1.12.0) values
        ["A100-SXM4-80GB", "A100 80GB PCIe"],
        [
            [("1g.10gb", 9728, 7)],
            [("2g.20gb", 19968, 3), ("1g.10gb", 9728, 1)],
            [("3g.40gb", 40192, 2)],
            [("7g.80gb", 80896, 1)],
        ],
    ),
    _from_catalog(
        ["H100 80GB HBM3", "H100 PCIe"],
        gpu_catalog.H100_80GB,
        "1g.10gb",
        "2g.20gb",
        "3g.40gb",
        "7g.80gb",
    ),
    # "NVIDIA H200" matches "NVIDIA H200" and "NVIDIA H200 NVL" but not "NVIDIA GH200 ...".
    _from_catalog(["NVIDIA H200"], gpu_catalog.H200, "1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"),
)


def catalog_for(config: OperatorConfig) -> list[MigGeometryEntry]:
    """The operator config's catalog, then (unless switched off) the built-in defaults."""
    entries = list(config.mig_geometries.catalog)
    if config.mig_geometries.builtins:
        entries.extend(BUILTIN_GEOMETRIES)
    return entries


def known_names(catalog: Iterable[MigGeometryEntry], *more: Iterable[str]) -> set[str]:
    """Every GPU name an inventory's model string must not shadow: the NVML names of the rows of
    `models.gpu_catalog` and `models.gpu_catalog_unconfirmed`, the model strings of the catalogs
    and built-ins (and each as an NVML name, `NVIDIA <model>`), and the names in `more` (the
    cluster's GPUs, what agents report)."""
    out = {m.nvml_name for m in gpu_catalog.GPU_MODELS.values()}
    out |= gpu_catalog_unconfirmed.unconfirmed_names()
    for entry in (*catalog, *BUILTIN_GEOMETRIES):
        for model in entry.models:
            out.update((model, model if model.startswith("NVIDIA") else f"NVIDIA {model}"))
    for names in more:
        out.update(names)
    return out


def shadowed(name: str, others: Iterable[str]) -> list[str]:
    """The other GPUs `name`, as a knownMigGeometries model string, would match too: those whose
    device type (`NVIDIA-<NVML name>`) holds it."""
    return sorted({o for o in others if o != name and name in device_type(o)})


@dataclass(frozen=True)
class GeometryPlan:
    entries: list[MigGeometryEntry]  # the existing list followed by what was appended
    appended: list[MigGeometryEntry] = field(default_factory=list)
    uncovered: list[str] = field(default_factory=list)  # NVML names nothing covers
    appended_models: list[str] = field(default_factory=list)  # NVML names the appends cover
    # NVML names whose report was refused, with the GPUs their model string would match too
    shadowing: dict[str, list[str]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.appended)


def _slices(profile: str) -> int:
    return int(profile.split("g.", 1)[0])


def _synthesized(reported: ReportedGpuModel) -> MigGeometryEntry | None:
    """One group per memory size, smallest first, each with one profile at its maximum count:
    of profiles with the same memory (H100's 1g.20gb and 2g.20gb, 3g.40gb and 4g.40gb) the one
    with more compute slices. The scheduler tries groups in order and takes the first whose
    template has enough memory (volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/
    mig.go), so of two groups with equal memory the later one would never be chosen."""
    best: dict[int, ReportedProfile] = {}
    for p in reported.profiles:
        if not BASE_PROFILE.match(p.name) or p.max_count <= 0:
            continue
        kept = best.get(p.memory_mib)
        if kept is None or (_slices(p.name), p.name) > (_slices(kept.name), kept.name):
            best[p.memory_mib] = p
    if not best:
        return None
    base = [best[m] for m in sorted(best)]
    return _entry([reported.nvml_name], [[(p.name, p.memory_mib, p.max_count)] for p in base])


def build_known_geometries(
    existing: Sequence[MigGeometryEntry],
    required: Iterable[str],
    catalog: Sequence[MigGeometryEntry],
    reported: Sequence[ReportedGpuModel] = (),
    *,
    from_inventory: bool = True,
    builtins: bool = True,
) -> GeometryPlan:
    """Cover every NVML name in `required` (the GPU models of MIG-mode nodes) by appending to
    `existing`; entries already there are returned unchanged and in place."""
    existing = list(existing)
    names = sorted(set(required))
    entries = list(existing)
    appended: list[MigGeometryEntry] = []
    uncovered: list[str] = []
    by_name = (
        {r.nvml_name: r for r in reported if report_problem(r) is None} if from_inventory else {}
    )
    others = known_names(catalog, names, (r.nvml_name for r in reported))
    others |= {m for e in existing for m in e.models}
    shadowing: dict[str, list[str]] = {}
    unconfirmed = gpu_catalog_unconfirmed.unconfirmed_names()
    for name in names:
        if first_match(entries, name) is not None:
            continue
        dtype = device_type(name)
        candidate = next((c for c in catalog if c.matches(dtype)), None)
        if name in unconfirmed and any(candidate is b for b in BUILTIN_GEOMETRIES):
            candidate = None
        known = gpu_catalog.model_for_name(name) if builtins else None
        new: MigGeometryEntry | None
        if candidate is not None:
            taken = {m for e in entries for m in e.models}
            models = [m for m in dict.fromkeys(candidate.models) if m not in taken]
            new = candidate.model_copy(update={"models": models})
        elif known is not None and known.mig_capable:
            new = _synthesized(catalog_report(known))
        elif name in by_name and (hits := shadowed(name, others)):
            shadowing[name], new = hits, None  # it would take another model's geometry
        elif name in by_name:
            new = _synthesized(by_name[name])
        else:
            new = None
        if new is None or not new.matches(dtype):
            uncovered.append(name)
            continue
        entries.append(new)
        appended.append(new)
    added_for = [n for n in names if n not in uncovered and first_match(existing, n) is None]
    return GeometryPlan(
        entries=entries,
        appended=appended,
        uncovered=uncovered,
        appended_models=added_for,
        shadowing=shadowing,
    )


def catalog_report(model: gpu_catalog.GpuModel) -> ReportedGpuModel:
    """A catalog model as if an agent had reported it (the shape `_synthesized` takes)."""
    return ReportedGpuModel(
        model.nvml_name,
        tuple(ReportedProfile(p.name, p.memory_mib, p.max_count) for p in model.profiles),
        model.memory_mib,
    )


def disagreements(reported: ReportedGpuModel) -> list[str]:
    """Where a report differs from `models.gpu_catalog` for a model it knows: profile memory or
    count (profiles the table lacks are not compared: newer drivers add some)."""
    known = gpu_catalog.model_for_name(reported.nvml_name)
    if known is None or not known.mig_capable:
        return []
    table = {p.name: p for p in known.profiles}
    out = []
    for p in reported.profiles:
        mine = table.get(p.name)
        if mine is not None and (p.memory_mib, p.max_count) != (mine.memory_mib, mine.max_count):
            out.append(
                f"{p.name} {p.memory_mib} MiB x{p.max_count} (the catalog: "
                f"{mine.memory_mib} MiB x{mine.max_count})"
            )
    return out


def uncovered_models(entries: Sequence[MigGeometryEntry], names: Iterable[str]) -> list[str]:
    """NVML names no entry matches (the scheduler falls back to hami-core for
    them: `checkNodeGPUSharingPredicateAndScore`,
    volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/utils.go)."""
    return sorted({n for n in names if first_match(list(entries), n) is None})

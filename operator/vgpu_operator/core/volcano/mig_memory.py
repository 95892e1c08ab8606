"""MIG memory in `knownMigGeometries` never above what the instance really has.

The scheduler gives a pod the first template whose memory covers its request
(`pickFromGroup`, volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/mig.go), and in
mig mode no HAMi-core layer caps anything: a template that promises more than the GPU instance has
lets a pod land on an instance where it runs out of memory. The plugin manifest's A100-40GB and A30
entries do (1g.5gb 5120 MiB against `nvidia-smi mig -lgip`'s 4.75 GiB). Memory is not part of
the `<uuid>[<group>-<position>]` contract (only group names, order and counts are), so an entry is
corrected in place.

`instance_memory_mib` is the one rule: the lowest figure any cited listing (models.gpu_catalog:
`memory_gib` and `listed_gib`) or a node's inventory shows; a `-lgip` figure is two-decimal GiB,
rounded, so the instance surely has floor((GiB - 0.005) x 1024) MiB of it; an exact MiB figure
(NVML's `memorySizeMB`) counts as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vgpu_operator.core.volcano.geometry import ReportedGpuModel, report_problem
from vgpu_operator.models import gpu_catalog
from vgpu_operator.models.volcano import MigGeometryEntry, device_type


def lgip_mib(gib: float) -> int:
    """The MiB an instance surely has when `-lgip` prints `gib`: floor((gib - 0.005) x 1024),
    in integers (hundredths of a GiB) so that no float rounding decides it."""
    hundredths = round(gib * 100)
    return (hundredths * 2 - 1) * 512 // 100


def instance_memory_mib(gib_figures: Iterable[float], exact_mib: Iterable[int] = ()) -> int | None:
    """What an instance of one profile surely has: the lowest of the `-lgip` figures (GiB, each
    taken at its lower bound) and the exact MiB figures; None when there is none."""
    return min([*(lgip_mib(g) for g in gib_figures), *exact_mib], default=None)


def _reported_gib(memory_mib: int) -> float:
    """The `-lgip` figure an agent's MiB came from: the agent reports round(GiB x 1024)
    (operator/vgpu_operator/agent/observe.py), which two decimals recover exactly."""
    return round(memory_mib / 1024, 2)


def hardware_memory(reported: Sequence[ReportedGpuModel] = ()) -> dict[str, dict[str, int]]:
    """NVML name -> profile -> MiB an instance surely has, for every MIG model the catalog knows
    and every model an agent reports (a report the sanity check refuses is not used: it could
    only be a typo or a forgery)."""
    gibs: dict[str, dict[str, list[float]]] = {}
    exact: dict[str, dict[str, list[int]]] = {}
    for model in gpu_catalog.MIG_MODELS.values():
        per = gibs.setdefault(model.nvml_name, {})
        for p in model.profiles:
            per.setdefault(p.name, []).extend((p.memory_gib, *p.listed_gib))
    for r in reported:
        if report_problem(r) is not None:
            continue
        for rp in r.profiles:
            if rp.exact:
                exact.setdefault(r.nvml_name, {}).setdefault(rp.name, []).append(rp.memory_mib)
            else:
                gibs.setdefault(r.nvml_name, {}).setdefault(rp.name, []).append(
                    _reported_gib(rp.memory_mib)
                )
    out: dict[str, dict[str, int]] = {}
    for name in sorted(set(gibs) | set(exact)):
        profiles = set(gibs.get(name, {})) | set(exact.get(name, {}))
        for profile in sorted(profiles):
            mib = instance_memory_mib(
                gibs.get(name, {}).get(profile, ()), exact.get(name, {}).get(profile, ())
            )
            if mib is not None:
                out.setdefault(name, {})[profile] = mib
    return out


def _rank(models: Sequence[str], name: str) -> int:
    """Of equal figures, the one of the GPU the entry's earliest model string matches is named."""
    dtype = device_type(name)
    return next((k for k, m in enumerate(models) if m and m in dtype), len(models))


def may_correct(entry: MigGeometryEntry, name: str) -> bool:
    """Whether the figures of GPU model `name` may lower `entry`: the catalog knows the model, or
    the entry is the model's own (it names it whole). A name no catalog knows that only contains
    another model's string (`NVIDIA H100 80GB HBM3 x` in an inventory) changes nothing of that
    model's entry: one node's inventory cannot lower the H100's figures cluster-wide."""
    return gpu_catalog.model_for_name(name) is not None or name in entry.models


@dataclass(frozen=True)
class MemoryCorrection:
    """One template that promises more than the instance has."""

    entry: int  # index in knownMigGeometries
    group: int  # index in its allowedGeometries
    template: int  # index in the group's geometries
    group_name: str
    profile: str
    memory: int  # what the entry says (MiB)
    hardware: int  # what the instance surely has (MiB)
    model: str  # the NVML name with that figure


def memory_corrections(
    entries: Sequence[MigGeometryEntry], hardware: dict[str, dict[str, int]]
) -> list[MemoryCorrection]:
    """Every template above the hardware of a GPU model it serves: the models whose first
    matching entry it is (the components use the first match only), each `may_correct` it."""
    served: dict[int, list[str]] = {}
    for name in hardware:
        dtype = device_type(name)
        first = next((i for i, e in enumerate(entries) if e.matches(dtype)), None)
        if first is not None and may_correct(entries[first], name):
            served.setdefault(first, []).append(name)
    out: list[MemoryCorrection] = []
    for i, names in sorted(served.items()):
        rank = {n: _rank(entries[i].models, n) for n in names}
        for g, group in enumerate(entries[i].allowed_geometries):
            for t, tmpl in enumerate(group.geometries):
                limits = [
                    (hardware[n][tmpl.name], rank[n], n) for n in names if tmpl.name in hardware[n]
                ]
                if not limits:
                    continue
                mib, _, model = min(limits)
                if tmpl.memory > mib:
                    out.append(
                        MemoryCorrection(i, g, t, group.group, tmpl.name, tmpl.memory, mib, model)
                    )
    return out


# `-lgip` prints two decimals: a figure within 0.005 GiB of the listing (5.12 MiB, so at most
# 6 MiB above the floor figure) is what the listing says, and the listing cannot show it is more
# than the instance has. The plugin manifest's A100-80GB figures (1g.10gb 9728 MiB against
# 9.50 GiB) are such: kept, where rewriting them would restart the scheduler and every plugin
# pod of the cluster. The A100-40GB's 5120 against 4.75 GiB is not: corrected.
LISTING_PRECISION_MIB = 6


def provably_above(c: MemoryCorrection) -> bool:
    """Whether an existing template promises more than its listing's precision allows."""
    return c.memory - c.hardware > LISTING_PRECISION_MIB


def corrected(entry: MigGeometryEntry, fixes: Iterable[MemoryCorrection]) -> MigGeometryEntry:
    """A copy of `entry` with the corrections of it applied."""
    data = entry.to_yaml_data()
    for f in fixes:
        data["allowedGeometries"][f.group]["geometries"][f.template]["memory"] = f.hardware
    return MigGeometryEntry.model_validate(data)


def describe(c: MemoryCorrection) -> str:
    return f"{c.model} {c.profile} ({c.group_name}) {c.memory} MiB > {c.hardware} MiB"

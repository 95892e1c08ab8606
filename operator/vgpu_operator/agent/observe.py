"""Read the node's GPUs through nvidia-smi into an Inventory (models.inventory).

Calls: one `--query-gpu`, one `--query-compute-apps`, and, when a GPU is MIG-capable, one
`mig -lgip` and one `mig -lgipp` for the node; per GPU whose MIG mode is on, `mig -i N -lgi` and
`mig -i N -lci`. After an apply, `read_back` reads one GPU's mode and instances again.
Profiles come from the driver; when it lists none (drivers up to 535 with MIG off:
NVIDIA/mig-parted@v0.15.0:pkg/mig/discovery/discovery.go `ErrNoProfilesDiscovered`) they come from
models.gpu_catalog and are marked `catalog`: the planner then only turns MIG on and plans the
instances from the driver's listing read afterwards.
"""

from __future__ import annotations

from typing import Literal

from vgpu_operator.agent.parse import GpuRow, PlacementRow, ProcRow, ProfileRow
from vgpu_operator.agent.smi import NvidiaSmi
from vgpu_operator.core.mig.partition import profile_info
from vgpu_operator.models.gpu_catalog import GpuModel, model_for_name
from vgpu_operator.models.inventory import (
    ComputeInstance,
    GpuInfo,
    GpuInstance,
    Inventory,
    ProcessInfo,
    ProfileInfo,
)


async def observe(driver: NvidiaSmi) -> Inventory:
    """Everything the node's GPUs report. Raises agent.smi.SmiError when nvidia-smi fails."""
    rows = await driver.query_gpus()
    procs = await driver.compute_apps()
    profiles: list[ProfileRow] = []
    placements: list[PlacementRow] = []
    if any(r.mig_current is not None for r in rows):
        profiles = await driver.list_profiles()
        placements = await driver.list_placements()
    gpus = [await _gpu(driver, r, profiles, placements, procs) for r in rows]
    return Inventory(gpus=gpus)


async def read_back(driver: NvidiaSmi, gpu: GpuInfo) -> GpuInfo | None:
    """One GPU read again after an apply: mode and instances (`--query-gpu -i N`, and `mig -i N
    -lgi`/`-lci` when MIG is on). Profiles and processes are kept from `gpu`. None if nvidia-smi
    no longer lists the GPU."""
    rows = await driver.query_gpus(gpu.index)
    if not rows:
        return None
    row = rows[0]
    return gpu.model_copy(
        update={
            "mig_current": row.mig_current,
            "mig_pending": row.mig_pending,
            "instances": await _instances(driver, row),
        }
    )


def processes_on(bus_id: str, uuid: str, procs: list[ProcRow]) -> list[ProcessInfo]:
    return [
        ProcessInfo(pid=p.pid, name=p.name, used_memory_mib=p.used_memory_mib)
        for p in procs
        if p.bus_id.upper() == bus_id.upper() or p.gpu_uuid == uuid
    ]


def _slices(name: str) -> int:
    head = name.split("g.", 1)[0]
    return int(head) if head.isdigit() else 0


Source = Literal["driver", "catalog", "none"]
# Models whose driver-reported instance counts are wrong for some profiles; mig-parted hardcodes
# them (A30: NVIDIA/mig-parted@v0.15.0:pkg/mig/discovery/discovery.go `getHardcodedA30Profiles`),
# and so does the inventory.
CATALOG_COUNTS = frozenset({"A30"})


def _profiles(
    row: GpuRow, model: GpuModel | None, found: list[ProfileRow], placements: list[PlacementRow]
) -> tuple[list[ProfileInfo], Source]:
    mine = [p for p in found if p.gpu == row.index]
    where = {p.profile_id: p for p in placements if p.gpu == row.index}
    out = []
    for p in mine:
        known = model.profile(p.id) if model is not None else None
        place = where.get(p.id)
        if place is not None:
            size, starts = place.size, list(place.starts)
        elif known is not None and known.name == p.name:
            size, starts = known.size, list(known.placements)
        else:
            continue  # a profile we cannot place is not offered
        count = p.total
        if model is not None and model.key in CATALOG_COUNTS and known and known.name == p.name:
            count = known.max_count
        out.append(
            ProfileInfo(
                id=p.id,
                name=p.name,
                slices=_slices(p.name),
                memory_mib=round(p.memory_gib * 1024),
                count=count,
                size=size,
                placements=starts,
            )
        )
    if out:
        return out, "driver"
    if model is not None and model.mig_capable and row.mig_current is not None:
        return [profile_info(p) for p in model.profiles], "catalog"
    return [], "none"


async def _gpu(
    driver: NvidiaSmi,
    row: GpuRow,
    found: list[ProfileRow],
    placements: list[PlacementRow],
    procs: list[ProcRow],
) -> GpuInfo:
    model = model_for_name(row.name)
    profiles, source = _profiles(row, model, found, placements)
    instances = await _instances(driver, row)
    return GpuInfo(
        index=row.index,
        uuid=row.uuid,
        name=row.name,
        model=model.key if model is not None else None,
        bus_id=row.bus_id,
        memory_mib=row.memory_mib,
        mig_capable=row.mig_current is not None,
        mig_current=row.mig_current,
        mig_pending=row.mig_pending,
        profiles=profiles,
        profiles_source=source,
        instances=instances,
        processes=processes_on(row.bus_id, row.uuid, procs),
    )


async def _instances(driver: NvidiaSmi, row: GpuRow) -> list[GpuInstance]:
    if not row.mig_current:
        return []
    cis = await driver.list_cis(row.index)
    out = []
    for gi in await driver.list_gis(row.index):
        mine = [
            ComputeInstance(
                id=c.ci, profile_id=c.profile_id, name=c.name, start=c.start, size=c.size
            )
            for c in cis
            if c.gi == gi.gi
        ]
        out.append(
            GpuInstance(
                id=gi.gi,
                profile_id=gi.profile_id,
                name=gi.name,
                start=gi.start,
                size=gi.size,
                cis=mine,
            )
        )
    return sorted(out, key=lambda g: g.id)

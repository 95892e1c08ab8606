"""The MIG planner: (observed GPUs, released NodeConfig, previously applied NodeConfig) -> ordered
steps per GPU. Pure: no I/O; the agent (agent.apply) executes the steps through nvidia-smi.

What it does better than mig-parted (NVIDIA/mig-parted@v0.15.0: cmd/nvidia-mig-parted/apply/,
pkg/mig/config/config.go):
- per GPU: a GPU that is already right gets no step, and a mode change resets only that GPU;
- per instance: instances that already match the layout are kept, only the difference is
  destroyed and created (mig-parted clears the whole GPU on any change);
- explicit placements computed up front, largest first (core.mig.place), never blind retries;
- a GPU with running compute processes is `blocked`: the plan holds no destructive step for it;
- layouts are validated against each GPU's own profiles, with the field path and the fix; a
  static layout on a GPU model the catalog does not confirm is refused outright, as the controller
  refuses the node (core.mig.layout).

Modes: `hami-core` and `whole-gpu` turn MIG off on MIG-capable GPUs (HAMi #2974: others leave it
on). `mig` + `static`: MIG on and exactly the layout. `mig` + `dynamic`: MIG on; the device plugin
owns the instances (docs/architecture.md, one owner per GPU), so leftovers of an earlier layout are
removed only when the node switches INTO dynamic mode (`previous` was not dynamic), never after.
GPUs a static layout does not name are left as they are. `ascend-vnpu` does not touch NVIDIA GPUs.

Two phases: a GPU whose MIG mode is off and whose driver lists no profiles yet (drivers up to 535
list none while MIG is off: NVIDIA/mig-parted@v0.15.0:pkg/mig/discovery/discovery.go) gets only its
mode step and `deferred`; the executor reads the profiles again once MIG is on and plans its
instances then, from the driver's own listing (mig-parted too sets the mode first and the config
second).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from itertools import combinations

from vgpu_operator.core.mig.layout import GpuTarget, LayoutError, resolve_targets
from vgpu_operator.core.mig.place import Geometry, Placed, Shape, geometry_of_gpu, solve
from vgpu_operator.models.gpu_catalog import (
    GpuModel,
    MigProfile,
    arch_for_name,
    model_for_name,
)
from vgpu_operator.models.inventory import (
    GpuInfo,
    GpuInstance,
    Inventory,
    ProcessInfo,
    ProfileInfo,
)
from vgpu_operator.models.node import NodeConfig

__all__ = [
    "MAX_MIG_SLICES",
    "GpuPlan",
    "GpuTarget",
    "LayoutError",
    "Plan",
    "Step",
    "StepKind",
    "plan_gpu",
    "plan_node",
    "synthetic_gpu",
    "synthetic_inventory",
    "too_many_instances",
]


class StepKind(StrEnum):
    DESTROY_CI = "destroy-ci"
    DESTROY_GI = "destroy-gi"
    SET_MODE = "set-mig-mode"  # the executor resets this GPU only if the mode stays pending
    RESET = "reset"  # the mode is already pending: reset this GPU to make it current
    CREATE_GI = "create-gi"  # a GPU instance at an explicit placement, with its default CI
    CREATE_CI = "create-ci"  # the default CI (`mig -lcip`'s `*`) in a kept GI that has none


DESTRUCTIVE = frozenset(
    {StepKind.DESTROY_CI, StepKind.DESTROY_GI, StepKind.SET_MODE, StepKind.RESET}
)

# Every GPU instance, and every compute instance, takes at least one compute slice, and no MIG
# GPU has more than 7 of them (8 memory slices: the A100, H100, H200 and B200; the A30 has 4 of
# each), so a listing with more instances than the GPU's compute slices cannot be the hardware's:
# it is refused. Whatever a driver-reported geometry says, this caps it, and with it the
# planner's search (`_diff`: at most 2^8 subsets of instances to keep).
MAX_MIG_SLICES = 8


@dataclass(frozen=True)
class Step:
    kind: StepKind
    gpu: int
    gi: int | None = None
    ci: int | None = None
    profile_id: int | None = None
    profile: str | None = None
    start: int | None = None
    enable: bool | None = None

    def __str__(self) -> str:
        where = f"GPU {self.gpu}"
        match self.kind:
            case StepKind.DESTROY_CI:
                return f"{where}: destroy compute instance {self.ci} of GPU instance {self.gi}"
            case StepKind.DESTROY_GI:
                return f"{where}: destroy GPU instance {self.gi} ({self.profile})"
            case StepKind.SET_MODE:
                return f"{where}: turn MIG mode {'on' if self.enable else 'off'}"
            case StepKind.RESET:
                return f"{where}: reset the GPU to make the pending MIG mode current"
            case StepKind.CREATE_GI:
                return (
                    f"{where}: create {self.profile} (profile {self.profile_id}) "
                    f"at slice {self.start} with its compute instance"
                )
            case StepKind.CREATE_CI:
                return f"{where}: create the compute instance of GPU instance {self.gi}"
        return where  # pragma: no cover - every kind is handled above


@dataclass(frozen=True)
class GpuPlan:
    index: int
    target: GpuTarget
    steps: tuple[Step, ...] = ()
    kept: tuple[int, ...] = ()  # GPU-instance IDs left in place
    blocked_by: tuple[ProcessInfo, ...] = ()
    error: str | None = None
    # The instances are planned once MIG is on and the driver lists the GPU's profiles.
    deferred: bool = False

    @property
    def blocked(self) -> bool:
        return bool(self.blocked_by)


@dataclass(frozen=True)
class Plan:
    gpus: tuple[GpuPlan, ...] = ()
    errors: tuple[LayoutError, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(s for g in self.gpus for s in g.steps)

    @property
    def blocked(self) -> tuple[GpuPlan, ...]:
        return tuple(g for g in self.gpus if g.blocked)

    @property
    def ok(self) -> bool:
        return not self.errors and not any(g.error for g in self.gpus)


def profile_info(profile: MigProfile) -> ProfileInfo:
    """A catalog profile as the inventory reports it (for GPUs whose driver gives no table)."""
    return ProfileInfo(
        id=profile.id,
        name=profile.name,
        slices=profile.slices,
        memory_mib=profile.memory_mib,
        count=profile.max_count,
        size=profile.size,
        placements=list(profile.placements),
    )


def plan_node(observed: Inventory, desired: NodeConfig | None, previous: NodeConfig | None) -> Plan:
    """The steps that bring every GPU of the node to `desired`.

    `previous` is the configuration last applied successfully (None: nothing known, e.g. a new
    node); it decides whether a dynamic configuration is a switch into dynamic mode.
    """
    targets, errors, notes = resolve_targets(observed, desired, previous)
    if errors:
        return Plan(errors=tuple(errors), notes=tuple(notes))
    plans = []
    for target in targets:
        gpu = observed.gpu(target.index)
        if gpu is None:  # pragma: no cover - targets are made from observed GPUs
            continue
        geometry = geometry_of_gpu(gpu, model_for_name(gpu.name))
        plans.append(plan_gpu(gpu, target, geometry))
    return Plan(gpus=tuple(plans), notes=tuple(notes))


def plan_gpu(gpu: GpuInfo, target: GpuTarget, geometry: Geometry | None) -> GpuPlan:
    """The ordered steps for one GPU (none when it already matches)."""
    steps: list[Step] = []
    kept: tuple[int, ...] = ()
    deferred = False
    live = list(gpu.instances) if gpu.mig_current else []
    refused = too_many_instances(gpu, live, geometry)
    if refused is not None:
        return GpuPlan(gpu.index, target, error=refused)
    if target.mig is False:
        if gpu.mig_current or gpu.mig_pending:
            steps += _destroy_all(gpu.index, live)
            if gpu.mig_pending is not False:
                steps.append(Step(StepKind.SET_MODE, gpu.index, enable=False))
            else:
                steps.append(Step(StepKind.RESET, gpu.index))
    elif target.mig is True:
        if not gpu.mig_current:
            # A pending enable is made current by a reset on Ampere; Hopper and later lose MIG
            # mode on a reset (models.gpu_catalog.arch_for_name), so they are asked again.
            reset = gpu.mig_pending and arch_for_name(gpu.name) == "ampere"
            kind = StepKind.RESET if reset else StepKind.SET_MODE
            steps.append(Step(kind, gpu.index, enable=True if kind == StepKind.SET_MODE else None))
            live = []
        elif gpu.mig_pending is False:  # a pending disable: cancel it (no reset needed)
            steps.append(Step(StepKind.SET_MODE, gpu.index, enable=True))
        if target.clear:
            steps += _destroy_all(gpu.index, live)
        elif target.profiles is not None and not gpu.mig_current and not _listed(gpu):
            deferred = True  # phase 1: the mode; the instances when the driver lists profiles
        elif target.profiles is not None:
            if geometry is None:
                return GpuPlan(gpu.index, target, error=f"GPU {gpu.index}: no MIG geometry known")
            diff = _diff(gpu.index, geometry, target.profiles, live)
            if diff is None:
                return GpuPlan(
                    gpu.index, target, error=f"GPU {gpu.index}: the layout cannot be placed"
                )
            more, kept = diff
            steps += more
    if gpu.processes and any(s.kind in DESTRUCTIVE for s in steps):
        return GpuPlan(gpu.index, target, kept=kept, blocked_by=tuple(gpu.processes))
    return GpuPlan(gpu.index, target, steps=tuple(steps), kept=kept, deferred=deferred)


def too_many_instances(
    gpu: GpuInfo, live: list[GpuInstance], geometry: Geometry | None
) -> str | None:
    """Why the listed instances cannot be the GPU's (None: they can): more GPU or compute
    instances than it has compute slices. Nothing is planned from such a listing."""
    slices = min(geometry.compute_slices, MAX_MIG_SLICES) if geometry else MAX_MIG_SLICES
    cis = sum(len(gi.cis) for gi in live)
    for count, what in ((len(live), "GPU instances"), (cis, "compute instances")):
        if count > slices:
            return (
                f"GPU {gpu.index} ({gpu.name}): nvidia-smi lists {count} {what}, more than its "
                f"{slices} compute slices allow; nothing is planned from that listing (check "
                "`nvidia-smi mig -lgi` and `-lci` on the node, and the driver)"
            )
    return None


def _listed(gpu: GpuInfo) -> bool:
    """Whether the driver listed this GPU's profiles (the catalog's do not count for planning:
    the driver's listing wins, e.g. an A100 80GB PCIe on driver 515 has no profile 15)."""
    return gpu.profiles_source == "driver"


def _destroy(gpu: int, gi: GpuInstance) -> list[Step]:
    out = [Step(StepKind.DESTROY_CI, gpu, gi=gi.id, ci=ci.id) for ci in gi.cis]
    out.append(Step(StepKind.DESTROY_GI, gpu, gi=gi.id, profile_id=gi.profile_id, profile=gi.name))
    return out


def _destroy_all(gpu: int, live: list[GpuInstance]) -> list[Step]:
    return [s for gi in live for s in _destroy(gpu, gi)]


def _reusable(gi: GpuInstance, shape: Shape) -> bool:
    """A live GPU instance can stay when it has the profile and no compute instance or one that
    spans it (GpuInstance.full: whatever the CI's profile ID, 7 on Hopper's 1g.20gb)."""
    if gi.profile_id != shape.id or gi.start not in shape.placements:
        return False
    return len(gi.cis) == 0 or gi.full


def _diff(
    gpu: int, geometry: Geometry, profiles: dict[str, int], live: list[GpuInstance]
) -> tuple[list[Step], tuple[int, ...]] | None:
    """Steps from the live instances to `profiles`, keeping as many live instances as can stay.

    Subsets of the reusable instances are tried largest first; the first whose complement can
    be placed around it wins. Only instances of a wanted profile are candidates, and a listing
    of more instances than slices never gets here (`too_many_instances`): at most 2^8 subsets
    (2^7 on every real GPU), not 2^24 for a listing of 24.
    """
    want: dict[int, int] = {}
    shapes: dict[int, Shape] = {}
    for name, count in profiles.items():
        shape = geometry.shape(name)
        if shape is None:
            return None
        want[shape.id] = want.get(shape.id, 0) + count
        shapes[shape.id] = shape
    candidates = [
        gi
        for gi in sorted(live, key=lambda g: (g.start, g.id))
        if gi.profile_id in shapes and _reusable(gi, shapes[gi.profile_id])
    ]
    if len(candidates) > MAX_MIG_SLICES:  # pragma: no cover - refused before (plan_gpu)
        return None
    for k in range(len(candidates), -1, -1):
        for keep in combinations(candidates, k):
            left = dict(want)
            for gi in keep:
                left[gi.profile_id] = left.get(gi.profile_id, 0) - 1
            if any(n < 0 for n in left.values()):
                continue
            wanted = [shapes[i] for i, n in left.items() for _ in range(n)]
            placed = solve(geometry, wanted, [Placed(shapes[g.profile_id], g.start) for g in keep])
            if placed is None:
                continue
            keep_ids = {g.id for g in keep}
            steps = [s for gi in live if gi.id not in keep_ids for s in _destroy(gpu, gi)]
            steps += [
                Step(StepKind.CREATE_CI, gpu, gi=g.id, profile=g.name) for g in keep if not g.cis
            ]
            steps += [
                Step(
                    StepKind.CREATE_GI,
                    gpu,
                    profile_id=p.shape.id,
                    profile=p.shape.name,
                    start=p.start,
                )
                for p in placed
            ]
            return steps, tuple(sorted(keep_ids))
    return None


def synthetic_gpu(model: GpuModel, index: int, *, mig: bool = False) -> GpuInfo:
    """A GPU as the agent would report it, built from the catalog (no instances): for nodes
    whose agent has not reported yet, and for tests."""
    return GpuInfo(
        index=index,
        uuid=f"GPU-synthetic-{index}",
        name=model.nvml_name,
        model=model.key,
        bus_id=f"00000000:{index:02X}:00.0",
        memory_mib=model.memory_mib,
        mig_capable=model.mig_capable,
        mig_current=mig if model.mig_capable else None,
        mig_pending=mig if model.mig_capable else None,
        profiles=[profile_info(p) for p in model.profiles],
        profiles_source="catalog" if model.mig_capable else "none",
    )


def synthetic_inventory(model: GpuModel, count: int, *, mig: bool = False) -> Inventory:
    return Inventory(gpus=[synthetic_gpu(model, i, mig=mig) for i in range(count)])

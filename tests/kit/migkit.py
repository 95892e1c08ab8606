"""Helpers for the planner tests: GPUs with instances, configurations, and a pure simulator that
applies a plan the way the executor and the hardware would (to check plans end where they say)."""

from __future__ import annotations

from typing import Any

from vgpu_operator.core.mig.partition import Plan, StepKind, synthetic_gpu
from vgpu_operator.models.gpu_catalog import GPU_MODELS, gi_heap_id
from vgpu_operator.models.inventory import (
    ComputeInstance,
    GpuInfo,
    GpuInstance,
    Inventory,
    ProcessInfo,
)
from vgpu_operator.models.node import NodeConfig


def gpu(
    model: str,
    index: int = 0,
    *,
    mig: bool = True,
    pending: bool | None = None,
    instances: list[tuple[str, int]] = (),  # type: ignore[assignment]
    processes: int = 0,
) -> GpuInfo:
    """A GPU of catalog `model` with (profile name, start) instances, each with its full CI."""
    m = GPU_MODELS[model]
    base = synthetic_gpu(m, index, mig=mig)
    gis = []
    for name, start in instances:
        p = m.profile(name)
        assert p is not None, name
        gid = gi_heap_id(m.memory_slices, p.size, start)
        ci = ComputeInstance(id=0, profile_id=p.ci_profile_id, name=p.name, start=0, size=p.slices)
        gis.append(
            GpuInstance(id=gid, profile_id=p.id, name=p.name, start=start, size=p.size, cis=[ci])
        )
    procs = [ProcessInfo(pid=1000 + i, name="python") for i in range(processes)]
    return base.model_copy(
        update={
            # as a driver reports it that lists profiles also while MIG is off (R550+)
            "profiles_source": "driver",
            "instances": gis,
            "processes": procs,
            "mig_pending": base.mig_pending if pending is None else pending,
        }
    )


def node(*gpus: GpuInfo) -> Inventory:
    return Inventory(gpus=list(gpus))


def config(mode: str = "mig", **mig: Any) -> NodeConfig:
    data: dict[str, Any] = {"mode": mode}
    if mig:
        data["mig"] = mig
    return NodeConfig.model_validate(data)


def static(*layouts: dict[str, Any]) -> NodeConfig:
    return config(partitioning="static", layout=list(layouts))


def dynamic() -> NodeConfig:
    return config(partitioning="dynamic")


def simulate(inv: Inventory, plan: Plan) -> Inventory:
    """Apply `plan` to `inv` as the executor would on hardware that obeys the requested
    placements; raises AssertionError on an impossible step (overlap, missing instance)."""
    gpus = {g.index: g for g in inv.gpus}
    for step in plan.steps:
        g = gpus[step.gpu]
        model = GPU_MODELS[g.model or ""]
        gis = list(g.instances)
        current, pending = g.mig_current, g.mig_pending
        if step.kind == StepKind.DESTROY_CI:
            (gi,) = [x for x in gis if x.id == step.gi]
            assert any(c.id == step.ci for c in gi.cis)
            gis[gis.index(gi)] = gi.model_copy(
                update={"cis": [c for c in gi.cis if c.id != step.ci]}
            )
        elif step.kind == StepKind.DESTROY_GI:
            (gi,) = [x for x in gis if x.id == step.gi]
            assert not gi.cis, "a GPU instance is destroyed before its compute instances"
            gis.remove(gi)
        elif step.kind in (StepKind.SET_MODE, StepKind.RESET):
            want = step.enable if step.kind == StepKind.SET_MODE else pending
            assert not gis or want, "the mode goes off with instances left"
            current = pending = bool(want)
        elif step.kind == StepKind.CREATE_GI:
            assert current, "an instance is created with MIG mode off"
            p = model.profile(step.profile_id or 0)
            assert p is not None and step.start in p.placements
            span = set(range(step.start, step.start + p.size))
            for x in gis:
                assert not span & set(range(x.start, x.start + x.size)), f"overlap: {step}"
            ci = ComputeInstance(id=0, profile_id=p.ci_profile_id, name=p.name)
            gid = gi_heap_id(model.memory_slices, p.size, step.start)
            gis.append(
                GpuInstance(
                    id=gid, profile_id=p.id, name=p.name, start=step.start, size=p.size, cis=[ci]
                )
            )
        elif step.kind == StepKind.CREATE_CI:
            (gi,) = [x for x in gis if x.id == step.gi]
            p = model.profile(gi.profile_id)
            assert p is not None
            ci = ComputeInstance(id=0, profile_id=p.ci_profile_id, name=gi.name)
            gis[gis.index(gi)] = gi.model_copy(update={"cis": [ci]})
        gpus[step.gpu] = g.model_copy(
            update={"instances": gis, "mig_current": current, "mig_pending": pending}
        )
    return Inventory(gpus=[gpus[i] for i in sorted(gpus)])


# The node configs the agent tests release most: dynamic partitioning, and seven 1g.10gb
# instances on every GPU (as annotation text).
DYN = dynamic().to_annotation()
SEVEN = static({"profiles": {"1g.10gb": 7}}).to_annotation()

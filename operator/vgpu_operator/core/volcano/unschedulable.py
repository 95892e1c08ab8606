"""Pods that can never be scheduled: pure fit checks against what the cluster offers.

A pending pod that asks for vGPUs it can never get just stays Pending; the Volcano scheduler
says why only in its own log. `causes(pod, context)` names each reason such a pod can never be
placed, with the fix, so the controller can post it as a Warning Event on the pod:

- `no-vgpu-node`: it requests vGPU resources but no node runs in a mode that serves them (or
  in the mode its `volcano.sh/vgpu-mode` annotation asks for);
- `no-mig-geometry`: `volcano.sh/vgpu-mode: mig`, but no MIG node's geometry has an instance
  that holds the memory asked (or the MIG nodes' GPU models are in no geometry: the scheduler
  then treats them as hami-core);
- `vgpu-memory-too-large`: the memory per vGPU is more than any GPU serving it has;
- `vgpu-number-too-large`: a container asks for more vGPUs than any node serving it has GPUs;
- `gpu-sharing-off`: legacy `volcano.sh/gpu-memory` (`gpu-number`) while the scheduler's GPU
  sharing (GPU number) switch is off;
- `not-volcano`: vGPU resources, and a scheduler other than Volcano;
- `gpu-filter`: the pod would fit, but its annotations `nvidia.com/use-gputype`,
  `nouse-gputype`, `volcano.sh/vgpu-use-gpuuuid` or `vgpu-nouse-gpuuuid` exclude every GPU that
  could hold it (core.volcano.pod_filters: what each version reads, what is known of a GPU).

What the scheduler does is read from volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/
nvidia/vgpu (utils.go `checkNodeGPUSharingPredicateAndScore`: a pod's mode annotation must equal
the node's; a node whose MIG geometry is unknown falls back to hami-core; mig.go: the first
instance of a group whose memory holds the request, the request multiplied by gpuMemoryFactor
when it is above 1; device_info.go: one GPU per requested vGPU in hami-core mode) and
pkg/scheduler/api/devices/util.go `ExtractResourceRequest` (only memory set: one vGPU).

Only what is certain is reported: a node whose GPU count or memory is unknown counts as one that
fits, and the checks are per container (a container that fits nowhere cannot be placed). A cause
about the memory asked also says what a request of N means in MiB (`core.volcano.memory_unit`).
What the checks compare a pod with, read from a snapshot: `core.volcano.fit_context`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from vgpu_operator.core.volcano import pod_filters
from vgpu_operator.core.volcano.fit_context import FitContext, NodeShape, fit_context
from vgpu_operator.core.volcano.snapshot import annotations_of
from vgpu_operator.models.volcano import LEGACY_GPU_MEMORY, LEGACY_GPU_NUMBER, POD_VGPU_MODE

# What the checks compare a pod with (`core.volcano.fit_context`), importable from here too.
__all__ = [
    "REASONS",
    "Cause",
    "ContainerAsk",
    "FitContext",
    "NodeShape",
    "causes",
    "container_asks",
    "fit_context",
    "pending",
    "quantity",
]

MODES = ("hami-core", "mig")
UAE = "UnexpectedAdmissionError"

# cause id -> the Event reason
REASONS: dict[str, str] = {
    "no-vgpu-node": "NoVGPUNode",
    "no-mig-geometry": "NoFittingMIGGeometry",
    "vgpu-memory-too-large": "VGPUMemoryTooLarge",
    "vgpu-number-too-large": "VGPUNumberTooLarge",
    "gpu-sharing-off": "GPUSharingDisabled",
    "not-volcano": "VGPUNotScheduledByVolcano",
    "gpu-filter": "GPUsExcludedByPodAnnotations",
}


@dataclass(frozen=True)
class Cause:
    id: str  # a key of REASONS
    message: str  # the cause and the fix

    @property
    def reason(self) -> str:
        return REASONS[self.id]


@dataclass(frozen=True)
class ContainerAsk:
    name: str
    count: int  # vGPUs
    memory: int | None  # MiB (gpuMemoryFactor units) per vGPU; None: a share or the whole GPU


# --- reading the pod --------------------------------------------------------------------------

_QUANTITY = re.compile(r"^([0-9]+)(k|M|G|T|Ki|Mi|Gi|Ti)?$")
_MULTIPLIERS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def quantity(value: Any) -> int | None:
    """An integer resource quantity (extended resources are whole numbers); None if not one."""
    m = _QUANTITY.match(str(value).strip())
    if m is None:
        return None
    return int(m.group(1)) * _MULTIPLIERS[m.group(2)]


def _limits(container: Mapping[str, Any]) -> dict[str, Any]:
    """Limits, else requests (an extended resource has both equal, or limits only)."""
    res = container.get("resources") or {}
    return {**(res.get("requests") or {}), **(res.get("limits") or {})}


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [c for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])] if c]


def container_asks(pod: Mapping[str, Any], ctx: FitContext) -> list[ContainerAsk]:
    """The vGPUs each container asks for (containers asking none left out)."""
    out = []
    for c in _containers(pod):
        limits = _limits(c)
        count = _first(limits, ctx.count_names)
        memory = _first(limits, ctx.memory_names)
        share = _first(limits, ctx.percentage_names)
        if not count and not memory and not share:
            continue
        out.append(ContainerAsk(str(c.get("name", "")), count or 1, memory or None))
    return out


def _first(limits: Mapping[str, Any], names: Iterable[str]) -> int | None:
    for name in sorted(names):
        if name in limits:
            return quantity(limits[name])
    return None


def _requests(pod: Mapping[str, Any], names: Iterable[str]) -> list[str]:
    wanted = set(names)
    found = {str(k) for c in _containers(pod) for k, v in _limits(c).items() if str(v) != "0"}
    return sorted(found & wanted)


def pending(pod: Mapping[str, Any]) -> bool:
    """Not bound to a node, not finished, not being deleted."""
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return (
        not (pod.get("spec") or {}).get("nodeName")
        and not meta.get("deletionTimestamp")
        and phase not in ("Succeeded", "Failed")
    )


# --- the checks -------------------------------------------------------------------------------


def causes(pod: Mapping[str, Any], ctx: FitContext) -> list[Cause]:
    """Why this pending pod can never be scheduled; empty when it can (or is not pending)."""
    if not pending(pod):
        return []
    out: list[Cause] = []
    legacy = _legacy(pod, ctx)
    if legacy is not None:
        out.append(legacy)
    asks = container_asks(pod, ctx)
    if not asks:
        return out
    names = ", ".join(_requests(pod, ctx.vgpu_names))
    scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    if scheduler != ctx.scheduler_name:
        out.append(
            Cause(
                "not-volcano",
                f"the pod requests {names} but is scheduled by {scheduler}, not "
                f"{ctx.scheduler_name}: only Volcano's deviceshare plugin allocates vGPUs; bound "
                f"by another scheduler it gets no device and kubelet rejects it ({UAE}). Fix: "
                f"set spec.schedulerName: {ctx.scheduler_name} in the pod's template and "
                "recreate the pod (a pod's scheduler cannot be changed)",
            )
        )
    mode = annotations_of(pod).get(POD_VGPU_MODE)
    fit = _fit(asks, mode, ctx, names)
    if fit is None:  # it would fit: do its annotations leave it a GPU?
        fit = _filtered(annotations_of(pod), asks, mode, ctx, names)
    if fit is not None:
        out.append(fit)
    return out


# --- the pod's GPU filters (core.volcano.pod_filters) -----------------------------------------


def _filtered(
    annotations: Mapping[str, str],
    asks: list[ContainerAsk],
    mode: str | None,
    ctx: FitContext,
    names: str,
) -> Cause | None:
    """The pod fits the nodes as they are; does it fit the GPUs its annotations leave it?"""
    f = pod_filters.read(annotations, ctx.scheduler_version)
    if f is None:
        return None
    shapes = frozenset(_narrowed(s, f) for s in ctx.shapes)
    if _fit(asks, mode, replace(ctx, shapes=shapes), names) is None:
        return None
    wanted = (mode,) if mode else MODES
    largest = max((a.memory or 0 for a in asks), default=0) or None
    fitting = [
        d
        for s in ctx.shapes
        if s.mode in wanted
        for d in s.devices
        if _holds(replace(s, memory=d.memory, instances=d.instances), largest, ctx)
    ]
    return Cause("gpu-filter", pod_filters.excluded_text(f, fitting, ctx.scheduler_version))


def _narrowed(shape: NodeShape, f: pod_filters.GpuFilter) -> NodeShape:
    """The node as the pod sees it: only the GPUs its filter leaves (all, where unknown)."""
    left = pod_filters.kept(shape.devices, f)
    if left is None:
        return shape
    memories = [d.memory for d in left]
    return replace(
        shape,
        gpus=len(left),
        memory=None if None in memories else max((m or 0 for m in memories), default=0),
        instances=tuple(sorted({i for d in left for i in d.instances})),
        per_gpu=max((d.per_gpu for d in left), default=1),
        devices=left,
    )


# --- the pod's GPU filters (end) -----------------------------------------------------------


def _legacy(pod: Mapping[str, Any], ctx: FitContext) -> Cause | None:
    """Legacy GPU sharing requested while the scheduler's switch for it is off."""
    scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    if scheduler != ctx.scheduler_name:
        return None  # not Volcano's to place
    asked = _requests(pod, (LEGACY_GPU_MEMORY, LEGACY_GPU_NUMBER))
    off = [
        (name, switch)
        for name, switch, on in (
            (LEGACY_GPU_MEMORY, "GPUSharingEnable", ctx.gpu_sharing),
            (LEGACY_GPU_NUMBER, "GPUNumberEnable", ctx.gpu_number),
        )
        if name in asked and on is False
    ]
    if not off:
        return None
    what = " and ".join(name for name, _ in off)
    switches = " and ".join(f"deviceshare.{s}" for _, s in off)
    return Cause(
        "gpu-sharing-off",
        f"the pod requests {what} (legacy GPU sharing) but {switches} is off in "
        f"{ctx.scheduler_conf}: no scheduler plugin allocates a GPU for it, and the legacy "
        "device plugin finds none to give it. Fix: request volcano.sh/vgpu-number (and "
        "volcano.sh/vgpu-memory in MiB) instead; GPU sharing is deprecated since Volcano v1.9",
    )


def _fit(asks: list[ContainerAsk], mode: str | None, ctx: FitContext, names: str) -> Cause | None:
    wanted = (mode,) if mode else MODES
    candidates = [s for s in ctx.shapes if s.mode in wanted]
    if not candidates:
        return _no_node(mode, ctx, names)
    for ask in asks:
        if ask.memory is not None and not any(_holds(s, ask.memory, ctx) for s in candidates):
            return _too_much_memory(ask, mode, candidates, ctx)
    for ask in asks:
        if not any(_room(s, ask.count) for s in candidates):
            most = max(s.capacity or 0 for s in candidates)
            return Cause(
                "vgpu-number-too-large",
                f"container {ask.name} asks for {ask.count} vGPUs, and no node that serves it "
                f"{_in_mode(mode)}has room for that many: the most is {most} (one vGPU per "
                "GPU of a container in hami-core mode). Fix: ask for at most "
                f"{most}, or spread the work over more pods",
            )
        both = [s for s in candidates if _room(s, ask.count) and _holds(s, ask.memory, ctx)]
        if not both:
            return Cause(
                "vgpu-number-too-large",
                f"container {ask.name} asks for {ask.count} vGPUs of {ctx.amount(ask.memory)} "
                "each, and "
                f"no node that serves it {_in_mode(mode)}has {ask.count} GPUs that large (nodes "
                f"with that many GPUs have smaller ones){_unit(ask, ctx)}. Fix: ask for fewer or "
                "smaller vGPUs, or add nodes with more large GPUs to a vGPU policy",
            )
    return None


def _unit(ask: ContainerAsk, ctx: FitContext) -> str:
    """What a memory request means, where the container asks for memory ("" where not)."""
    return f"; {ctx.unit()}" if ask.memory is not None else ""


def _in_mode(mode: str | None) -> str:
    return f"in {mode} mode " if mode else ""


def _room(shape: NodeShape, count: int) -> bool:
    capacity = shape.capacity
    return capacity is None or capacity >= count


def _holds(shape: NodeShape, memory: int | None, ctx: FitContext) -> bool:
    """Whether one vGPU of `memory` fits a GPU of the node."""
    if memory is None:
        return True
    if shape.mode == "mig":
        asked = memory * ctx.memory_factor if ctx.memory_factor > 1 else memory
        return any(i >= asked for i in shape.instances)
    return shape.memory is None or shape.memory >= memory


def _no_node(mode: str | None, ctx: FitContext, names: str) -> Cause:
    present = sorted({s.mode for s in ctx.shapes})
    if mode == "mig" and any(s.mig_configured for s in ctx.shapes):
        models = ", ".join(ctx.mig_models_without_geometry) or "their GPUs"
        return Cause(
            "no-mig-geometry",
            f"the pod asks for {POD_VGPU_MODE}: mig, but the MIG nodes' GPU models ({models}) "
            f"match no knownMigGeometries entry of {ctx.device_config}: the scheduler treats "
            "those nodes as hami-core and rejects the pod on each. Fix: add the models to "
            "knownMigGeometries (the operator renders them for the nodes it manages: see the "
            "finding mig-geometry-coverage), then restart the scheduler",
        )
    if mode is not None and mode not in MODES:
        return Cause(
            "no-vgpu-node",
            f"the pod asks for {POD_VGPU_MODE}: {mode}, a mode no node has (vGPU nodes run "
            "hami-core or mig): the scheduler rejects it on every node. Fix: set "
            f"{POD_VGPU_MODE} to hami-core or mig, or remove the annotation",
        )
    if mode is not None:
        others = f" (vGPU nodes run {', '.join(present)})" if present else ""
        return Cause(
            "no-vgpu-node",
            f"the pod asks for {POD_VGPU_MODE}: {mode}, but no node runs in {mode} mode"
            f"{others}: the scheduler rejects it on every node. Fix: put GPU nodes in {mode} "
            f"mode with a VGPUNodePolicy (spec.mode: {mode}), or remove the annotation",
        )
    return Cause(
        "no-vgpu-node",
        f"the pod requests {names} but no node runs in a mode that serves vGPUs (hami-core, "
        "or mig with dynamic partitioning): no node will ever offer them. Fix: select GPU nodes "
        "with a VGPUNodePolicy in mode hami-core (or mig), or request nvidia.com/gpu for whole "
        "GPUs instead",
    )


def _too_much_memory(
    ask: ContainerAsk, mode: str | None, candidates: list[NodeShape], ctx: FitContext
) -> Cause:
    assert ask.memory is not None
    asked = ctx.amount(ask.memory)
    if mode == "mig":
        largest = max((i for s in candidates for i in s.instances), default=0)
        at_most = (
            f"{largest} MiB" if ctx.memory_factor == 1 else ctx.amount(largest // ctx.memory_factor)
        )
        return Cause(
            "no-mig-geometry",
            f"container {ask.name} asks for {asked} per vGPU in mig mode, but no MIG "
            f"geometry of the MIG nodes' GPUs has an instance that large: the largest is "
            f"{largest} MiB ({ctx.device_config}, knownMigGeometries); {ctx.unit()}. Fix: ask "
            "for at most "
            f"{at_most} of vGPU memory, or run the pod in hami-core mode (remove "
            f"{POD_VGPU_MODE})",
        )
    gpu = max((s.memory or 0 for s in candidates if s.mode != "mig"), default=0)
    instance = max((i for s in candidates if s.mode == "mig" for i in s.instances), default=0)
    largest = max(gpu, instance // ctx.memory_factor if ctx.memory_factor > 1 else instance)
    has = str(largest) if ctx.memory_factor == 1 else ctx.amount(largest)
    return Cause(
        "vgpu-memory-too-large",
        f"container {ask.name} asks for {asked} per vGPU, more than any GPU "
        f"of the nodes that serve it {_in_mode(mode)}has: the largest has {has}; "
        f"{ctx.unit()}. Fix: ask "
        f"for at most {largest} (or for a share of a GPU with "
        f"{', '.join(sorted(ctx.percentage_names))}), or add nodes with larger GPUs to a vGPU "
        "policy",
    )

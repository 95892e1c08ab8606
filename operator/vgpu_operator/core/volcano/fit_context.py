"""What the never-fit checks (`core.volcano.unschedulable`) compare a pending pod with: each
vGPU node's shape as the scheduler sees it, and the names, switches and unit of the cluster, read
from a `ClusterSnapshot` (`fit_context`). Pure.

A node's GPUs come from the plugin's registration (what the scheduler reads), else the agent's
inventory, else GPU Feature Discovery's labels; a MIG node is treated as hami-core where its
GPU models match no knownMigGeometries entry (volcano-sh/volcano@v1.15.1:pkg/scheduler/api/
devices/nvidia/vgpu/utils.go `checkNodeGPUSharingPredicateAndScore`). Nodes alike share one
shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_operator import bounds, contract
from vgpu_operator.core.volcano import node_inputs, pod_filters
from vgpu_operator.core.volcano.memory_unit import MemoryUnit, scheduler_memory_unit
from vgpu_operator.core.volcano.pod_filters import GpuFacts
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, labels_of
from vgpu_operator.models.volcano import first_match
from vgpu_operator.models.volcano_views import Version

__all__ = ["FitContext", "NodeShape", "fit_context", "node_shape", "scheduler_name"]


@dataclass(frozen=True)
class NodeShape:
    """What the scheduler sees of a vGPU node, as far as fit goes. Nodes alike share one."""

    mode: str  # as the scheduler treats it: hami-core or mig
    mig_configured: bool = False  # runs MIG (treated as hami-core when no geometry applies)
    gpus: int | None = None  # GPUs registered (None: unknown)
    memory: int | None = None  # the largest GPU's memory, MiB / gpuMemoryFactor (None: unknown)
    instances: tuple[int, ...] = ()  # mig: MiB of every instance type its geometries have
    per_gpu: int = 1  # mig: the most instances one GPU's geometry has
    models: tuple[str, ...] = ()  # GPU names, for messages
    devices: tuple[GpuFacts, ...] = ()  # each GPU, where known (core.volcano.pod_filters)

    @property
    def capacity(self) -> int | None:
        """vGPUs of one container the node can hold at most."""
        return None if self.gpus is None else self.gpus * self.per_gpu


@dataclass(frozen=True)
class FitContext:
    """What the checks compare a pod with; built from a `ClusterSnapshot` (`fit_context`)."""

    shapes: frozenset[NodeShape] = frozenset()
    count_names: frozenset[str] = frozenset({"volcano.sh/vgpu-number"})
    memory_names: frozenset[str] = frozenset({"volcano.sh/vgpu-memory"})
    percentage_names: frozenset[str] = frozenset({"volcano.sh/vgpu-memory-percentage"})
    scheduler_name: str = "volcano"
    memory_factor: int = 1  # gpuMemoryFactor: a vgpu-memory request of N means N x this MiB
    memory_source: str = "the scheduler's default"  # where memory_factor is set, for messages
    device_config: str = "kube-system/volcano-vgpu-device-config"  # for messages
    scheduler_conf: str = "volcano-system/volcano-scheduler-configmap"  # for messages
    # Legacy switches: None when the scheduler conf is unknown (nothing is said then).
    gpu_sharing: bool | None = None
    gpu_number: bool | None = None
    mig_models_without_geometry: tuple[str, ...] = field(default=())
    scheduler_version: Version | None = None  # which pod annotations it reads (pod_filters)

    @property
    def vgpu_names(self) -> frozenset[str]:
        return self.count_names | self.memory_names | self.percentage_names

    def amount(self, memory: int | None) -> str:
        """A vgpu-memory figure as the components read it: N units of gpuMemoryFactor MiB (the
        plugin registers each GPU's MiB / factor and limits the container to N x factor MiB;
        the MIG path multiplies the request by the factor)."""
        if memory is None or self.memory_factor == 1:
            return f"{memory} MiB"
        factor = self.memory_factor
        return f"{memory} (x gpuMemoryFactor {factor}: {memory * factor} MiB)"

    def unit(self) -> str:
        """What a request of N of the memory resource means (`core.volcano.memory_unit`)."""
        name = min(self.memory_names, default="volcano.sh/vgpu-memory")
        return MemoryUnit(self.memory_factor, self.memory_source).line(name)


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def node_shape(s: ClusterSnapshot, node: Mapping[str, Any], factor: int) -> NodeShape:
    """The shape of one vGPU node: its GPUs from the plugin's registration (what the
    scheduler reads), else the agent's inventory, else GPU Feature Discovery's labels."""
    records = s.registered(node) or []
    names = tuple(s.gpu_names(node)[0])
    gpus: int | None
    memory: int | None
    devices: tuple[GpuFacts, ...] = ()  # only for pod_filters
    if records:
        gpus, memory = len(records), max(g.memory for g in records)
        devices = pod_filters.registered_gpus(records)
    else:
        inv = s.inventory(node)
        if inv is not None and inv.gpus and node_inputs.inventory_problem(inv) is None:
            gpus, memory = len(inv.gpus), max(g.memory_mib for g in inv.gpus) // factor
            devices = pod_filters.inventory_gpus(inv, factor)
        else:  # a count out of bounds is not used (core.volcano.node_inputs)
            labels = labels_of(node)
            gpus = bounds.gpu_count(labels.get(contract.GFD_COUNT))
            total = _int(labels.get(contract.GFD_MEMORY, ""))
            memory = total // factor if total is not None else None
    if not s.is_mig(node):
        return NodeShape("hami-core", False, gpus, memory, models=names, devices=devices)
    entries = s.scheduler_nvidia.geometries()
    groups = []
    for name in names:
        entry = first_match(entries, name)
        groups.extend(entry.allowed_geometries if entry is not None else [])
    if not groups:  # the scheduler falls back to hami-core for this node
        return NodeShape("hami-core", True, gpus, memory, models=names, devices=devices)
    instances = tuple(sorted({t.memory for g in groups for t in g.geometries}))
    per_gpu = max((sum(t.count for t in g.geometries) for g in groups), default=1)
    mig = pod_filters.with_layouts(devices, entries)
    return NodeShape("mig", True, gpus, memory, instances, max(per_gpu, 1), names, mig)


def fit_context(s: ClusterSnapshot) -> FitContext:
    """What the fit checks need of a snapshot (the vGPU nodes, deduplicated by shape)."""
    nvidia = s.scheduler_nvidia
    unit = scheduler_memory_unit(s)  # the scheduler's: it compares the requests
    factor = unit.factor
    shapes = {node_shape(s, n, factor) for n in s.vgpu_nodes}
    unmatched = sorted(
        {m for sh in shapes if sh.mig_configured and sh.mode != "mig" for m in sh.models}
    )
    names = s.config.resource_names
    conf = s.scheduler_conf
    sharing = number = None
    if conf is not None:
        predicates = conf.plugin("predicates")
        old = predicates.arguments if predicates is not None else {}
        args = conf.deviceshare
        sharing = args.maybe("GPUSharingEnable") or old.get("predicate.GPUSharingEnable") is True
        number = args.maybe("GPUNumberEnable") or old.get("predicate.GPUNumberEnable") is True
    src = s.scheduler_device_config
    ref = s.config.scheduler.config_map
    return FitContext(
        shapes=frozenset(shapes),
        count_names=_names(nvidia.resource_count_name, names.count),
        memory_names=_names(nvidia.resource_memory_name, names.memory),
        percentage_names=_names(nvidia.resource_memory_percentage_name, names.memory_percentage),
        scheduler_name=scheduler_name(s),
        memory_factor=factor,
        memory_source=unit.source,
        device_config=f"{src.namespace}/{src.name}",
        scheduler_conf=f"{ref.namespace}/{ref.name}",
        gpu_sharing=sharing,
        gpu_number=number,
        mig_models_without_geometry=tuple(unmatched),
        scheduler_version=s.scheduler_container.version if s.scheduler_container else None,
    )


def _names(*names: str | None) -> frozenset[str]:
    return frozenset(n for n in names if n)


def scheduler_name(s: ClusterSnapshot) -> str:
    """The name Volcano schedules under: its `--scheduler-name` flag, else `volcano`."""
    c = s.scheduler_container
    flag = c.flags.get("scheduler-name") if c else None
    return flag.value if flag is not None and flag.value else "volcano"

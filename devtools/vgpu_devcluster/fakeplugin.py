"""The pure part of a simulated HAMi volcano-vgpu device plugin, for tests.

The real plugin needs NVML and a kubelet. For a node with simulated GPUs this computes what the real
one would write when its pod starts
(Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/util/util.go `LoadNvidiaConfig` precedence and
`readFromConfigFile`, pkg/rm/rm.go, pkg/util/types.go):
- the node annotation `volcano.sh/node-vgpu-register`, one record per GPU sorted by index,
  `<GPU-UUID>,<split count>,<MiB / gpuMemoryFactor>,NVIDIA-<NVML name>,true,<mode>:`, with
  GPUs in `filterdevices` left out and the mode from the node's `config.json` entry;
- `volcano.sh/node-vgpu-handshake: Reported <time>` for plugins up to v1.12.0;
- the allocatable it registers: count = split x GPUs, cores = int(100 x core scaling) x GPUs,
  memory = the sum of the per-GPU memory entries; names from the flags (≤ v1.11) or the
  ConfigMap (v1.12+, non-`volcano.sh/` names prefixed).
Up to v1.11 the node's config.json entry sets only the mode: its `devicesplitcount`,
`devicecorescaling` and `filterdevices` change nothing, registration uses the flags (defaults
2 / 1.0), every GPU is registered, and kubelet gets 100 core and 32767 memory devices per GPU
whatever the flags say (Project-HAMi/volcano-vgpu-device-plugin@v1.11.0:
pkg/plugin/vgpu/register.go, pkg/plugin/vgpu/plugin.go `apiDevices`,
pkg/plugin/vgpu/util/util.go `readFromConfigFile`).
The caller (the tests' fake) patches the Node with these for each running plugin pod.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_devcluster.nodes import GPU_MODELS
from vgpu_operator import contract
from vgpu_operator.models import gpu_catalog
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.volcano import (
    HANDSHAKE_ANNOTATION,
    REGISTER_ANNOTATION,
    VOLCANO_PREFIX,
    NvidiaConfig,
    PayloadError,
    RegisteredGpu,
    device_type,
    encode_register,
    parse_device_config,
    parse_node_config,
)
from vgpu_operator.models.volcano_views import Version, parse_flags

_PRODUCT_TO_NVML = {m.product_label: m.nvml_name for m in GPU_MODELS.values()} | {
    m.nvml_name.replace(" ", "-"): m.nvml_name for m in gpu_catalog.GPU_MODELS.values()
}
LAST_FLAG_VERSION = Version(1, 11, 99)
OLD_CORES_PER_GPU = 100  # ≤ v1.11: `for i < 100` in apiDevices
OLD_MEMORY_PER_GPU = 32767  # ≤ v1.11: `for i < int(32767)` in apiDevices
LAST_HANDSHAKE_VERSION = Version(1, 12, 0)
NVIDIA_GPU = contract.NVIDIA_GPU_RESOURCE
FLAG_NAME_DEFAULTS = ("volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores")


@dataclass(frozen=True)
class SimGpu:
    index: int
    uuid: str
    nvml_name: str
    memory_mib: int


def node_gpus(node: Mapping[str, Any]) -> list[SimGpu]:
    """The node's GPUs: from the agent's inventory when present, else from the GFD labels
    (uuids derived from the node name, stable across calls). The real plugin counts the GPUs
    NVML shows, never a label (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:
    pkg/util/util.go `GetDevices` ranges over nvml DeviceGetCount): a simulated node's
    hardware is its `nvidia.com/gpu` capacity, so a `gpu.count` label that says more (a hostile
    or stale label) counts no further than it."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    inv_raw = (meta.get("annotations") or {}).get(contract.ANN_INVENTORY)
    try:
        inventory = Inventory.from_annotation(inv_raw)
    except ValueError:
        inventory = None
    if inventory is not None and inventory.gpus:
        return sorted(
            (SimGpu(g.index, g.uuid, g.name, g.memory_mib) for g in inventory.gpus),
            key=lambda g: g.index,
        )
    labels = meta.get("labels") or {}
    product = labels.get(contract.GFD_PRODUCT)
    try:
        count = int(labels.get(contract.GFD_COUNT, "0"))
        memory = int(labels.get(contract.GFD_MEMORY, "0"))
    except ValueError:
        return []
    capacity = str(((node.get("status") or {}).get("capacity") or {}).get(NVIDIA_GPU, ""))
    if capacity.isdigit():
        count = min(count, int(capacity))
    if not product or count <= 0:
        return []
    nvml = _PRODUCT_TO_NVML.get(product, product)  # unknown products: the label as it is
    return [
        SimGpu(i, f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{name}/gpu{i}')}", nvml, memory)
        for i in range(count)
    ]


@dataclass(frozen=True)
class PluginRegistration:
    annotations: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=dict)
    gpus: list[RegisteredGpu] = field(default_factory=list)
    mode: str = "hami-core"
    problem: str | None = None  # why the real plugin would register nothing

    def metadata_patch(self) -> dict[str, Any]:
        """Merge patch for the Node (the plugin patches its annotations every 30 s)."""
        return {"metadata": {"annotations": dict(self.annotations)}}

    def status_patch(self) -> dict[str, Any]:
        """Merge patch for the Node's status subresource (what kubelet reports for the
        plugin's resources once they are registered)."""
        return {
            "status": {"capacity": dict(self.allocatable), "allocatable": dict(self.allocatable)}
        }


def _flag_number(flags: Mapping[str, Any], name: str) -> float | None:
    flag = flags.get(name)
    if flag is None or not flag.value:
        return None
    try:
        return float(flag.value)
    except ValueError:
        return None


def _names(
    version: Version | None, flags: Mapping[str, Any], nvidia: NvidiaConfig
) -> tuple[str, str, str]:
    if version is not None and version <= LAST_FLAG_VERSION:
        keys = ("resource-name", "resource-memory-name", "resource-core-name")
        picked = [
            flags[k].value if k in flags and flags[k].value else d
            for k, d in zip(keys, FLAG_NAME_DEFAULTS, strict=True)
        ]
        return picked[0], picked[1], picked[2]

    def prefixed(n: str | None) -> str:
        if not n:
            return ""
        return n if n.startswith(VOLCANO_PREFIX) else VOLCANO_PREFIX + n

    return (
        prefixed(nvidia.resource_count_name),
        prefixed(nvidia.resource_memory_name),
        prefixed(nvidia.resource_core_name),
    )


def simulate_registration(
    node: Mapping[str, Any],
    node_config_text: str | None,
    device_config_text: str | None,
    *,
    version: Version | None = None,
    args: Sequence[str] = (),
    now: str = "",
) -> PluginRegistration:
    """What a plugin pod of `version` started with `args` registers on `node`, given the
    `config.json` it mounts and the `device-config.yaml` it reads."""
    name = str((node.get("metadata") or {}).get("name", ""))
    old = version is not None and version <= LAST_FLAG_VERSION
    flags = parse_flags(list(args))
    try:
        settings = parse_node_config(node_config_text or "").effective_for(name)
    except PayloadError:
        settings = parse_node_config("").effective_for(name)  # unreadable: hami-core
    if device_config_text is None:
        return PluginRegistration(mode=settings.mode, problem="no device ConfigMap to read")
    try:
        nvidia = parse_device_config(device_config_text).nvidia or NvidiaConfig()
    except PayloadError as exc:
        return PluginRegistration(mode=settings.mode, problem=str(exc))
    if old:  # the flags only; the node's entry sets nothing but the mode
        split = _flag_number(flags, "device-split-count") or 2
        scaling = _flag_number(flags, "device-cores-scaling") or 1.0
    else:
        split = (
            settings.device_split_count
            or _flag_number(flags, "device-split-count")
            or nvidia.device_split_count
            or 0
        )
        scaling = (
            settings.device_core_scaling
            or _flag_number(flags, "device-cores-scaling")
            or nvidia.device_core_scaling
            or 0.0
        )
    factor = int(
        _flag_number(flags, "gpu-memory-factor") or (1 if old else nvidia.gpu_memory_factor or 1)
    )
    count_name, memory_name, core_name = _names(version, flags, nvidia)
    if not count_name or split <= 0:
        return PluginRegistration(
            mode=settings.mode, problem="no resource names or a split count of 0 in the config"
        )
    gpus = [
        g
        for g in node_gpus(node)
        if old or (g.uuid not in settings.filter_uuids and g.index not in settings.filter_indexes)
    ]
    with_mode = version is None or version >= Version(1, 10, 0)
    records = [
        RegisteredGpu(
            uuid=g.uuid,
            count=int(split),
            memory=g.memory_mib // max(1, factor),
            type=device_type(g.nvml_name),
            healthy=True,
            mode=settings.mode if with_mode else None,
        )
        for g in gpus
    ]
    annotations = {REGISTER_ANNOTATION: encode_register(records)}
    if version is None or version <= LAST_HANDSHAKE_VERSION:
        annotations[HANDSHAKE_ANNOTATION] = f"Reported {now}"
    cores = OLD_CORES_PER_GPU if old else int(100 * scaling)
    allocatable = {
        count_name: str(int(split) * len(records)),
        core_name: str(cores * len(records)),
        memory_name: str(
            OLD_MEMORY_PER_GPU * len(records) if old else sum(r.memory for r in records)
        ),
    }
    return PluginRegistration(
        annotations=annotations,
        allocatable={k: v for k, v in allocatable.items() if k},
        gpus=records,
        mode=settings.mode,
    )

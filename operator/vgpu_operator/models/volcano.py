"""Payloads Volcano's deviceshare plugin and the HAMi device plugins read and write.

Formats, as their readers define them (volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/,
Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/config/config.go and pkg/util/,
Project-HAMi/ascend-device-plugin@v1.4.0:ascend-device-plugin.yaml):
- `volcano-vgpu-device-config` / `device-config.yaml`: top-level `nvidia:` (`NvidiaConfig`) and,
  for HAMi-mode Ascend, `vnpus:` (`VnpusConfig`). Both Go readers are non-strict (yaml.v2), so
  these models keep unknown keys (`extra="allow"`) instead of rejecting them.
- `volcano-vgpu-node-config` / `config.json`: `{"nodeconfig": [NodeConfigEntry, ...]}`.
- `hami-device-node-config` / `node-config.yaml`: `{nodes: [AscendNodeEntry, ...]}`.
- The node annotation `volcano.sh/node-vgpu-register` (`RegisteredGpu` records).

Parsed views of the scheduler conf and of DaemonSets/Deployments are in `volcano_views`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vgpu_operator import yamlsafe

# Keys written by the HAMi device plugin and by the Volcano scheduler
# (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/util/types.go,
# volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/type.go).
REGISTER_ANNOTATION = "volcano.sh/node-vgpu-register"
HANDSHAKE_ANNOTATION = "volcano.sh/node-vgpu-handshake"
POD_VGPU_IDS = "volcano.sh/vgpu-ids-new"
POD_DEVICES_TO_ALLOCATE = "volcano.sh/devices-to-allocate"
POD_BIND_PHASE = "volcano.sh/bind-phase"
POD_VGPU_NODE = "volcano.sh/vgpu-node"
POD_VGPU_MODE = "volcano.sh/vgpu-mode"
LEGACY_GPU_MEMORY = "volcano.sh/gpu-memory"
LEGACY_GPU_NUMBER = "volcano.sh/gpu-number"
DEVICE_CONFIG_KEY = "device-config.yaml"
DEFAULT_DEVICE_CONFIG_NAME = "volcano-vgpu-device-config"
PLUGIN_CM_NAMESPACES = ("kube-system", "volcano-system")  # the plugin's lookup order
VOLCANO_PREFIX = "volcano.sh/"
# The allocatable names Volcano v1.14.3+/v1.15.1+ require regardless of the ConfigMap
# (`NewGPUDevices`, volcano-sh/volcano@v1.15.1:
# pkg/scheduler/api/devices/nvidia/vgpu/device_info.go).
HARDCODED_ALLOCATABLE = (
    "volcano.sh/vgpu-number",
    "volcano.sh/vgpu-cores",
    "volcano.sh/vgpu-memory",
)


class PayloadError(ValueError):
    """A payload the components would not read as intended (bad YAML/JSON or shape)."""


class _Payload(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)


# --- knownMigGeometries (volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/vgpu.go) ---


class MigTemplate(_Payload):
    name: str
    memory: int = Field(ge=0)  # MiB
    count: int = Field(ge=0)


class MigGeometryGroup(_Payload):
    group: str = ""
    geometries: list[MigTemplate] = Field(default_factory=list)


class MigGeometryEntry(_Payload):
    """One `knownMigGeometries` item: model substrings and the whole-GPU layouts, in order."""

    models: list[str] = Field(default_factory=list)
    allowed_geometries: list[MigGeometryGroup] = Field(
        default_factory=list, alias="allowedGeometries"
    )

    def matches(self, device_type: str) -> bool:
        """The scheduler's test: any model is a substring of the registered device type
        (`NVIDIA-<NVML name>`). The plugin tests the NVML name alone; the two agree for every
        model string `prefix_only_match` passes."""
        return any(m and m in device_type for m in self.models)

    def to_yaml_data(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


DEVICE_TYPE_PREFIX = "NVIDIA-"


def device_type(nvml_name: str) -> str:
    """The device type the plugin registers and the scheduler matches: `NVIDIA-<NVML name>`."""
    return f"{DEVICE_TYPE_PREFIX}{nvml_name}"


# A knownMigGeometries model string is matched twice, differently: the scheduler tests it as a
# substring of the registered type `NVIDIA-<NVML name>` (`extractGeometryFromType`,
# volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/utils.go, the same from v1.12.0
# to v1.16.0-alpha.1), the plugin as a substring of the NVML name alone (`containsModel` over
# `GetIndexAndTypeFromUUID`'s `GetName()`, Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:
# pkg/plugin/server.go and pkg/util/util.go, the same in pkg/plugin/vgpu/ of v1.10.0 and v1.11.0).
# A string that matches only through the prefix gives the scheduler a geometry the plugin does not
# find: the plugin's `GenerateMigTemplate` returns position -1 and hands the container no MIG
# device. Every string matching the NVML name also matches the type, so only that way differs.


def prefix_only_match(model: str, nvml_names: Iterable[str] = ()) -> str | None:
    """Why a model string matches in the scheduler and not in the plugin, or None. A string with
    `NVIDIA-` in it never matches an NVML name (they read `NVIDIA <model>`, with a space, or the
    model alone on older drivers: no name models.gpu_catalog lists has `NVIDIA-`); otherwise each
    of `nvml_names` (and its form without `NVIDIA `) is tried."""
    if DEVICE_TYPE_PREFIX in model:
        return (
            f"it contains {DEVICE_TYPE_PREFIX!r}, which is in the type the scheduler compares "
            f"({DEVICE_TYPE_PREFIX}<NVML name>) and never in the NVML name the plugin compares"
        )
    for name in nvml_names:
        for form in dict.fromkeys((name, name.removeprefix("NVIDIA "))):
            if model and model in device_type(form) and model not in form:
                return (
                    f"it matches {device_type(form)!r}, the type the scheduler compares, only "
                    f"through its {DEVICE_TYPE_PREFIX!r}, and not {form!r}, the NVML name the "
                    "plugin compares"
                )
    return None


def first_match(entries: list[MigGeometryEntry], nvml_name: str) -> MigGeometryEntry | None:
    dtype = device_type(nvml_name)
    return next((e for e in entries if e.matches(dtype)), None)


# --- device-config.yaml (volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/) -----


class NvidiaConfig(_Payload):
    """The `nvidia:` section. `None` = key absent: the Go readers then see the zero value."""

    resource_count_name: str | None = Field(default=None, alias="resourceCountName")
    resource_memory_name: str | None = Field(default=None, alias="resourceMemoryName")
    resource_memory_percentage_name: str | None = Field(
        default=None, alias="resourceMemoryPercentageName"
    )
    resource_core_name: str | None = Field(default=None, alias="resourceCoreName")
    resource_priority_name: str | None = Field(default=None, alias="resourcePriorityName")
    overwrite_env: bool | None = Field(default=None, alias="overwriteEnv")
    default_memory: int | None = Field(default=None, alias="defaultMemory")
    default_cores: int | None = Field(default=None, alias="defaultCores")
    default_gpu_num: int | None = Field(default=None, alias="defaultGPUNum")
    device_split_count: int | None = Field(default=None, alias="deviceSplitCount")
    device_memory_scaling: float | None = Field(default=None, alias="deviceMemoryScaling")
    device_core_scaling: float | None = Field(default=None, alias="deviceCoreScaling")
    disable_core_limit: bool | None = Field(default=None, alias="disableCoreLimit")
    gpu_memory_factor: int | None = Field(default=None, alias="gpuMemoryFactor")
    known_mig_geometries: list[MigGeometryEntry] | None = Field(
        default=None, alias="knownMigGeometries"
    )
    pass_device_specs: bool | None = Field(default=None, alias="passDeviceSpecs")

    def resource_names(self) -> tuple[str, str, str, str]:
        """(count, memory, memory-percentage, cores) as the readers see them ('' if absent)."""
        return (
            self.resource_count_name or "",
            self.resource_memory_name or "",
            self.resource_memory_percentage_name or "",
            self.resource_core_name or "",
        )

    def geometries(self) -> list[MigGeometryEntry]:
        return list(self.known_mig_geometries or [])


# The scheduler's built-in config when its ConfigMap cannot be loaded (`GetDefaultDevicesConfig`,
# volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/config.go).
SCHEDULER_FALLBACK_NVIDIA = NvidiaConfig(
    resourceCountName="volcano.sh/vgpu-number",
    resourceMemoryName="volcano.sh/vgpu-memory",
    resourceCoreName="volcano.sh/vgpu-cores",
    defaultGPUNum=1,
    deviceSplitCount=10,
    deviceMemoryScaling=1,
    deviceCoreScaling=1,
    knownMigGeometries=[],
)


class VnpuTemplate(_Payload):
    name: str
    memory: int = 0
    ai_core: int = Field(default=0, alias="aiCore")
    ai_cpu: int = Field(default=0, alias="aiCPU")


class VnpuChipConfig(_Payload):
    chip_name: str = Field(default="", alias="chipName")
    common_word: str = Field(default="", alias="commonWord")
    resource_name: str = Field(default="", alias="resourceName")
    resource_memory_name: str = Field(default="", alias="resourceMemoryName")
    memory_allocatable: int = Field(default=0, alias="memoryAllocatable")
    memory_capacity: int = Field(default=0, alias="memoryCapacity")
    ai_core: int = Field(default=0, alias="aiCore")
    ai_cpu: int = Field(default=0, alias="aiCPU")
    templates: list[VnpuTemplate] = Field(default_factory=list)


class VnpusConfig(_Payload):
    """`vnpus:`; the scheduler also accepts the legacy form where `vnpus:` is the list itself."""

    hami_vnpu_core: bool = Field(default=False, alias="hamiVnpuCore")
    configs: list[VnpuChipConfig] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _legacy_list(cls, data: Any) -> Any:
        if isinstance(data, list):
            return {"configs": data}
        return data


class DeviceConfigFile(_Payload):
    nvidia: NvidiaConfig | None = None
    vnpus: VnpusConfig | None = None


def load_yaml_mapping(text: str, what: str) -> dict[str, Any]:
    """YAML 1.1 like the Go readers (yaml.v2); an empty document is an empty mapping. Aliases,
    integers beyond 64 bits and documents nested too deeply are refused (yamlsafe)."""
    try:
        raw = yamlsafe.load(text) if text and text.strip() else {}
    except yamlsafe.YamlRefused as exc:
        raise PayloadError(f"{what} is not valid YAML: {exc}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise PayloadError(f"{what} must be a YAML mapping, not {type(raw).__name__}")
    return raw


def parse_device_config(text: str) -> DeviceConfigFile:
    raw = load_yaml_mapping(text, DEVICE_CONFIG_KEY)
    try:
        return DeviceConfigFile.model_validate(raw)
    except ValidationError as exc:
        raise PayloadError(f"{DEVICE_CONFIG_KEY} does not have the expected shape: {exc}") from exc


# --- volcano-vgpu-node-config config.json -------------------------------------------------------
# (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/config/config.go)


class FilterDevicesPayload(_Payload):
    uuid: list[str] = Field(default_factory=list)
    index: list[int] = Field(default_factory=list)


class NodeConfigEntry(_Payload):
    name: str = ""
    operatingmode: str = ""
    devicememoryscaling: float = 0
    devicecorescaling: float = 0
    devicesplitcount: int = 0
    migstrategy: str = ""
    filterdevices: FilterDevicesPayload | None = None


@dataclass(frozen=True)
class EffectiveNodeSettings:
    """What the plugin on one node ends up with after reading `config.json` (`readFromConfigFile`,
    Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/util/util.go): mode starts as hami-core;
    every entry with the node's name applies its positive overrides, later wins."""

    mode: str = "hami-core"
    device_split_count: int | None = None
    device_memory_scaling: float | None = None
    device_core_scaling: float | None = None
    filter_uuids: frozenset[str] = frozenset()
    filter_indexes: frozenset[int] = frozenset()
    has_entry: bool = False


class NodeConfigFile(_Payload):
    nodeconfig: list[NodeConfigEntry] = Field(default_factory=list)

    def effective_for(self, node: str) -> EffectiveNodeSettings:
        out = EffectiveNodeSettings()
        for entry in self.nodeconfig:
            if entry.name != node:
                continue
            filt = entry.filterdevices
            out = EffectiveNodeSettings(
                mode=entry.operatingmode or out.mode,
                device_split_count=entry.devicesplitcount or out.device_split_count,
                device_memory_scaling=entry.devicememoryscaling or out.device_memory_scaling,
                device_core_scaling=entry.devicecorescaling or out.device_core_scaling,
                filter_uuids=frozenset(filt.uuid) if filt else out.filter_uuids,
                filter_indexes=frozenset(filt.index) if filt else out.filter_indexes,
                has_entry=True,
            )
        return out

    def names(self) -> list[str]:
        return [e.name for e in self.nodeconfig]


def parse_node_config(text: str) -> NodeConfigFile:
    """config.json. The plugin falls back to hami-core for every node when this fails."""
    try:
        raw = yamlsafe.json_loads(text) if text and text.strip() else {}
    except yamlsafe.YamlRefused as exc:
        raise PayloadError(f"config.json is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise PayloadError("config.json must be a JSON object")
    try:
        return NodeConfigFile.model_validate(raw)
    except ValidationError as exc:
        raise PayloadError(f"config.json does not have the expected shape: {exc}") from exc


# --- hami-device-node-config node-config.yaml (Project-HAMi/ascend-device-plugin@v1.4.0) ---


class AscendNodeEntry(_Payload):
    name: str = ""
    hami_vnpu_core: bool | None = Field(default=None, alias="hami-vnpu-core")
    v_device_count: int | None = Field(default=None, alias="vDeviceCount")
    filter_devices: FilterDevicesPayload | None = Field(default=None, alias="filterDevices")


class AscendNodeConfigFile(_Payload):
    nodes: list[AscendNodeEntry] = Field(default_factory=list)


def parse_ascend_node_config(text: str) -> AscendNodeConfigFile:
    raw = load_yaml_mapping(text, "node-config.yaml")
    try:
        return AscendNodeConfigFile.model_validate(raw)
    except ValidationError as exc:
        raise PayloadError(f"node-config.yaml does not have the expected shape: {exc}") from exc


# --- volcano.sh/node-vgpu-register -------------------------------------------------------------
# (`EncodeNodeDevices`, Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/util/)


@dataclass(frozen=True)
class RegisteredGpu:
    """One record `<GPU-UUID>,<count>,<devmem>,NVIDIA-<NVML name>,<health>,<mode>:`;
    `mode` is None for the 5-field records of plugins before v1.10 (rejected by Volcano 1.12+)."""

    uuid: str
    count: int
    memory: int  # MiB / gpuMemoryFactor
    type: str
    healthy: bool
    mode: str | None

    def encode(self) -> str:
        fields = [self.uuid, str(self.count), str(self.memory), self.type]
        fields.append("true" if self.healthy else "false")
        if self.mode is not None:
            fields.append(self.mode)
        return ",".join(fields) + ":"


def encode_register(gpus: list[RegisteredGpu]) -> str:
    return "".join(g.encode() for g in gpus)


def parse_register(value: str) -> list[RegisteredGpu]:
    out: list[RegisteredGpu] = []
    for record in value.split(":"):
        if not record.strip():
            continue
        fields = record.split(",")
        if len(fields) < 5:
            raise PayloadError(f"register record {record!r} has {len(fields)} fields, not 6")
        try:
            count, memory = int(fields[1]), int(fields[2])
        except ValueError as exc:
            raise PayloadError(f"register record {record!r}: count/memory not numbers") from exc
        out.append(
            RegisteredGpu(
                uuid=fields[0],
                count=count,
                memory=memory,
                type=fields[3],
                healthy=fields[4].strip().lower() == "true",
                mode=fields[5] if len(fields) >= 6 else None,
            )
        )
    return out


def registration(node: Mapping[str, Any] | None) -> str | None:
    """A Node's `volcano.sh/node-vgpu-register` annotation (None: the plugin has not
    registered it). Not a node fact of the operator's, but what a node in Verifying waits for
    (`core.rollout.arrive.registration_problem`)."""
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(REGISTER_ANNOTATION)
    return str(value) if value is not None else None

"""The operator configuration: one YAML file (rendered by the Helm chart), validated strictly.

Every name the Volcano scheduler, the HAMi device plugins and the operator must agree on lives
here once: the four vGPU resource names, `gpuMemoryFactor`, where each ConfigMap, DaemonSet and
Deployment is, whether the operator writes (`enforce`), writes only the nodes (`report`) or
nothing but its policies' status and Events (`observe`), what a deleted policy leaves
(`onDelete`), how often it may restart components, whether Ascend vNPU (HAMi mode) is in use,
and the MIG geometry catalog.

`load_config(text)` refuses invalid input with one line per problem, naming the field path and
the fix (`ConfigError`); the operator does not start on it.

Discovery: a namespace, name, data key, container or resource name may be `auto` (a whole
reference or `resourceNames` too: `deviceConfig: auto`). The operator then resolves it at start
from the cluster, as the components themselves resolve it (core.discovery), and `doctor` shows
what it resolved and why. A config holding `auto` is a request, not a value: it is resolved
before anything reads or writes (`auto_fields`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from vgpu_operator.core import mig_catalog
from vgpu_operator.models.config_errors import ConfigError, ConfigIssue, validation_issues
from vgpu_operator.models.volcano import MigGeometryEntry

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CONFIGMAP_KEY = r"^[-._a-zA-Z0-9]+$"
# An extended resource name: `<domain>/<name>` (kubelet rejects names without a domain).
RESOURCE_NAME = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)

# A value resolved from the cluster at start (core.discovery) instead of written here.
AUTO = "auto"
AUTO_RESOURCE_NAME = rf"^(?:{AUTO}$|{RESOURCE_NAME[1:]})"

DEFAULT_COUNT_NAME = "volcano.sh/vgpu-number"
DEFAULT_MEMORY_NAME = "volcano.sh/vgpu-memory"
DEFAULT_MEMORY_PERCENTAGE_NAME = "volcano.sh/vgpu-memory-percentage"
DEFAULT_CORES_NAME = "volcano.sh/vgpu-cores"


def _fix(text: str) -> dict[str, Any]:
    """Attach the fix a person should apply when this field is invalid."""
    return {"fix": text}


def _invalid(subpath: str, problem: str, fix: str) -> PydanticCustomError:
    """A cross-field error: `subpath` continues the location of the model that raises it."""
    return PydanticCustomError(
        "operator_config", "{problem}", {"problem": problem, "fix": fix, "subpath": subpath}
    )


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


Namespace = Annotated[
    str,
    Field(
        pattern=DNS_LABEL,
        max_length=63,
        json_schema_extra=_fix("use a namespace name: lower-case letters, digits and '-'"),
    ),
]
ObjectName = Annotated[
    str,
    Field(
        pattern=DNS_SUBDOMAIN,
        max_length=253,
        json_schema_extra=_fix("use an object name: lower-case letters, digits, '-' and '.'"),
    ),
]
DataKey = Annotated[
    str,
    Field(
        pattern=CONFIGMAP_KEY,
        max_length=253,
        json_schema_extra=_fix("use a ConfigMap data key: letters, digits, '-', '_' and '.'"),
    ),
]
ResourceName = Annotated[
    str,
    Field(
        pattern=AUTO_RESOURCE_NAME,
        max_length=317,
        json_schema_extra=_fix(
            "use an extended resource name '<domain>/<name>', e.g. volcano.sh/vgpu-number, "
            "or 'auto' (resolved from the cluster)"
        ),
    ),
]


def _all_auto(data: Any, fields: tuple[str, ...]) -> Any:
    """`auto` for a whole reference stands for `auto` in each of its fields."""
    return dict.fromkeys(fields, AUTO) if data == AUTO else data


def _autos(model: BaseModel, prefix: str) -> list[str]:
    """The aliases (dotted, under `prefix`) of the fields of `model` that are `auto`."""
    out = []
    for name, info in type(model).model_fields.items():
        if getattr(model, name) == AUTO:
            out.append(f"{prefix}.{info.alias or name}")
    return out


class ConfigMapRef(_Model):
    namespace: Namespace
    name: ObjectName
    key: DataKey

    @model_validator(mode="before")
    @classmethod
    def _auto(cls, data: Any) -> Any:
        return _all_auto(data, ("namespace", "name", "key"))

    def ref(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def is_auto(self) -> bool:
        return AUTO in (self.namespace, self.name, self.key)


class WorkloadRef(_Model):
    """A DaemonSet or Deployment, and (optionally) which of its containers is the one that
    matters; unset: the container whose image or name says so, else the first."""

    namespace: Namespace
    name: ObjectName
    container: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _auto(cls, data: Any) -> Any:
        return _all_auto(data, ("namespace", "name", "container"))

    def is_auto(self) -> bool:
        return AUTO in (self.namespace, self.name, self.container)


class ResourceNames(_Model):
    count: ResourceName = DEFAULT_COUNT_NAME
    memory: ResourceName = DEFAULT_MEMORY_NAME
    memory_percentage: ResourceName = Field(
        default=DEFAULT_MEMORY_PERCENTAGE_NAME, alias="memoryPercentage"
    )
    cores: ResourceName = DEFAULT_CORES_NAME

    @model_validator(mode="before")
    @classmethod
    def _auto(cls, data: Any) -> Any:
        return _all_auto(data, ("count", "memory", "memoryPercentage", "cores"))

    @model_validator(mode="after")
    def _distinct(self) -> ResourceNames:
        names = [n for n in self.names() if n != AUTO]  # resolved ones are checked again
        if len(set(names)) != len(names):
            raise _invalid(
                "",
                "the four resource names must differ (count, memory, memoryPercentage, cores)",
                "give each its own name",
            )
        return self

    def names(self) -> tuple[str, str, str, str]:
        return (self.count, self.memory, self.memory_percentage, self.cores)

    def is_default(self) -> bool:
        return self == ResourceNames()


class DeviceDefaults(_Model):
    """Values of the `nvidia:` section that apply to every node without a per-node override."""

    device_split_count: int = Field(
        default=10,
        ge=1,
        le=128,
        alias="deviceSplitCount",
        json_schema_extra=_fix("use 1..128 (how many pods may share one GPU)"),
    )
    device_memory_scaling: float = Field(default=1.0, gt=0, le=100, alias="deviceMemoryScaling")
    device_core_scaling: float = Field(default=1.0, gt=0, le=100, alias="deviceCoreScaling")
    default_memory: int = Field(default=0, ge=0, alias="defaultMemory")
    default_cores: int = Field(default=0, ge=0, le=100, alias="defaultCores")
    default_gpu_num: int = Field(default=1, ge=0, alias="defaultGPUNum")
    overwrite_env: bool = Field(default=False, alias="overwriteEnv")


class SchedulerRef(_Model):
    config_map: ConfigMapRef = Field(
        default=ConfigMapRef(
            namespace="volcano-system",
            name="volcano-scheduler-configmap",
            key="volcano-scheduler.conf",
        ),
        alias="configMap",
    )
    deployment: WorkloadRef = WorkloadRef(namespace="volcano-system", name="volcano-scheduler")


class RestartPolicy(_Model):
    """Whether the operator may restart the scheduler and the device plugins after a change
    they only read at start, and at most how often (a scheduler restart can strand pods)."""

    allowed: bool = True
    min_interval_seconds: int = Field(
        default=300,
        ge=0,
        le=86400,
        alias="minIntervalSeconds",
        json_schema_extra=_fix("use 0..86400 seconds"),
    )


class AscendVnpu(_Model):
    """HAMi-mode Ascend vNPU: the scheduler reads `vnpus:` from the same ConfigMap as `nvidia:`;
    the operator mirrors it there from `hami-scheduler-device`, the Ascend plugin's source."""

    enabled: bool = False
    scheduler_device: ConfigMapRef = Field(
        default=ConfigMapRef(
            namespace="kube-system", name="hami-scheduler-device", key="device-config.yaml"
        ),
        alias="schedulerDevice",
    )


MIG_PROFILE = re.compile(r"^[1-8]g\.[0-9]+gb([+-][a-z.]+)?$")
# The scheduler encodes a MIG pick as `<GPU-UUID>[<group>-<position>]` and splits it on "-"
# expecting two parts (volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/mig.go);
# the pod annotation joins fields, devices and containers with "," ":" ";" (nvidia/vgpu/utils.go
# `encodePodDevices`). A group name with any of these, or brackets, breaks the pick.
MIG_GROUP = re.compile(r"^[A-Za-z0-9_.]+$")
MAX_COMPUTE_SLICES = 7  # the most any MIG GPU has (A100, H100, H200); A30 has 4


def _compute_slices(models: list[str]) -> tuple[int, str]:
    """The compute slices of the GPUs an entry's model strings match (substrings of
    `NVIDIA-<NVML name>`): the fewest of the known models matched, else the most any MIG GPU
    has; and the model that sets the limit."""
    limit, which = MAX_COMPUTE_SLICES, ""
    for gpu in mig_catalog.MIG_MODELS.values():
        if any(m and m in f"NVIDIA-{gpu.nvml_name}" for m in models) and (
            gpu.compute_slices < limit
        ):
            limit, which = gpu.compute_slices, gpu.nvml_name
    return limit, which


def _check_catalog_entry(path: str, entry: MigGeometryEntry) -> None:
    """The payload model is lenient (the Go readers are); the catalog is checked strictly."""

    def fail(where: str, problem: str, fix: str) -> None:
        raise _invalid(path + where, problem, fix)

    if entry.model_extra:
        fail("", f"unknown keys {sorted(entry.model_extra)}", "use models and allowedGeometries")
    if not entry.models or any(not m.strip() for m in entry.models):
        fail(".models", "needs at least one non-empty model string", "add NVML name substrings")
    if not entry.allowed_geometries:
        fail(".allowedGeometries", "needs at least one group", "add a group of MIG profiles")
    groups: set[str] = set()
    limit, limited_by = _compute_slices(list(entry.models))
    for g, group in enumerate(entry.allowed_geometries):
        where = f".allowedGeometries[{g}]"
        if group.model_extra:
            fail(where, f"unknown keys {sorted(group.model_extra)}", "use group and geometries")
        if not group.group or group.group in groups:
            fail(where + ".group", "group names must be set and unique", "name each group once")
        if not MIG_GROUP.match(group.group):
            fail(
                where + ".group",
                f"{group.group!r}: the scheduler splits MIG device ids on '-' and the pod "
                "annotation on ',', ':' and ';'",
                "use letters, digits, '_' and '.' only (e.g. group1)",
            )
        groups.add(group.group)
        if not group.geometries:
            fail(where + ".geometries", "needs at least one profile", "add name/memory/count")
        for t, tmpl in enumerate(group.geometries):
            at = f"{where}.geometries[{t}]"
            if tmpl.model_extra:
                fail(at, f"unknown keys {sorted(tmpl.model_extra)}", "use name, memory, count")
            if not MIG_PROFILE.match(tmpl.name):
                fail(at + ".name", f"{tmpl.name!r} is not a MIG profile", "write e.g. 1g.10gb")
            if tmpl.memory <= 0:
                fail(at + ".memory", "must be > 0", "give the profile's memory in MiB")
            if not 1 <= tmpl.count <= 7:
                fail(at + ".count", "must be 1..7", "give how many of this profile the group has")
        used = sum(int(t.name.split("g.", 1)[0]) * t.count for t in group.geometries)
        if used > limit:
            gpu = f"{limited_by} has" if limited_by else "no MIG GPU has more than"
            fail(
                where + ".geometries",
                f"the group needs {used} compute slices (the <G> of <G>g.<GB>gb times the count), "
                f"but {gpu} {limit}: the device plugin's nvidia-mig-parted apply fails, which "
                "stops the plugin",
                f"keep each group within {limit} compute slices",
            )


class MigGeometries(_Model):
    """The `knownMigGeometries` catalog: entries here first, then the built-in defaults (A30,
    A100 40/80 GB, H100, H200) and the built-in MIG catalog's other models (`builtins`), then,
    for a model none of these knows, entries built from the profiles node agents report
    (`fromInventory`; only reports that pass core.geometry's sanity check)."""

    builtins: bool = True
    from_inventory: bool = Field(default=True, alias="fromInventory")
    catalog: list[MigGeometryEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _catalog_valid(self) -> MigGeometries:
        seen: dict[str, int] = {}
        for i, entry in enumerate(self.catalog):
            _check_catalog_entry(f"catalog[{i}]", entry)
            for model in entry.models:
                if model in seen:
                    raise _invalid(
                        f"catalog[{i}].models",
                        f"model {model!r} is already listed in catalog[{seen[model]}]; the "
                        "scheduler only ever uses the first match",
                        "list each model once",
                    )
                seen[model] = i
        return self


class NvidiaDevicePluginMatch(_Model):
    """How to recognise NVIDIA's own device plugin pods (they must not run on managed nodes)."""

    pod_labels: list[dict[str, str]] = Field(
        default_factory=lambda: [
            {"app": "nvidia-device-plugin-daemonset"},
            {"app.kubernetes.io/name": "nvidia-device-plugin"},
        ],
        alias="podLabels",
    )
    image_substrings: list[str] = Field(
        default_factory=lambda: ["nvidia/k8s-device-plugin"], alias="imageSubstrings"
    )


class OperatorConfig(_Model):
    resource_names: ResourceNames = Field(default_factory=ResourceNames, alias="resourceNames")
    gpu_memory_factor: int = Field(
        default=1,
        ge=1,
        le=1024,
        alias="gpuMemoryFactor",
        json_schema_extra=_fix(
            "use a whole number 1..1024 (MiB per registered memory unit; note it changes "
            "the unit of every vgpu-memory request)"
        ),
    )
    device_defaults: DeviceDefaults = Field(default_factory=DeviceDefaults, alias="deviceDefaults")
    device_config: ConfigMapRef = Field(
        default=ConfigMapRef(
            namespace="kube-system", name="volcano-vgpu-device-config", key="device-config.yaml"
        ),
        alias="deviceConfig",
    )
    node_config: ConfigMapRef = Field(
        default=ConfigMapRef(
            namespace="kube-system", name="volcano-vgpu-node-config", key="config.json"
        ),
        alias="nodeConfig",
    )
    ascend_node_config: ConfigMapRef = Field(
        default=ConfigMapRef(
            namespace="kube-system", name="hami-device-node-config", key="node-config.yaml"
        ),
        alias="ascendNodeConfig",
    )
    device_plugin: WorkloadRef = Field(
        default=WorkloadRef(
            namespace="kube-system", name="volcano-device-plugin", container="volcano-device-plugin"
        ),
        alias="devicePlugin",
    )
    ascend_device_plugin: WorkloadRef = Field(
        default=WorkloadRef(namespace="kube-system", name="hami-ascend-device-plugin"),
        alias="ascendDevicePlugin",
    )
    scheduler: SchedulerRef = Field(default_factory=SchedulerRef)
    # enforce: write everything the operator owns; report: write the nodes, only report the
    # Volcano/HAMi objects; observe: write nothing but the policies' status and Events, and
    # report what enforce would write, restart or reconfigure (core.observe).
    mode: Literal["enforce", "report", "observe"] = Field(
        default="enforce",
        json_schema_extra=_fix(
            "use 'enforce' (write what the operator owns), 'report' (write the nodes, report "
            "the Volcano ConfigMaps) or 'observe' (write nothing, report what enforce would do)"
        ),
    )
    # The default of a policy's spec.onDelete (core.adoption): Retain leaves what the operator
    # set up in place when a policy is deleted (or the operator uninstalled).
    on_delete: Literal["Delete", "Retain"] = Field(
        default="Delete",
        alias="onDelete",
        json_schema_extra=_fix(
            "use 'Delete' (a deleted policy's nodes are cleaned) or 'Retain' (left as they are)"
        ),
    )
    restarts: RestartPolicy = Field(default_factory=RestartPolicy)
    ascend_vnpu: AscendVnpu = Field(default_factory=AscendVnpu, alias="ascendVnpu")
    mig_geometries: MigGeometries = Field(default_factory=MigGeometries, alias="migGeometries")
    nvidia_device_plugin: NvidiaDevicePluginMatch = Field(
        default_factory=NvidiaDevicePluginMatch, alias="nvidiaDevicePlugin"
    )
    require_gpu_evidence: bool = Field(
        default=True,
        alias="requireGpuEvidence",
        json_schema_extra=_fix(
            "true (the default): a node is written only when it shows its mode's hardware; "
            "false only in clusters without GPU Feature Discovery or the device plugins"
        ),
    )

    @model_validator(mode="after")
    def _distinct_configmaps(self) -> OperatorConfig:
        refs = {
            "deviceConfig": self.device_config.ref(),
            "nodeConfig": self.node_config.ref(),
            "ascendNodeConfig": self.ascend_node_config.ref(),
            "ascendVnpu.schedulerDevice": self.ascend_vnpu.scheduler_device.ref(),
            "scheduler.configMap": self.scheduler.config_map.ref(),
        }
        seen: dict[tuple[str, str], str] = {}
        for field, ref in refs.items():
            if AUTO in ref:
                continue  # checked again once resolved
            if ref in seen:
                raise _invalid(
                    field,
                    f"names the same ConfigMap {ref[0]}/{ref[1]} as {seen[ref]}, but each "
                    "holds a different format",
                    "point them at different ConfigMaps",
                )
            seen[ref] = field
        return self

    def auto_fields(self) -> list[str]:
        """Every field that is `auto` (dotted aliases, e.g. `deviceConfig.namespace`): what
        discovery resolves. Empty: the config is used as written."""
        parts: list[tuple[BaseModel, str]] = [
            (self.resource_names, "resourceNames"),
            (self.device_config, "deviceConfig"),
            (self.node_config, "nodeConfig"),
            (self.ascend_node_config, "ascendNodeConfig"),
            (self.device_plugin, "devicePlugin"),
            (self.ascend_device_plugin, "ascendDevicePlugin"),
            (self.scheduler.config_map, "scheduler.configMap"),
            (self.scheduler.deployment, "scheduler.deployment"),
            (self.ascend_vnpu.scheduler_device, "ascendVnpu.schedulerDevice"),
        ]
        return [path for model, prefix in parts for path in _autos(model, prefix)]


# --- loading ---------------------------------------------------------------------------


def load_config(text: str) -> OperatorConfig:
    """Parse and validate the operator configuration (YAML). Empty text: all defaults."""
    try:
        raw = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(
            [ConfigIssue("<file>", f"not valid YAML{where}: {problem}", "fix the YAML syntax")]
        ) from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(
            [
                ConfigIssue(
                    "<file>",
                    f"the top level must be a mapping, not {type(raw).__name__}",
                    "write the settings as 'key: value' lines",
                )
            ]
        )
    try:
        return OperatorConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(validation_issues(exc, OperatorConfig)) from exc


__all__ = ["ConfigError", "ConfigIssue", "OperatorConfig", "load_config"]

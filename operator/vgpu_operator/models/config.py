"""The operator configuration: one YAML file (rendered by the Helm chart), validated strictly.

Every name the Volcano scheduler, the HAMi device plugins and the operator must agree on lives
here once: the four vGPU resource names, `gpuMemoryFactor`, where each ConfigMap, DaemonSet and
Deployment is, whether the operator writes (`enforce`), writes only the nodes (`report`) or
nothing but its policies' status and Events (`observe`), what a deleted policy leaves
(`onDelete`), how often it may restart components, whether Ascend vNPU (HAMi mode) is in use,
and the MIG geometry catalog (`config_mig`). The field types and the references to objects and
resource names are `config_refs`.

`load_config(text)` refuses invalid input with one line per problem, naming the field path and
the fix (`ConfigError`); the operator does not start on it.

Discovery: a namespace, name, data key, container or resource name may be `auto` (a whole
reference or `resourceNames` too: `deviceConfig: auto`). The operator then resolves it at start
from the cluster, as the components themselves resolve it (core.volcano.discovery), and `doctor`
shows
what it resolved and why. A config holding `auto` is a request, not a value: it is resolved
before anything reads or writes (`auto_fields`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from vgpu_operator.models.config_admission import AdmissionPoliciesRef
from vgpu_operator.models.config_dra import DraInstallation
from vgpu_operator.models.config_errors import ConfigError, ConfigIssue, validation_issues
from vgpu_operator.models.config_mig import MigGeometries
from vgpu_operator.models.config_refs import (
    AUTO,
    DNS_SUBDOMAIN,
    ConfigMapRef,
    ConfigModel,
    ResourceNames,
    WorkloadRef,
    auto_paths,
    cross_field_error,
    fix_hint,
)
from vgpu_operator.models.gpu_resources import DEFAULT_DRA_DRIVERS
from vgpu_operator.models.nvidia_plugin_config import NvidiaPluginConfigRef
from vgpu_operator.models.policy_keys import PolicyKeys


class DeviceDefaults(ConfigModel):
    """Values of the `nvidia:` section that apply to every node without a per-node override."""

    device_split_count: int = Field(
        default=10,
        ge=1,
        le=128,
        alias="deviceSplitCount",
        json_schema_extra=fix_hint("use 1..128 (how many pods may share one GPU)"),
    )
    device_memory_scaling: float = Field(default=1.0, gt=0, le=100, alias="deviceMemoryScaling")
    device_core_scaling: float = Field(default=1.0, gt=0, le=100, alias="deviceCoreScaling")
    default_memory: int = Field(default=0, ge=0, alias="defaultMemory")
    default_cores: int = Field(default=0, ge=0, le=100, alias="defaultCores")
    default_gpu_num: int = Field(default=1, ge=0, alias="defaultGPUNum")
    overwrite_env: bool = Field(default=False, alias="overwriteEnv")


class SchedulerRef(ConfigModel):
    config_map: ConfigMapRef = Field(
        default=ConfigMapRef(
            namespace="volcano-system",
            name="volcano-scheduler-configmap",
            key="volcano-scheduler.conf",
        ),
        alias="configMap",
    )
    deployment: WorkloadRef = WorkloadRef(namespace="volcano-system", name="volcano-scheduler")


class RestartPolicy(ConfigModel):
    """Whether the operator may restart the scheduler and the device plugins after a change
    they only read at start, and at most how often (a scheduler restart can strand pods)."""

    allowed: bool = True
    min_interval_seconds: int = Field(
        default=300,
        ge=0,
        le=86400,
        alias="minIntervalSeconds",
        json_schema_extra=fix_hint("use 0..86400 seconds"),
    )


class AscendVnpu(ConfigModel):
    """HAMi-mode Ascend vNPU: the scheduler reads `vnpus:` from the same ConfigMap as `nvidia:`;
    the operator mirrors it there from `hami-scheduler-device`, the Ascend plugin's source."""

    enabled: bool = False
    scheduler_device: ConfigMapRef = Field(
        default=ConfigMapRef(
            namespace="kube-system", name="hami-scheduler-device", key="device-config.yaml"
        ),
        alias="schedulerDevice",
    )


class NvidiaDevicePluginMatch(ConfigModel):
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

    def recognises(self, labels: Mapping[str, str], images: Iterable[str]) -> bool:
        """Whether a pod (or a workload's pod template) with these labels and container images
        is NVIDIA's device plugin: every label of one `podLabels` entry, or an image containing
        one of `imageSubstrings`."""
        by_label = any(
            sel and all(labels.get(k) == v for k, v in sel.items()) for sel in self.pod_labels
        )
        return by_label or any(sub in img for img in images for sub in self.image_substrings)


# A DRA driver's name: a DNS subdomain of at most 63 characters
# (kubernetes/api@v0.34.0:resource/v1/types.go `DeviceRequestAllocationResult.Driver`).
DraDriver = Annotated[
    str,
    Field(
        pattern=DNS_SUBDOMAIN,
        max_length=63,
        json_schema_extra=fix_hint("use a DRA driver's name, e.g. gpu.nvidia.com"),
    ),
]


class OperatorConfig(ConfigModel):
    resource_names: ResourceNames = Field(default_factory=ResourceNames, alias="resourceNames")
    # MiB per registered memory unit: a volcano.sh/vgpu-memory request of N means N x this MiB
    # (the plugin registers each GPU's MiB / factor; the scheduler's MIG path multiplies the
    # request by it). Unset: the one the cluster's device config already has, adopted, never
    # reset (core/volcano/snapshot.py `ClusterSnapshot.__post_init__`); 1 where it has none.
    gpu_memory_factor: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        alias="gpuMemoryFactor",
        json_schema_extra=fix_hint(
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
        json_schema_extra=fix_hint(
            "use 'enforce' (write what the operator owns), 'report' (write the nodes, report "
            "the Volcano ConfigMaps) or 'observe' (write nothing, report what enforce would do)"
        ),
    )
    # The default of a policy's spec.onDelete (core.nodes.adoption): Retain leaves what the operator
    # set up in place when a policy is deleted (or the operator uninstalled).
    on_delete: Literal["Delete", "Retain"] = Field(
        default="Delete",
        alias="onDelete",
        json_schema_extra=fix_hint(
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
        json_schema_extra=fix_hint(
            "true (the default): a node is written only when it shows its mode's hardware; "
            "false only in clusters without GPU Feature Discovery or the device plugins"
        ),
    )
    # NVIDIA's device plugin configs (time-slicing, MPS): pods asking a name they rename a
    # resource to are GPU consumers (models.nvidia_plugin_config). Unset: none read.
    nvidia_device_plugin_config: NvidiaPluginConfigRef | None = Field(
        default=None, alias="nvidiaDevicePluginConfig"
    )
    # DRA drivers whose ResourceClaims make their pod a GPU consumer (models.gpu_resources).
    gpu_dra_drivers: list[DraDriver] = Field(
        default_factory=lambda: list(DEFAULT_DRA_DRIVERS),
        alias="gpuDraDrivers",
        max_length=64,
        json_schema_extra=fix_hint(
            "list DRA driver names (DNS subdomains of at most 63 characters), e.g. "
            "[gpu.nvidia.com]; [] counts no ResourceClaim"
        ),
    )
    # The node label and taint keys policies may ask for (models.policy_keys): a policy asking
    # for another is refused (core.nodes.policy_keys). The chart always sets it, from the value
    # its admission policy holds the controller's node writes to; unset (a configuration the
    # chart did not render): the operator refuses no key.
    policy_keys: PolicyKeys | None = Field(
        default=None,
        alias="policyKeys",
        json_schema_extra=fix_hint(
            "give {labels: [...], taints: [...]}: keys or prefixes ending in '/'"
        ),
    )
    # The installation of NVIDIA's DRA driver the `dra` pools use (models.config_dra); unset: no
    # policy may use mode dra.
    dra: DraInstallation | None = None
    # --- the chart's admission policies (core.admission.verdict) ---
    # What the chart rendered (their names and hash); unset: no configuration the chart
    # rendered, nothing to check (reported as NotConfigured).
    admission_policies: AdmissionPoliciesRef | None = Field(
        default=None,
        alias="admissionPolicies",
        json_schema_extra=fix_hint("leave it to the chart, which renders it"),
    )
    # true: the controller writes only while those policies are present, the chart's and
    # enforced, and otherwise runs as in observe mode; false is the explicit way out.
    require_admission_policies: bool = Field(
        default=True,
        alias="requireAdmissionPolicies",
        json_schema_extra=fix_hint(
            "true (the default): write only while the chart's admission policies are enforced; "
            "false: write without them (RBAC alone confines the operator)"
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
                raise cross_field_error(
                    field,
                    f"names the same ConfigMap {ref[0]}/{ref[1]} as {seen[ref]}, but each "
                    "holds a different format",
                    "point them at different ConfigMaps",
                )
            seen[ref] = field
        return self

    @property
    def memory_factor(self) -> int:
        """The gpuMemoryFactor the operator renders: the configured one, else 1 (a snapshot of
        the cluster has first adopted the device config's own into an unset one)."""
        return self.gpu_memory_factor or 1

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
        return [path for model, prefix in parts for path in auto_paths(model, prefix)]


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

"""`ClusterSnapshot`: the raw objects read from the cluster, as plain dicts, plus the operator
config; and the derived views every rule shares (what the scheduler reads, what the plugin
reads, which nodes are managed and in which mode). Nothing here talks to the cluster. What one
node says of itself is read by `core.volcano.node_inputs`, times by `core.volcano.times`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from vgpu_operator import contract
from vgpu_operator.core.dra.observed import DraApi
from vgpu_operator.core.volcano import node_inputs
from vgpu_operator.core.volcano.component_versions import scheduler_parses_string_bools
from vgpu_operator.core.volcano.geometry import ReportedGpuModel, reported_from_inventory
from vgpu_operator.core.volcano.render.device_config import vnpus_section
from vgpu_operator.core.volcano.render.node_config import owned_entries
from vgpu_operator.core.volcano.render.plugin_args import PLUGIN_IMAGE_HINT
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.gpu_resources import ClaimDrivers
from vgpu_operator.models.volcano import (
    DEFAULT_DEVICE_CONFIG_NAME,
    PLUGIN_CM_NAMESPACES,
    REGISTER_ANNOTATION,
    SCHEDULER_FALLBACK_NVIDIA,
    DeviceConfigFile,
    NodeConfigFile,
    NvidiaConfig,
    PayloadError,
    parse_device_config,
    parse_node_config,
)
from vgpu_operator.models.volcano_views import (
    ContainerView,
    SchedulerConfView,
    WorkloadView,
    parse_scheduler_conf,
    workload_view,
)

if TYPE_CHECKING:
    from vgpu_operator.core.admission.verdict import Observation

Obj = dict[str, Any]


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def name_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name", ""))


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def requested(pod: Mapping[str, Any]) -> dict[str, str]:
    """Every resource any (init) container of the pod requests or limits, non-zero."""
    spec = pod.get("spec") or {}
    out: dict[str, str] = {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = (c or {}).get("resources") or {}
        for part in ("limits", "requests"):
            for key, value in (res.get(part) or {}).items():
                if str(value) not in ("0", ""):
                    out[str(key)] = str(value)
    return out


def pod_done(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Succeeded" or bool(
        meta(pod).get("deletionTimestamp")
    )


@dataclass(frozen=True)
class DeviceConfigSource:
    namespace: str
    name: str
    cm: Obj | None
    parsed: DeviceConfigFile | None
    error: str | None = None

    @property
    def nvidia(self) -> NvidiaConfig | None:
        return self.parsed.nvidia if self.parsed else None


@dataclass(frozen=True)
class ClusterSnapshot:
    """What the rules see. Lists hold objects as the API returns them (dicts)."""

    config: OperatorConfig = field(default_factory=OperatorConfig)
    configmaps: list[Obj] = field(default_factory=list)
    deployments: list[Obj] = field(default_factory=list)
    daemonsets: list[Obj] = field(default_factory=list)
    nodes: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    # Each ResourceClaim's allocated drivers (models.gpu_resources); None: not read, every
    # claim counts.
    claims: ClaimDrivers | None = None
    # What the apiserver shows of DRA (read only with the operator config's `dra` section);
    # None: not read, the DRA rules say nothing.
    dra_api: DraApi | None = None
    # The chart's admission policies and bindings as read (core.admission.verdict); None: not
    # read (only `doctor` reads them, for the rule admission-policies).
    admission: Observation | None = None
    # The VGPUNodePolicies as `doctor` reads them (the policy-keys rule); empty where the reader
    # does not hand them in (the controller's passes: a refused policy's status says it).
    policies: list[Obj] = field(default_factory=list)

    def __post_init__(self) -> None:
        """An unset `gpuMemoryFactor` is the one the cluster already has: it is the unit of
        every vgpu-memory request there, so it is adopted, not reset to 1. The plugin's
        `--gpu-memory-factor` when given (it overrides the ConfigMap in every version that has
        it: core/volcano/memory_unit.py `plugin_memory_unit`), else the device config the
        operator renders; 0 or absent is 1 to the plugin: then nothing is adopted."""
        if self.config.gpu_memory_factor is not None:
            return
        c = self.plugin_container
        flag = c.flags.get("gpu-memory-factor") if c is not None else None
        live: int | None
        if flag is not None and flag.value and flag.value.isdigit():
            live = int(flag.value)
        else:
            ref = self.config.device_config
            nvidia = self.device_source(ref.namespace, ref.name).nvidia
            live = nvidia.gpu_memory_factor if nvidia is not None else None
        if live is not None and 1 <= live <= 1024:
            adopted = self.config.model_copy(update={"gpu_memory_factor": live})
            object.__setattr__(self, "config", adopted)

    # --- lookups ----------------------------------------------------------------------------

    def configmap(self, namespace: str, name: str) -> Obj | None:
        return self._named(self.configmaps, namespace, name)

    @staticmethod
    def _named(items: list[Obj], namespace: str, name: str) -> Obj | None:
        for obj in items:
            if meta(obj).get("namespace") == namespace and name_of(obj) == name:
                return obj
        return None

    def daemonset(self, namespace: str, name: str) -> Obj | None:
        return self._named(self.daemonsets, namespace, name)

    def _workload(self, items: list[Obj], namespace: str, name: str) -> WorkloadView | None:
        obj = self._named(items, namespace, name)
        return None if obj is None else workload_view(obj)

    def node(self, name: str) -> Obj | None:
        return next((n for n in self.nodes if name_of(n) == name), None)

    def pods_of(self, workload: WorkloadView) -> list[Obj]:
        return [p for p in self.pods if workload.selects(p)]

    def pods_on(self, node: str) -> list[Obj]:
        return [p for p in self.pods if (p.get("spec") or {}).get("nodeName") == node]

    # --- scheduler --------------------------------------------------------------------------

    @cached_property
    def scheduler_cm(self) -> Obj | None:
        ref = self.config.scheduler.config_map
        return self.configmap(ref.namespace, ref.name)

    @cached_property
    def scheduler_conf(self) -> SchedulerConfView | None:
        """The conf, its switches read as the scheduler's version reads them."""
        cm = self.scheduler_cm
        text = ((cm or {}).get("data") or {}).get(self.config.scheduler.config_map.key)
        if text is None:
            return None
        version = self.scheduler_container.version if self.scheduler_container else None
        string_bools = scheduler_parses_string_bools(version) if version is not None else None
        try:
            return parse_scheduler_conf(text, string_bools)
        except PayloadError:
            return None

    @cached_property
    def scheduler(self) -> WorkloadView | None:
        ref = self.config.scheduler.deployment
        return self._workload(self.deployments, ref.namespace, ref.name)

    @cached_property
    def scheduler_container(self) -> ContainerView | None:
        ref = self.config.scheduler.deployment
        return self.scheduler.container(ref.container, "scheduler") if self.scheduler else None

    def device_source(self, namespace: str, name: str) -> DeviceConfigSource:
        cm = self.configmap(namespace, name)
        text = ((cm or {}).get("data") or {}).get("device-config.yaml")
        if cm is None or text is None:
            return DeviceConfigSource(namespace, name, cm, None, "missing")
        try:
            return DeviceConfigSource(namespace, name, cm, parse_device_config(text))
        except PayloadError as exc:
            return DeviceConfigSource(namespace, name, cm, None, str(exc))

    @cached_property
    def scheduler_device_config(self) -> DeviceConfigSource:
        """The ConfigMap deviceshare loads (KnownGeometriesCMName/Namespace)."""
        conf = self.scheduler_conf
        ns, name = (
            conf.deviceshare.known_geometries_cm
            if conf
            else ("kube-system", DEFAULT_DEVICE_CONFIG_NAME)
        )
        return self.device_source(ns, name)

    @cached_property
    def scheduler_nvidia(self) -> NvidiaConfig:
        """What the scheduler works with: its ConfigMap's `nvidia:` (zero values if absent), or
        the built-in fallback when the ConfigMap cannot be loaded at all."""
        src = self.scheduler_device_config
        if src.parsed is None:
            return SCHEDULER_FALLBACK_NVIDIA
        return src.parsed.nvidia or NvidiaConfig()

    # --- device plugin ----------------------------------------------------------------------

    @cached_property
    def plugin(self) -> WorkloadView | None:
        ref = self.config.device_plugin
        return self._workload(self.daemonsets, ref.namespace, ref.name)

    @cached_property
    def plugin_container(self) -> ContainerView | None:
        if self.plugin is None:
            return None
        return self.plugin.container(self.config.device_plugin.container, PLUGIN_IMAGE_HINT)

    @cached_property
    def ascend_plugin(self) -> WorkloadView | None:
        ref = self.config.ascend_device_plugin
        return self._workload(self.daemonsets, ref.namespace, ref.name)

    @cached_property
    def dra_plugin(self) -> WorkloadView | None:
        """The kubelet plugin DaemonSet of the DRA driver the operator config's `dra` names
        (None: no `dra` section, or not found)."""
        if self.config.dra is None:
            return None
        ref = self.config.dra.kubelet_plugin_daemon_set
        return self._workload(self.daemonsets, ref.namespace, ref.name)

    @cached_property
    def plugin_namespaces(self) -> tuple[str, ...]:
        """Where the plugin looks for `volcano-vgpu-device-config`, in order (its name is fixed;
        a later plugin takes `--device-config-namespace` / `DEVICE_CONFIG_NAMESPACE`)."""
        c = self.plugin_container
        if c is not None:
            flag = c.flags.get("device-config-namespace")
            if flag is not None and flag.value:
                return (flag.value,)
            if c.env.get("DEVICE_CONFIG_NAMESPACE"):
                return (c.env["DEVICE_CONFIG_NAMESPACE"],)
        return PLUGIN_CM_NAMESPACES

    @cached_property
    def plugin_device_config(self) -> DeviceConfigSource:
        """The ConfigMap the device plugin reads (first namespace where it exists)."""
        for ns in self.plugin_namespaces:
            src = self.device_source(ns, DEFAULT_DEVICE_CONFIG_NAME)
            if src.cm is not None:
                return src
        return self.device_source(self.plugin_namespaces[0], DEFAULT_DEVICE_CONFIG_NAME)

    @cached_property
    def node_config_cm(self) -> Obj | None:
        ref = self.config.node_config
        return self.configmap(ref.namespace, ref.name)

    @cached_property
    def node_config(self) -> NodeConfigFile:
        """config.json as the plugin reads it (unreadable: no entries, every node hami-core)."""
        text = ((self.node_config_cm or {}).get("data") or {}).get(self.config.node_config.key)
        try:
            return parse_node_config(text or "")
        except PayloadError:
            return NodeConfigFile()

    @cached_property
    def owned_node_entries(self) -> dict[str, str]:
        return owned_entries(self.node_config_cm)

    @cached_property
    def hami_vnpu_core(self) -> bool:
        """The global `vnpus.hamiVnpuCore` of the Ascend plugin's ConfigMap (absent: false)."""
        ref = self.config.ascend_vnpu.scheduler_device
        vnpus = vnpus_section(self.configmap(ref.namespace, ref.name), ref.key)
        return isinstance(vnpus, Mapping) and vnpus.get("hamiVnpuCore") is True

    # --- nodes ------------------------------------------------------------------------------

    # What one node says of itself (core.volcano.node_inputs), for the rules as `s.released(n)`
    released = staticmethod(node_inputs.released)
    registered = staticmethod(node_inputs.registered)
    inventory = staticmethod(node_inputs.inventory)
    gpu_indexes = staticmethod(node_inputs.node_gpu_indexes)
    gpu_names = staticmethod(node_inputs.gpu_names)

    @cached_property
    def gpus_by_node(self) -> dict[str, list[int] | None]:
        """The GPU indexes of every managed node (`gpu_indexes`), for node-config entries."""
        return {
            name_of(n): self.gpu_indexes(n)
            for n in self.nodes
            if contract.ANN_CONFIG in annotations_of(n)
        }

    def managed(self, modes: tuple[str, ...]) -> list[Obj]:
        """Nodes the operator manages whose released mode is one of `modes`."""
        out = []
        for node in self.nodes:
            rc = self.released(node)
            if rc is not None and rc.mode in modes:
                out.append(node)
        return out

    @cached_property
    def dra_nodes(self) -> list[Obj]:
        """Managed nodes in a dra pool or on their way there: released or targeted mode dra."""
        out = []
        for node in self.nodes:
            configs = (self.released(node), node_inputs.target(node))
            if any(c is not None and c.mode == "dra" for c in configs):
                out.append(node)
        return out

    def plugin_nodes(self, plugin: contract.DevicePlugin) -> list[Obj]:
        """Managed nodes whose released configuration HAMi's `plugin` must serve."""
        out = []
        for node in self.nodes:
            rc = self.released(node)
            if rc is not None and rc.device_plugin == plugin:
                out.append(node)
        return out

    @cached_property
    def vgpu_nodes(self) -> list[Obj]:
        """Managed nodes HAMi's vGPU plugin serves (hami-core, dynamic MIG; static MIG is
        NVIDIA's plugin's), and (for clusters the operator does not manage) nodes whose plugin
        registered GPUs or that have a node-config entry."""
        managed = self.plugin_nodes("hami")
        names = {name_of(n) for n in managed}
        entries = set(self.node_config.names())
        for node in self.nodes:
            if name_of(node) in names or self.released(node) is not None:
                continue
            if REGISTER_ANNOTATION in annotations_of(node) or name_of(node) in entries:
                managed.append(node)
                names.add(name_of(node))
        return managed

    def is_mig(self, node: Mapping[str, Any]) -> bool:
        """A MIG node of HAMi's plugin (dynamic partitioning): static MIG nodes are served by
        NVIDIA's device plugin, and neither the scheduler's geometries nor HAMi concern them."""
        rc = self.released(node)
        if rc is not None:
            return rc.mode == "mig" and rc.device_plugin == "hami"
        if self.node_config.effective_for(name_of(node)).mode == "mig":
            return True
        return any(g.mode == "mig" for g in self.registered(node) or [])

    @cached_property
    def mig_nodes(self) -> list[Obj]:
        return [n for n in self.nodes if self.is_mig(n)]

    @cached_property
    def mig_gpu_names(self) -> list[str]:
        """NVML names of the GPUs on MIG-mode nodes (what knownMigGeometries must cover)."""
        return sorted({name for n in self.mig_nodes for name in self.gpu_names(n)[0]})

    @cached_property
    def reported_models(self) -> list[ReportedGpuModel]:
        out: dict[str, ReportedGpuModel] = {}
        for node in self.nodes:
            inv = self.inventory(node)
            for model in reported_from_inventory(inv) if inv else []:
                if model.nvml_name not in out or not out[model.nvml_name].profiles:
                    out[model.nvml_name] = model
        return [out[k] for k in sorted(out)]

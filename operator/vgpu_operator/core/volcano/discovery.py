"""Discovery: the operator config's `auto` values, resolved as the components resolve them.

Pure: the inputs are the listed Deployments and DaemonSets and the ConfigMaps named by
`configmaps_to_read`; the output is the config with every `auto` replaced and, per field, the
value and why. Nothing a person renamed is renamed back: a name read from the cluster wins over
the built-in default, which is kept only where the cluster shows nothing.

How each component finds what it reads:
- the Volcano scheduler reads the file named by its `--scheduler-conf` flag (no flag: its
  built-in conf; volcano-sh/volcano@v1.15.1:cmd/scheduler/app/options/options.go), i.e. the
  ConfigMap mounted there in its Deployment;
- the HAMi vGPU plugin reads the device config `volcano-vgpu-device-config` by name (hard-coded)
  from `kube-system`, else `volcano-system`
  (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/util/util.go `LoadConfigFromCM`, the same
  at v1.11.0:pkg/plugin/vgpu/util/util.go), and the node config from the file
  `/config/config.json` (ConfigMap mounted at /config in its DaemonSet);
- the plugin up to v1.11 registers the resource names of its `--resource-name`,
  `--resource-memory-name` and `--resource-core-name` flags; from v1.12 those of the device
  config, which the scheduler reads as well;
- HAMi's Ascend plugin reads the files of its `--config_file` and `--node_config_file` flags
  (Project-HAMi/ascend-device-plugin@v1.4.0:ascend-device-plugin.yaml mounts them by subPath).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from vgpu_operator.core.volcano.render.plugin_args import PLUGIN_IMAGE_HINT
from vgpu_operator.core.volcano.workloads import (
    SCHEDULER_CONF_FLAG,
    FileSource,
    Found,
    explicit,
    file_source,
    flag_value,
    is_ascend_plugin,
    is_scheduler,
    is_vgpu_plugin,
    pick,
)
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.config_errors import ConfigError, validation_issues
from vgpu_operator.models.config_refs import (
    AUTO,
    DEFAULT_CORES_NAME,
    DEFAULT_COUNT_NAME,
    DEFAULT_MEMORY_NAME,
    DEFAULT_MEMORY_PERCENTAGE_NAME,
)
from vgpu_operator.models.volcano import (
    DEFAULT_DEVICE_CONFIG_NAME,
    DEVICE_CONFIG_KEY,
    PLUGIN_CM_NAMESPACES,
    PayloadError,
    parse_device_config,
)
from vgpu_operator.models.volcano_views import WorkloadView, parse_scheduler_conf, workload_view

Obj = Mapping[str, Any]

NODE_CONFIG_FILE = "/config/config.json"  # the HAMi vGPU plugin's per-node file
ASCEND_CONFIG_FLAG, ASCEND_CONFIG_FILE = "config_file", "/device-config.yaml"
ASCEND_NODE_FLAG, ASCEND_NODE_FILE = "node_config_file", "/node-config.yaml"
# Plugin <= v1.11 flags and the resource names they set (config field -> flag).
NAME_FLAGS = {
    "count": "resource-name",
    "memory": "resource-memory-name",
    "cores": "resource-core-name",
}


@dataclass(frozen=True)
class Resolved:
    """One `auto` field: its dotted path in the config, the value it got, and why."""

    field: str
    value: str
    why: str


@dataclass(frozen=True)
class Discovery:
    config: OperatorConfig  # every `auto` replaced
    resolved: tuple[Resolved, ...] = ()
    problems: tuple[str, ...] = ()  # ambiguities and disagreements a person should look at


# --- the resolver ----------------------------------------------------------------------------


@dataclass
class _Inputs:
    config: OperatorConfig
    deployments: list[WorkloadView]
    daemonsets: list[WorkloadView]
    configmaps: dict[tuple[str, str], Obj]

    def scheduler(self) -> Found:
        d = self.config.scheduler.deployment
        return pick(
            self.deployments,
            explicit(d.namespace, d.name),
            is_scheduler,
            "volcano-scheduler",
            "Volcano scheduler Deployment",
        )

    def plugin(self) -> Found:
        d = self.config.device_plugin
        return pick(
            self.daemonsets,
            explicit(d.namespace, d.name),
            is_vgpu_plugin,
            "volcano-device-plugin",
            "HAMi vGPU device plugin DaemonSet",
        )

    def ascend_plugin(self) -> Found:
        d = self.config.ascend_device_plugin
        return pick(
            self.daemonsets,
            explicit(d.namespace, d.name),
            is_ascend_plugin,
            "hami-ascend-device-plugin",
            "HAMi Ascend device plugin DaemonSet",
        )


def _scheduler_conf_source(found: Found) -> tuple[str, FileSource] | None:
    w, c = found.workload, found.container
    if w is None or c is None:
        return None
    path = flag_value(c, SCHEDULER_CONF_FLAG)
    source = file_source(w, c, path) if path else None
    return (w.namespace, source) if source is not None else None


def configmaps_to_read(
    config: OperatorConfig, deployments: Sequence[Obj], daemonsets: Sequence[Obj]
) -> list[tuple[str, str]]:
    """The ConfigMaps discovery reads: the device config wherever the plugin may look, the
    scheduler conf its Deployment mounts (for where it points the device config), and the
    configured device config (for resource names)."""
    inputs = _inputs(config, deployments, daemonsets, ())
    refs = [(ns, DEFAULT_DEVICE_CONFIG_NAME) for ns in PLUGIN_CM_NAMESPACES]
    conf = _scheduler_conf_source(inputs.scheduler())
    if conf is not None:
        refs.append((conf[0], conf[1].configmap))
    dc = config.device_config
    if AUTO not in (dc.namespace, dc.name):
        refs.append(dc.ref())
    return list(dict.fromkeys(refs))


def _inputs(
    config: OperatorConfig,
    deployments: Sequence[Obj],
    daemonsets: Sequence[Obj],
    configmaps: Sequence[Obj],
) -> _Inputs:
    by_ref: dict[tuple[str, str], Obj] = {}
    for cm in configmaps:
        meta = cm.get("metadata") or {}
        by_ref[(str(meta.get("namespace", "")), str(meta.get("name", "")))] = cm
    return _Inputs(
        config,
        [workload_view(d) for d in deployments],
        [workload_view(d) for d in daemonsets],
        by_ref,
    )


class _Result:
    """The updates to the config (by dotted alias path) and why, for the fields that are auto."""

    def __init__(self, config: OperatorConfig) -> None:
        self.wanted = set(config.auto_fields())
        self.values: dict[str, str] = {}
        self.resolved: list[Resolved] = []
        self.problems: list[str] = []

    def set(self, path: str, value: str, why: str) -> None:
        if path in self.wanted and path not in self.values:
            self.values[path] = value
            self.resolved.append(Resolved(path, value, why))

    def any(self, prefix: str) -> bool:
        return any(p.startswith(prefix + ".") for p in self.wanted)


def discover(
    config: OperatorConfig,
    deployments: Sequence[Obj],
    daemonsets: Sequence[Obj],
    configmaps: Sequence[Obj],
) -> Discovery:
    """Resolve every `auto` of `config`. Raises ConfigError (naming the field) when what was
    resolved breaks a rule of the config (e.g. two references resolving to one ConfigMap)."""
    if not config.auto_fields():
        return Discovery(config)
    inputs = _inputs(config, deployments, daemonsets, configmaps)
    out = _Result(config)
    _resolve_scheduler(inputs, out)
    device_config = _resolve_device_config(inputs, out)
    _resolve_plugin(inputs, out, device_config)
    _resolve_ascend(inputs, out)
    _resolve_resource_names(inputs, out, device_config)
    return Discovery(_apply(config, out.values), tuple(out.resolved), tuple(out.problems))


def _resolve_scheduler(inputs: _Inputs, out: _Result) -> None:
    found = inputs.scheduler()
    if found.problem:
        out.problems.append(found.problem)
    default = OperatorConfig().scheduler
    if found.workload is not None:
        w = found.workload
        out.set("scheduler.deployment.namespace", w.namespace, found.why)
        out.set("scheduler.deployment.name", w.name, found.why)
        if found.container is not None:
            out.set("scheduler.deployment.container", found.container.name, found.why)
    else:
        why = f"{found.why}: the default"
        out.set("scheduler.deployment.namespace", default.deployment.namespace, why)
        out.set("scheduler.deployment.name", default.deployment.name, why)
    out.set("scheduler.deployment.container", "", "no scheduler container found: chosen by image")
    conf = _scheduler_conf_source(found)
    if conf is not None:
        ns, source = conf
        c = found.container
        assert c is not None
        why = f"--{SCHEDULER_CONF_FLAG}={flag_value(c, SCHEDULER_CONF_FLAG)} is mounted from it"
        out.set("scheduler.configMap.namespace", ns, why)
        out.set("scheduler.configMap.name", source.configmap, why)
        out.set("scheduler.configMap.key", source.key, why)
        return
    why = (
        "the scheduler's --scheduler-conf names no mounted ConfigMap (it then runs its "
        "built-in conf): the default"
        if found.workload is not None
        else f"{found.why}: the default"
    )
    cm = default.config_map
    for part, value in (("namespace", cm.namespace), ("name", cm.name), ("key", cm.key)):
        out.set(f"scheduler.configMap.{part}", value, why)


def _scheduler_points_at(inputs: _Inputs, out: _Result) -> tuple[str, str] | None:
    """(namespace, name) of the device config the resolved scheduler conf names."""
    sched = inputs.config.scheduler.config_map
    ns = out.values.get("scheduler.configMap.namespace", sched.namespace)
    name = out.values.get("scheduler.configMap.name", sched.name)
    key = out.values.get("scheduler.configMap.key", sched.key)
    text = ((inputs.configmaps.get((ns, name)) or {}).get("data") or {}).get(key)
    if not isinstance(text, str):
        return None
    try:
        return parse_scheduler_conf(text).deviceshare.known_geometries_cm
    except PayloadError:
        return None


def _resolve_device_config(inputs: _Inputs, out: _Result) -> tuple[str, str]:
    """The device config the plugin reads: its hard-coded name, the first of its namespaces
    where it exists. The scheduler must read the same one (the operator points it there)."""
    dc = inputs.config.device_config
    sched = _scheduler_points_at(inputs, out)
    name = dc.name if dc.name != AUTO else DEFAULT_DEVICE_CONFIG_NAME
    why_name = "the name the HAMi plugin reads (hard-coded)"
    out.set("deviceConfig.name", name, why_name)
    out.set("deviceConfig.key", DEVICE_CONFIG_KEY, "the key the plugin and the scheduler read")
    if dc.namespace != AUTO:
        return (dc.namespace, name)
    existing = [ns for ns in PLUGIN_CM_NAMESPACES if (ns, name) in inputs.configmaps]
    if existing:
        ns = existing[0]
        why = f"the plugin reads {ns}/{name} (it looks in {' then '.join(PLUGIN_CM_NAMESPACES)})"
    elif sched is not None and sched[0] in PLUGIN_CM_NAMESPACES:
        ns = sched[0]
        why = f"none exists yet; the scheduler conf names namespace {ns}"
    else:
        ns = PLUGIN_CM_NAMESPACES[0]
        why = "none exists yet: the plugin's first namespace"
    if sched is not None and sched != (ns, name):
        problem = (
            f"the scheduler conf points deviceshare at {sched[0]}/{sched[1]} but the plugin "
            f"reads {ns}/{name}: in enforce mode the operator points the scheduler there"
        )
        why += f"; {problem}"
        out.problems.append(problem)
    out.set("deviceConfig.namespace", ns, why)
    return (ns, name)


def _resolve_plugin(inputs: _Inputs, out: _Result, device_config: tuple[str, str]) -> None:
    found = inputs.plugin()
    if found.problem:
        out.problems.append(found.problem)
    default = OperatorConfig()
    w, c = found.workload, found.container
    if w is not None:
        out.set("devicePlugin.namespace", w.namespace, found.why)
        out.set("devicePlugin.name", w.name, found.why)
    else:
        why = f"{found.why}: the default"
        out.set("devicePlugin.namespace", default.device_plugin.namespace, why)
        out.set("devicePlugin.name", default.device_plugin.name, why)
    if c is not None:
        out.set("devicePlugin.container", c.name, f"the container running {PLUGIN_IMAGE_HINT}")
    else:
        container = default.device_plugin.container or ""
        out.set("devicePlugin.container", container, f"{found.why}: the default")
    source = file_source(w, c, NODE_CONFIG_FILE) if w is not None and c is not None else None
    namespace = w.namespace if w is not None else default.node_config.namespace
    if source is not None and (namespace, source.configmap) != device_config:
        why = f"the plugin reads {NODE_CONFIG_FILE} from it"
        out.set("nodeConfig.namespace", namespace, why)
        out.set("nodeConfig.name", source.configmap, why)
        out.set("nodeConfig.key", source.key, why)
        return
    why = (
        f"the plugin mounts no node config at {NODE_CONFIG_FILE} (every node is then "
        "hami-core): the default name in the plugin's namespace"
        if w is not None
        else f"{found.why}: the default"
    )
    nc = default.node_config
    for part, value in (("namespace", namespace), ("name", nc.name), ("key", nc.key)):
        out.set(f"nodeConfig.{part}", value, why)


def _resolve_ascend(inputs: _Inputs, out: _Result) -> None:
    if not (out.any("ascendDevicePlugin") or out.any("ascendNodeConfig")) and not out.any(
        "ascendVnpu.schedulerDevice"
    ):
        return
    found = inputs.ascend_plugin()
    if found.problem:
        out.problems.append(found.problem)
    default = OperatorConfig()
    w, c = found.workload, found.container
    if w is not None:
        out.set("ascendDevicePlugin.namespace", w.namespace, found.why)
        out.set("ascendDevicePlugin.name", w.name, found.why)
        out.set("ascendDevicePlugin.container", c.name if c else "", found.why)
    else:
        why = f"{found.why}: the default"
        out.set("ascendDevicePlugin.namespace", default.ascend_device_plugin.namespace, why)
        out.set("ascendDevicePlugin.name", default.ascend_device_plugin.name, why)
        out.set("ascendDevicePlugin.container", "", why)
    targets = (
        ("ascendNodeConfig", ASCEND_NODE_FLAG, ASCEND_NODE_FILE, default.ascend_node_config),
        (
            "ascendVnpu.schedulerDevice",
            ASCEND_CONFIG_FLAG,
            ASCEND_CONFIG_FILE,
            default.ascend_vnpu.scheduler_device,
        ),
    )
    for prefix, flag, file, fallback in targets:
        path = (flag_value(c, flag) if c is not None else None) or file
        source = file_source(w, c, path) if w is not None and c is not None else None
        if source is not None and w is not None:
            why = f"the Ascend plugin reads {path} from it"
            values = (w.namespace, source.configmap, source.key)
        else:
            why = f"no ConfigMap mounted at {path} of the Ascend plugin: the default"
            values = (fallback.namespace, fallback.name, fallback.key)
        for part, value in zip(("namespace", "name", "key"), values, strict=True):
            out.set(f"{prefix}.{part}", value, why)


def _resolve_resource_names(inputs: _Inputs, out: _Result, device_config: tuple[str, str]) -> None:
    if not out.any("resourceNames"):
        return
    key = out.values.get("deviceConfig.key", inputs.config.device_config.key)
    text = ((inputs.configmaps.get(device_config) or {}).get("data") or {}).get(key)
    in_cm: dict[str, str] = {}
    where = f"{device_config[0]}/{device_config[1]}"
    if isinstance(text, str):
        try:
            nvidia = parse_device_config(text).nvidia
        except PayloadError as exc:
            out.problems.append(f"resource names: {where} cannot be read ({exc})")
            nvidia = None
        if nvidia is not None:
            count, memory, percentage, cores = nvidia.resource_names()
            in_cm = {
                k: v
                for k, v in (
                    ("count", count),
                    ("memory", memory),
                    ("memoryPercentage", percentage),
                    ("cores", cores),
                )
                if v
            }
    found = inputs.plugin()
    flags = found.container.flags if found.container is not None else {}
    defaults = {
        "count": DEFAULT_COUNT_NAME,
        "memory": DEFAULT_MEMORY_NAME,
        "memoryPercentage": DEFAULT_MEMORY_PERCENTAGE_NAME,
        "cores": DEFAULT_CORES_NAME,
    }
    for name, default in defaults.items():
        flag_name = NAME_FLAGS.get(name)
        flag = flags.get(flag_name) if flag_name else None
        from_flag = flag.value if flag is not None else None
        path = f"resourceNames.{name}"
        if name in in_cm:
            why = f"the device config {where} names it"
            if from_flag and from_flag != in_cm[name]:
                problem = (
                    f"{path}: the device config says {in_cm[name]} but the plugin's "
                    f"--{flag_name} registers {from_flag}"
                )
                out.problems.append(problem)
                why += f" ({problem})"
            out.set(path, in_cm[name], why)
        elif from_flag:
            out.set(path, from_flag, f"the plugin's --{flag_name} registers it")
        else:
            out.set(path, default, "neither the device config nor a plugin flag names it")


def _apply(config: OperatorConfig, values: Mapping[str, str]) -> OperatorConfig:
    """The config with `values` (dotted alias paths) put in, validated again as a whole."""
    data = config.model_dump(by_alias=True, exclude_none=True)
    for path, value in values.items():
        *parents, leaf = path.split(".")
        node = data
        for part in parents:
            node = node[part]
        if value:
            node[leaf] = value
        else:
            node.pop(leaf, None)  # an empty container: chosen by image
    try:
        return OperatorConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_issues(exc, OperatorConfig)) from exc


def describe(discovery: Discovery) -> list[str]:
    """One line per resolved field (what the log and `doctor` print)."""
    return [f"{r.field} = {r.value or '(by image)'}  ({r.why})" for r in discovery.resolved]

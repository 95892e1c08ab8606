"""Rules on the vGPU device plugin's names and flags: the resource names it registers
(Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/rm/rm.go, `volcano.sh/` prepended by
api/config/v1/resources.go `NewResourceName`; up to v1.11 from its flags, cmd/vgpu/main.go)
against those the scheduler counts (volcano-sh/volcano@v1.15.1:
pkg/scheduler/api/devices/config/vgpu.go `NvidiaConfig`), and flags that override its ConfigMap.
Where the plugin DaemonSets run and what they mount is `plugin_daemonsets`; the per-node values
old plugins ignore, `versions`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from vgpu_operator.core.rules.base import Issue, ObjectRef, cm_ref, error, info, rule, warning
from vgpu_operator.core.volcano import component_versions
from vgpu_operator.core.volcano.config_adoption import NUMERIC_FLAG_DEFAULTS
from vgpu_operator.core.volcano.render.plugin_args import desired_flags
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.volcano import VOLCANO_PREFIX
from vgpu_operator.models.volcano_views import Version

DEFAULT_FLAG_NAMES = ("volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores")
NUMERIC_FLAGS = {
    "device-split-count": "deviceSplitCount",
    "device-cores-scaling": "deviceCoreScaling",
    "gpu-memory-factor": "gpuMemoryFactor",
}


@dataclass(frozen=True)
class PluginNames:
    count: str
    memory: str
    cores: str
    source: str  # "flags" or "ConfigMap ns/name"


def registered_name(name: str, version: Version | None) -> str:
    """The kubelet resource name a plugin registers for a configured name (`NewResourceName`,
    Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:api/config/v1/resources.go)."""
    prefixes = version is None or component_versions.plugin_prefixes_names(version)
    if prefixes and name and not name.startswith(VOLCANO_PREFIX):
        return VOLCANO_PREFIX + name
    return name


def plugin_names(s: ClusterSnapshot) -> PluginNames | None:
    """The kubelet resource names the vGPU plugin registers, or None without a plugin."""
    c = s.plugin_container
    if c is None:
        return None
    v = c.version
    if v is not None and component_versions.plugin_takes_name_flags(v):
        flags = c.flags
        values: list[str] = [
            flags[f].value or default if f in flags else default
            for f, default in zip(
                ("resource-name", "resource-memory-name", "resource-core-name"),
                DEFAULT_FLAG_NAMES,
                strict=True,
            )
        ]
        return PluginNames(values[0], values[1], values[2], "flags")
    src = s.plugin_device_config
    n = src.nvidia
    if n is None:
        return None
    return PluginNames(
        registered_name(n.resource_count_name or "", v),
        registered_name(n.resource_memory_name or "", v),
        registered_name(n.resource_core_name or "", v),
        f"ConfigMap {src.namespace}/{src.name}",
    )


def plugin_ref(s: ClusterSnapshot) -> ObjectRef:
    """The vGPU device plugin DaemonSet the operator config names."""
    ref = s.config.device_plugin
    return ObjectRef(kind="DaemonSet", name=ref.name, namespace=ref.namespace)


@rule("plugin-resource-name-flags", "plugin ≤ v1.11 registers the names the scheduler counts")
def check_name_flags(s: ClusterSnapshot) -> Iterator[Issue]:
    c = s.plugin_container
    if c is None or c.version is None or not component_versions.plugin_takes_name_flags(c.version):
        return
    names = plugin_names(s)
    assert names is not None
    sched = s.scheduler_nvidia
    src = s.scheduler_device_config
    pairs = [("--resource-name", names.count, sched.resource_count_name or "", "resourceCountName")]
    if c.version >= Version(1, 9, 4):
        pairs.append(
            (
                "--resource-memory-name",
                names.memory,
                sched.resource_memory_name or "",
                "resourceMemoryName",
            )
        )
        pairs.append(
            (
                "--resource-core-name",
                names.cores,
                sched.resource_core_name or "",
                "resourceCoreName",
            )
        )
    wanted = desired_flags(c.version, s.config)
    for flag, plugin_value, sched_value, key in pairs:
        if plugin_value == sched_value:
            continue
        given = flag.lstrip("-") in c.flags
        yield error(
            plugin_ref(s),
            f"plugin {c.version} registers {plugin_value} "
            f"({flag} {'given' if given else 'not given: its default'}), but the scheduler "
            f"counts {sched_value or '(nothing)'} (from {src.namespace}/{src.name}"
            f"{'' if src.parsed else ', built-in default'}): pods requesting either are bound "
            "without device annotations and fail with UnexpectedAdmissionError (device request "
            "not found)",
            fix=f"make them agree (the plugin's flag, the scheduler's ConfigMap and the pod's "
            "request must name the same resource): pass "
            f"{flag}={wanted[flag.lstrip('-')]} and keep {key} of the scheduler's ConfigMap the "
            f"same, or, if {plugin_value} is intended, point the scheduler at a ConfigMap whose "
            f"{key} is {plugin_value}",
            fixable=True,
        )


@rule("plugin-config-flags-override", "no plugin flag silently overrides the ConfigMap")
def check_flag_override(s: ClusterSnapshot) -> Iterator[Issue]:
    c = s.plugin_container
    n = s.plugin_device_config.nvidia
    if c is None or n is None:
        return
    always = c.version is not None and component_versions.plugin_flags_always_override(c.version)
    for flag, key in NUMERIC_FLAGS.items():
        cm_value = {
            "deviceSplitCount": n.device_split_count,
            "deviceCoreScaling": n.device_core_scaling,
            "gpuMemoryFactor": n.gpu_memory_factor,
        }[key]
        given = c.flags.get(flag)
        if given is None and not always:
            continue
        if (
            given is None
            and key == "gpuMemoryFactor"
            and not component_versions.plugin_takes_memory_factor_flag(c.version or Version(0, 0))
        ):
            continue  # no such flag before v1.9.4
        try:
            value = float(given.value) if given and given.value else NUMERIC_FLAG_DEFAULTS[flag]
        except ValueError:
            continue
        if cm_value is not None and float(cm_value) == value:
            if given is not None and not always:
                yield info(
                    plugin_ref(s),
                    f"--{flag}={given.value} is given explicitly: later edits of {key} in the "
                    "ConfigMap will be ignored by the plugin",
                    fix=f"remove --{flag} from the plugin's args",
                )
            continue
        how = "given" if given is not None else "not given, so its default applies:"
        yield warning(
            plugin_ref(s),
            f"--{flag} is {how} {value:g}, which overrides {key}="
            f"{cm_value if cm_value is not None else '(unset)'} of the ConfigMap on every node "
            "without its own node-config value",
            fix=f"set --{flag} to the ConfigMap's value"
            if always
            else f"remove --{flag} from the plugin's args",
            fixable=always,
        )


@rule("plugin-resource-name-prefix", "resource names are in volcano.sh/ (plugin ≥ v1.12)")
def check_prefix(s: ClusterSnapshot) -> Iterator[Issue]:
    c = s.plugin_container
    n = s.plugin_device_config.nvidia
    if c is None or n is None:
        return
    if c.version is not None and not component_versions.plugin_prefixes_names(c.version):
        return
    src = s.plugin_device_config
    for key, name in (
        ("resourceCountName", n.resource_count_name),
        ("resourceMemoryName", n.resource_memory_name),
        ("resourceCoreName", n.resource_core_name),
    ):
        if name and not name.startswith(VOLCANO_PREFIX):
            assumed = "" if c.version else " (version unknown from the image tag: assumed ≥ v1.12)"
            yield error(
                (plugin_ref(s), cm_ref(src.namespace, src.name)),
                f"{key} is {name}: the plugin{assumed} registers it as {VOLCANO_PREFIX}{name}, "
                "not the name pods request and the scheduler counts",
                fix="use a volcano.sh/ name (the defaults volcano.sh/vgpu-* are safest)",
            )

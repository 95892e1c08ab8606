"""Device plugin arguments, for the plugin versions that take their settings from flags.

Plugins up to v1.11 register kubelet resources under `--resource-name`,
`--resource-memory-name` and `--resource-core-name` only (the ConfigMap names are the
scheduler's), and their `--device-split-count`, `--device-cores-scaling` and
`--gpu-memory-factor` always override the ConfigMap (flag defaults 2 / 1.0 / 1;
Project-HAMi/volcano-vgpu-device-plugin@v1.11.0:pkg/plugin/vgpu/util/util.go `GlobalFlagSet`; the
docs/from-a-hand-configured-cluster.md's seed 002 section is such a cluster). For those versions
the operator owns these flags and
sets them to the configured values; `--gpu-memory-factor` exists from v1.9.4
(Project-HAMi/volcano-vgpu-device-plugin@v1.9.4:cmd/vgpu/main.go; absent in v1.9.0). From v1.12 the
names come from the ConfigMap and the three numeric flags override it only when given: nothing here
to own (rules report explicit overrides).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_operator.core.volcano import config_adoption
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.volcano_views import (
    ContainerView,
    Version,
    parse_flags,
    workload_view,
)

PLUGIN_IMAGE_HINT = "volcano-vgpu-device-plugin"
LAST_FLAG_VERSION = Version(1, 11, 99)  # the last minor whose names come from flags


def plugin_container(daemonset: Mapping[str, Any], config: OperatorConfig) -> ContainerView | None:
    view = workload_view(daemonset)
    return view.container(config.device_plugin.container, PLUGIN_IMAGE_HINT)


def takes_name_flags(version: Version | None) -> bool:
    return version is not None and version <= LAST_FLAG_VERSION


def desired_flags(version: Version, config: OperatorConfig) -> dict[str, str]:
    """The flags a plugin of `version` needs for the configured values (≤ v1.11 only)."""
    names = config.resource_names
    d = config.device_defaults
    flags = {"resource-name": names.count}
    if version >= Version(1, 9, 4):
        flags["resource-memory-name"] = names.memory
        flags["resource-core-name"] = names.cores
    flags["device-split-count"] = str(d.device_split_count)
    flags["device-cores-scaling"] = _num(d.device_core_scaling)
    if version >= Version(1, 9, 4):  # the flag exists from v1.9.4 (cmd/vgpu/main.go)
        flags["gpu-memory-factor"] = str(config.memory_factor)
    return flags


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True)
class ArgsPatch:
    container: str
    args: list[str]  # the container's new `args`


def render_plugin_args(daemonset: Mapping[str, Any], config: OperatorConfig) -> ArgsPatch | None:
    """The plugin container's new `args`, or None (unchanged, or a version that takes its
    settings from the ConfigMap, or an unknown version: nothing is changed on a guess)."""
    container = plugin_container(daemonset, config)
    if container is None or not takes_name_flags(container.version):
        return None
    assert container.version is not None
    args = list(container.arg_list)
    present = parse_flags(container.args)
    in_args = parse_flags(args)
    changed = False
    for name, value in desired_flags(container.version, config).items():
        current = present.get(name)
        if current is not None and current.value == value:
            continue
        if current is None and config_adoption.flag_is_default(name, value):
            continue  # the plugin already uses it: nothing it reads changes
        flag = in_args.get(name)
        if flag is None:
            args.append(f"--{name}={value}")  # also overrides a value set in `command`
        elif flag.inline:
            dashes = args[flag.index][: len(args[flag.index]) - len(args[flag.index].lstrip("-"))]
            args[flag.index] = f"{dashes}{name}={value}"
        else:
            args[flag.index + 1] = value
        changed = True
    return ArgsPatch(container.name, args) if changed else None

"""Per-node values a HAMi device plugin ≤ v1.11 cannot apply are refused, not rolled. Pure.

Up to v1.11 the plugin registers every GPU with its flags' split count and core scaling, and
every GPU, whatever the node's `config.json` entry says
(`component_versions.plugin_reads_node_overrides`).
Rolled, such a change replaces a node's plugin pod, finds the registration unchanged and fails
the node. So a policy whose `spec.hamiCore.deviceSplitCount`, `deviceCoreScaling` or
`filterDevices` differs from what the plugin uses is *refused* as a whole while that holds: it is
held as if suspended (its nodes keep their released configuration, no node is taken, cordoned,
drained or has its plugin replaced; a node newly selected waits too), and its status says
Stalled with reason `PluginIgnoresNodeValues`, the field, the plugin's value and the fix. A
policy being deleted is never refused (its nodes leave as any deletion's do).

What the plugin uses: in `enforce` mode the flags the operator renders
(`core.volcano.render.plugin_args`: the operator config's `deviceDefaults`), otherwise the flags the
DaemonSet runs with (the plugin's defaults where absent,
Project-HAMi/volcano-vgpu-device-plugin@v1.11.0:pkg/plugin/vgpu/util/util.go `GlobalFlagSet`).
An image without a version tag, or a DaemonSet that is not HAMi's plugin, refuses nothing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.nodes.validate import REFUSED_REASON, ParsedPolicy, Problem
from vgpu_operator.core.volcano import component_versions
from vgpu_operator.core.volcano.config_adoption import NUMERIC_FLAG_DEFAULTS
from vgpu_operator.core.volcano.plugin_identity import is_hami_plugin
from vgpu_operator.core.volcano.render.plugin_args import desired_flags, plugin_container
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.policy import VGPUNodePolicy
from vgpu_operator.models.volcano_views import ContainerView, Version

__all__ = [
    "PluginNodeValues",
    "flag_values",
    "plugin_node_values",
    "refusals",
    "refuse_ignored",
    "snapshot_plugin_values",
]

SPLIT_FLAG, CORES_FLAG = "device-split-count", "device-cores-scaling"


def flag_values(container: ContainerView) -> dict[str, float]:
    """The plugin's split count and core scaling as its flags give them (defaults if absent
    or not a number)."""
    flags = container.flags
    out: dict[str, float] = {}
    for name in (SPLIT_FLAG, CORES_FLAG):
        default = NUMERIC_FLAG_DEFAULTS[name]
        given = flags.get(name)
        try:
            out[name] = float(given.value) if given is not None and given.value else default
        except ValueError:
            out[name] = default
    return out


@dataclass(frozen=True)
class PluginNodeValues:
    """What a HAMi plugin ≤ v1.11 registers every GPU with, whatever a node-config entry says."""

    daemonset: str  # namespace/name
    version: Version
    split_count: float
    core_scaling: float
    rendered: bool  # the operator sets the flags (enforce mode): the values are deviceDefaults


def plugin_node_values(
    daemonset: Mapping[str, Any] | None, config: OperatorConfig
) -> PluginNodeValues | None:
    """The values of the configured plugin DaemonSet when it ignores per-node values, else None
    (no DaemonSet, not HAMi's plugin, no version in its image tag, or v1.12.0 and later)."""
    if daemonset is None or not is_hami_plugin(daemonset):
        return None
    container = plugin_container(daemonset, config)
    version = container.version if container is not None else None
    if (
        container is None
        or version is None
        or component_versions.plugin_reads_node_overrides(version)
    ):
        return None
    values = flag_values(container)
    rendered = config.mode == "enforce"
    if rendered:  # the configuration pass sets these flags (core.volcano.render.plugin_args)
        wanted = desired_flags(version, config)
        for name in (SPLIT_FLAG, CORES_FLAG):
            values[name] = float(wanted[name])
    meta = daemonset.get("metadata") or {}
    return PluginNodeValues(
        daemonset=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        version=version,
        split_count=values[SPLIT_FLAG],
        core_scaling=values[CORES_FLAG],
        rendered=rendered,
    )


def snapshot_plugin_values(s: ClusterSnapshot) -> PluginNodeValues | None:
    """`plugin_node_values` of the DaemonSet the operator config names, in a snapshot."""
    return plugin_node_values(
        s.daemonset(s.config.device_plugin.namespace, s.config.device_plugin.name), s.config
    )


def refusals(policy: VGPUNodePolicy, plugin: PluginNodeValues) -> list[Problem]:
    """Each `spec.hamiCore` field of the policy the plugin would not apply, with the fix."""
    spec = policy.spec
    mig = spec.effective_mig()
    hc = spec.hami_core
    served = contract.device_plugin_for(spec.mode, mig.partitioning if mig else None) == "hami"
    if hc is None or not served:
        return []
    who = f"device plugin {plugin.daemonset} {plugin.version}"
    upgrade = "upgrade the device plugin to v1.12.0 or later (it reads per-node values)"
    out: list[Problem] = []
    pairs = (
        ("deviceSplitCount", hc.device_split_count, plugin.split_count, SPLIT_FLAG),
        ("deviceCoreScaling", hc.device_core_scaling, plugin.core_scaling, CORES_FLAG),
    )
    for name, value, uses, flag in pairs:
        if not value or float(value) == uses:
            continue
        setting = (
            f"the operator config's deviceDefaults.{name} (the operator sets --{flag} from it)"
            if plugin.rendered
            else f"--{flag} on {plugin.daemonset}"
        )
        out.append(
            Problem(
                field=f"spec.hamiCore.{name}",
                reason=REFUSED_REASON,
                message=f"{value:g} cannot take effect: {who} registers every GPU with "
                f"--{flag}={uses:g}, whatever the node config says; the change is refused (no "
                "node is taken, its nodes keep their configuration)",
                fix=f"{upgrade}, or set spec.hamiCore.{name} to {uses:g} (or remove it); to "
                f"change every node, change {setting}",
            )
        )
    fd = hc.filter_devices
    if fd is not None and (fd.uuid or fd.index):
        out.append(
            Problem(
                field="spec.hamiCore.filterDevices",
                reason=REFUSED_REASON,
                message=f"cannot take effect: {who} registers every GPU of the node; the change "
                "is refused (no node is taken, its nodes keep their configuration)",
                fix=f"{upgrade}, or remove spec.hamiCore.filterDevices",
            )
        )
    return out


def refuse_ignored(
    policies: Iterable[ParsedPolicy], plugin: PluginNodeValues | None
) -> list[ParsedPolicy]:
    """The policies, each one the plugin cannot apply marked refused (held as if suspended,
    `ParsedPolicy.refuse_for`: a policy being deleted, or invalid, is left as it is)."""
    if plugin is None:
        return list(policies)
    values = plugin
    return [p.refuse_for(lambda policy: refusals(policy, values)) for p in policies]

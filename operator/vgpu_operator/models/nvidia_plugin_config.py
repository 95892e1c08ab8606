"""NVIDIA's k8s-device-plugin configuration: which extended resource names the plugin may
advertise, read from the ConfigMap the operator config names (`nvidiaDevicePluginConfig`).

The ConfigMap is the one the GPU Operator's ClusterPolicy names (`spec.devicePlugin.config.name`,
https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html) or the
plugin's chart builds (`config.map`, or `config.name` for one of your own): one named config per
data key, a node picking one by its `nvidia.com/device-plugin.config` label
(NVIDIA/k8s-device-plugin@v0.17.0:README.md, "Passing configuration to the plugin via a
ConfigMap"). Which key a node uses is the plugin's business: the operator reads every key (or
only `key`, when the reference names one) and takes the union, so a pod asking any name one of
them advertises is a GPU consumer.

A config (NVIDIA/k8s-device-plugin@v0.17.0:api/config/v1/config.go `Config`) may name resources
in three places: `sharing.timeSlicing.resources[]` and `sharing.mps.resources[]`
(api/config/v1/sharing.go, replicas.go `ReplicatedResource`: `name`, `rename`; with
`renameByDefault: true` a resource without `rename` is advertised as `<name>.shared`,
`DefaultSharedRename`), and `resources.gpus[]`/`resources.mig[]` (resources.go `Resource.name`).
Every such name is a `ResourceName`, qualified with `nvidia.com/` unless it already is
(resources.go `NewResourceName`). The plugin of that tag ignores a `rename` and the `resources`
section (config.go `DisableResourceNamingInConfig`: "may be reenabled in a future release");
the operator counts them all the same: a name too many only makes a pod a GPU consumer, a name
too few could destroy its GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from vgpu_operator import yamlsafe
from vgpu_operator.models.config_refs import ConfigModel, DataKey, Namespace, ObjectName, fix_hint

PREFIX = "nvidia.com/"  # api/config/v1/consts.go ResourceNamePrefix
SHARED_SUFFIX = ".shared"  # api/config/v1/consts.go DefaultSharedResourceNameSuffix
VERSION = "v1"
SHARING_STRATEGIES = ("timeSlicing", "mps")


class NvidiaPluginConfigRef(ConfigModel):
    """The ConfigMap holding NVIDIA's device plugin configs; `key` unset: every key."""

    namespace: Namespace
    name: ObjectName
    key: DataKey | None = Field(
        default=None,
        json_schema_extra=fix_hint(
            "use a ConfigMap data key (letters, digits, '-', '_' and '.'), or leave it out to "
            "read every config in the ConfigMap"
        ),
    )

    def ref(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class PluginConfigNames:
    """The resource names the plugin's configs may advertise, and what could not be read
    (`<key>: <why>`; a config that cannot be read adds no name)."""

    names: frozenset[str] = frozenset()
    problems: tuple[str, ...] = ()


def resource_name(raw: str) -> str:
    """A name as the plugin qualifies it (resources.go `NewResourceName`)."""
    return raw if raw.startswith(PREFIX) else PREFIX + raw


def _named(items: Any) -> Iterable[Mapping[str, Any]]:
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _sharing_names(replicated: Mapping[str, Any]) -> set[str]:
    """`name`, `rename` and (renameByDefault) `<name>.shared` of each replicated resource."""
    out: set[str] = set()
    by_default = replicated.get("renameByDefault") is True
    for resource in _named(replicated.get("resources")):
        name = _text(resource.get("name"))
        if name is None:
            continue
        out.add(resource_name(name))
        rename = _text(resource.get("rename"))
        if rename is not None:
            out.add(resource_name(rename))
        if by_default:
            out.add(resource_name(name) + SHARED_SUFFIX)
    return out


def advertised_names(text: str) -> frozenset[str]:
    """Every resource name one config may make the plugin advertise; ValueError when the
    plugin would not read it (not YAML, not a mapping, another version)."""
    try:
        doc = yamlsafe.load(text) if text.strip() else {}
    except yamlsafe.YamlRefused as exc:
        raise ValueError("not YAML the plugin reads: " + " ".join(str(exc).split())) from exc
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise ValueError(f"a config is a mapping, not {type(doc).__name__}")
    version = doc.get("version")
    if version not in (None, "", VERSION):
        raise ValueError(f"unknown version {version!r} (the plugin reads {VERSION})")
    out: set[str] = set()
    sharing = doc.get("sharing")
    if isinstance(sharing, Mapping):
        for strategy in SHARING_STRATEGIES:
            replicated = sharing.get(strategy)
            if isinstance(replicated, Mapping):
                out |= _sharing_names(replicated)
    resources = doc.get("resources")
    if isinstance(resources, Mapping):
        for part in ("gpus", "mig"):
            names = (_text(r.get("name")) for r in _named(resources.get(part)))
            out |= {resource_name(n) for n in names if n is not None}
    return frozenset(out)


def configmap_names(cm: Mapping[str, Any] | None, key: str | None = None) -> PluginConfigNames:
    """The union over the ConfigMap's configs (only `key`'s when given)."""
    if cm is None:
        return PluginConfigNames(problems=("the ConfigMap is not there",))
    data = cm.get("data") or {}
    if not isinstance(data, Mapping):
        return PluginConfigNames(problems=("its data is not a mapping",))
    if key is not None and key not in data:
        return PluginConfigNames(problems=(f"{key}: no such key",))
    names: set[str] = set()
    problems: list[str] = []
    for k in sorted(data) if key is None else [key]:
        try:
            names |= advertised_names(str(data[k] or ""))
        except ValueError as exc:
            problems.append(f"{k}: {exc}")
    return PluginConfigNames(frozenset(names), tuple(problems))

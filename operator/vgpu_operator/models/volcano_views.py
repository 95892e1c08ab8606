"""Read-only views of objects the operator does not own the format of: the Volcano scheduler conf
(its deviceshare arguments), and DaemonSets/Deployments (container image tag = version, args
as flags, placement). Values are typed the way Volcano reads them (`framework.Arguments.GetBool`):
up to v1.14 a deviceshare switch counts only when it is a YAML boolean (a quoted "true" is
ignored); from v1.15.0 a string is parsed with Go's `strconv.ParseBool`
(volcano-sh/volcano@v1.15.0:pkg/scheduler/framework/arguments.go).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from vgpu_operator.models.volcano import DEFAULT_DEVICE_CONFIG_NAME, load_yaml_mapping

# --- versions -------------------------------------------------------------------------------

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


class Version(NamedTuple):
    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, tag: str | None) -> Version | None:
        if not tag:
            return None
        m = _VERSION.match(tag.strip())
        if not m:
            return None
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))

    def __str__(self) -> str:
        return f"v{self.major}.{self.minor}.{self.patch}"


def image_tag(image: str) -> str | None:
    """`repo/name:tag` -> tag; a digest-only or untagged image has none."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


# --- command-line flags ---------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    name: str  # without leading dashes
    value: str | None  # None: a bare switch
    index: int  # position of the flag in the argument list
    inline: bool  # `--name=value` (True) or `--name value` (False)


def parse_flags(args: Sequence[str]) -> dict[str, Flag]:
    """`--a=b`, `-a=b`, `--a b` and bare `--a`; a later occurrence wins (as with Go flags)."""
    out: dict[str, Flag] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-") and arg not in ("-", "--"):
            body = arg.lstrip("-")
            if "=" in body:
                name, value = body.split("=", 1)
                out[name] = Flag(name, value, i, True)
            elif i + 1 < len(args) and not args[i + 1].startswith("-"):
                out[body] = Flag(body, args[i + 1], i, False)
                i += 1
            else:
                out[body] = Flag(body, None, i, True)
        i += 1
    return out


# --- scheduler conf -------------------------------------------------------------------------


@dataclass(frozen=True)
class PluginEntry:
    name: str
    tier: int
    position: int
    options: Mapping[str, Any]
    arguments: Mapping[str, Any]


# Go's strconv.ParseBool: exactly these spellings, anything else is an error.
_GO_BOOLS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}


def go_parse_bool(text: str) -> bool | None:
    """`strconv.ParseBool(text)`; None where Go returns an error."""
    return _GO_BOOLS.get(text)


@dataclass(frozen=True)
class DeviceshareArgs:
    """The deviceshare plugin's arguments, read as Volcano reads them.

    `string_bools`: whether the scheduler parses a string switch with `strconv.ParseBool` (True
    from v1.15.0), or only takes YAML booleans (False, up to v1.14), or unknown (None: the image
    tag names no version). A switch the scheduler cannot read keeps its default, false.
    """

    raw: Mapping[str, Any] = field(default_factory=dict)
    string_bools: bool | None = False

    def _readings(self, key: str) -> set[bool]:
        """What the switch can be read as, over the possible semantics (one value when known)."""
        value = self.raw.get(f"deviceshare.{key}")
        if isinstance(value, bool):
            return {value}
        parsed = go_parse_bool(value) if isinstance(value, str) else None
        if parsed is None or self.string_bools is False:
            return {False}
        return {parsed} if self.string_bools else {parsed, False}

    def flag(self, key: str) -> bool:
        """The scheduler surely reads the switch as true."""
        return self._readings(key) == {True}

    def maybe(self, key: str) -> bool:
        """The scheduler may read the switch as true (the same as `flag` when its version is
        known; with an unknown version, a string the newer versions parse as true)."""
        return True in self._readings(key)

    def mistyped(self, key: str) -> bool:
        """Set, but not a value this scheduler reads as a boolean: Volcano logs a warning and
        keeps the default (false)."""
        full = f"deviceshare.{key}"
        if full not in self.raw or isinstance(self.raw[full], bool):
            return False
        value = self.raw[full]
        readable = isinstance(value, str) and go_parse_bool(value) is not None
        return not (readable and self.string_bools is True)

    def string(self, key: str, default: str) -> str:
        value = self.raw.get(f"deviceshare.{key}")
        return value if isinstance(value, str) else default

    @property
    def vgpu_enable(self) -> bool:
        return self.flag("VGPUEnable")

    @property
    def gpu_sharing_enable(self) -> bool:
        return self.flag("GPUSharingEnable")

    @property
    def gpu_number_enable(self) -> bool:
        return self.flag("GPUNumberEnable")

    @property
    def ascend_hami_vnpu_enable(self) -> bool:
        return self.flag("AscendHAMiVNPUEnable")

    @property
    def ascend_mindcluster_vnpu_enable(self) -> bool:
        return self.flag("AscendMindClusterVNPUEnable")

    @property
    def known_geometries_cm(self) -> tuple[str, str]:
        """(namespace, name) of the device ConfigMap the scheduler loads once per process."""
        return (
            self.string("KnownGeometriesCMNamespace", "kube-system"),
            self.string("KnownGeometriesCMName", DEFAULT_DEVICE_CONFIG_NAME),
        )


@dataclass(frozen=True)
class SchedulerConfView:
    raw: Mapping[str, Any]
    plugins: tuple[PluginEntry, ...]
    configurations: tuple[Mapping[str, Any], ...]
    string_bools: bool | None = False  # see DeviceshareArgs

    def plugins_named(self, name: str) -> list[PluginEntry]:
        return [p for p in self.plugins if p.name == name]

    def plugin(self, name: str) -> PluginEntry | None:
        found = self.plugins_named(name)
        return found[0] if found else None

    @property
    def deviceshare(self) -> DeviceshareArgs:
        plugin = self.plugin("deviceshare")
        return DeviceshareArgs(plugin.arguments if plugin else {}, self.string_bools)

    def configuration(self, name: str) -> Mapping[str, Any] | None:
        """The `arguments` of a `configurations:` entry (e.g. init-params)."""
        for conf in self.configurations:
            if conf.get("name") == name:
                args = conf.get("arguments")
                return args if isinstance(args, Mapping) else {}
        return None


def parse_scheduler_conf(text: str, string_bools: bool | None = False) -> SchedulerConfView:
    """`volcano-scheduler.conf`; raises PayloadError when it is not a YAML mapping.
    `string_bools`: how the scheduler reads string switches (see DeviceshareArgs)."""
    raw = load_yaml_mapping(text, "volcano-scheduler.conf")
    plugins: list[PluginEntry] = []
    tiers = raw.get("tiers")
    for t, tier in enumerate(tiers if isinstance(tiers, list) else []):
        entries = tier.get("plugins") if isinstance(tier, Mapping) else None
        for p, plugin in enumerate(entries if isinstance(entries, list) else []):
            if not isinstance(plugin, Mapping) or not isinstance(plugin.get("name"), str):
                continue
            args = plugin.get("arguments")
            plugins.append(
                PluginEntry(
                    name=plugin["name"],
                    tier=t,
                    position=p,
                    options={k: v for k, v in plugin.items() if k not in ("name", "arguments")},
                    arguments=args if isinstance(args, Mapping) else {},
                )
            )
    confs = raw.get("configurations")
    configurations = tuple(c for c in (confs or []) if isinstance(c, Mapping))
    return SchedulerConfView(
        raw=raw, plugins=tuple(plugins), configurations=configurations, string_bools=string_bools
    )


# --- workloads (DaemonSets, Deployments) ----------------------------------------------------


@dataclass(frozen=True)
class ContainerView:
    name: str
    image: str
    args: tuple[str, ...]  # command + args, as the process sees them
    arg_list: tuple[str, ...]  # `args` alone (what a fix edits)
    env: Mapping[str, str]
    volume_mounts: tuple[Mapping[str, Any], ...]

    @property
    def tag(self) -> str | None:
        return image_tag(self.image)

    @property
    def version(self) -> Version | None:
        return Version.parse(self.tag)

    @property
    def flags(self) -> dict[str, Flag]:
        return parse_flags(self.args)


def _container(raw: Mapping[str, Any]) -> ContainerView:
    env = {
        str(e.get("name")): str(e.get("value", ""))
        for e in raw.get("env") or []
        if isinstance(e, Mapping) and "value" in e
    }
    command = [str(a) for a in raw.get("command") or []]
    args = [str(a) for a in raw.get("args") or []]
    return ContainerView(
        name=str(raw.get("name", "")),
        image=str(raw.get("image", "")),
        args=tuple(command + args),
        arg_list=tuple(args),
        env=env,
        volume_mounts=tuple(m for m in raw.get("volumeMounts") or [] if isinstance(m, Mapping)),
    )


@dataclass(frozen=True)
class WorkloadView:
    kind: str
    namespace: str
    name: str
    match_labels: Mapping[str, str]
    pod_labels: Mapping[str, str]
    containers: tuple[ContainerView, ...]
    node_selector: Mapping[str, str]
    affinity: Mapping[str, Any]
    tolerations: tuple[Mapping[str, Any], ...]
    volumes: tuple[Mapping[str, Any], ...]

    def container(self, preferred: str | None = None, image_hint: str = "") -> ContainerView | None:
        """The named container, else the first whose image contains the hint and that is not
        a monitor sidecar, else the first container."""
        if preferred:
            for c in self.containers:
                if c.name == preferred:
                    return c
        if image_hint:
            for c in self.containers:
                if image_hint in c.image and "monitor" not in " ".join(c.args) + c.name:
                    return c
        return self.containers[0] if self.containers else None

    def selects(self, pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        if meta.get("namespace") != self.namespace or not self.match_labels:
            return False
        labels = meta.get("labels") or {}
        return all(labels.get(k) == v for k, v in self.match_labels.items())

    def configmap_volumes(self) -> dict[str, str]:
        """volume name -> ConfigMap name (plain and projected sources)."""
        out: dict[str, str] = {}
        for vol in self.volumes:
            cm = vol.get("configMap")
            if isinstance(cm, Mapping) and cm.get("name"):
                out[str(vol.get("name"))] = str(cm["name"])
            projected = vol.get("projected")
            if isinstance(projected, Mapping):
                for src in projected.get("sources") or []:
                    pcm = src.get("configMap") if isinstance(src, Mapping) else None
                    if isinstance(pcm, Mapping) and pcm.get("name"):
                        out[str(vol.get("name"))] = str(pcm["name"])
        return out


def workload_view(obj: Mapping[str, Any]) -> WorkloadView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    selector = spec.get("selector") or {}
    return WorkloadView(
        kind=str(obj.get("kind", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        match_labels=dict(selector.get("matchLabels") or {}),
        pod_labels=dict((template.get("metadata") or {}).get("labels") or {}),
        containers=tuple(_container(c) for c in pod_spec.get("containers") or []),
        node_selector=dict(pod_spec.get("nodeSelector") or {}),
        affinity=dict(pod_spec.get("affinity") or {}),
        tolerations=tuple(t for t in pod_spec.get("tolerations") or [] if isinstance(t, Mapping)),
        volumes=tuple(v for v in pod_spec.get("volumes") or [] if isinstance(v, Mapping)),
    )

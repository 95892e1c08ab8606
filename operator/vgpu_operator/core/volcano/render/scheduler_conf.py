"""The Volcano scheduler conf (`volcano-scheduler-configmap` / `volcano-scheduler.conf`), a file
people edit by hand: changed minimally, with ruamel round-trip, so every other plugin, tier,
argument and comment stays.

What the operator ensures (volcano-sh/volcano@v1.15.1:
pkg/scheduler/plugins/deviceshare/deviceshare.go, pkg/scheduler/plugins/predicates/predicates.go
and docs/user-guide/how_to_use_vnpu.md):
- a `deviceshare` plugin with `deviceshare.VGPUEnable: true` (a YAML boolean);
- `deviceshare.KnownGeometriesCMName/Namespace` resolve to the device config ConfigMap the
  operator renders (arguments written only where the defaults would point elsewhere);
- `deviceshare.AscendHAMiVNPUEnable: true` when Ascend vNPU (HAMi mode) is on;
- the legacy `GPUSharingEnable`/`GPUNumberEnable` switched off (with `VGPUEnable` the scheduler
  exits), and `enablePredicate: false` on deviceshare undone;
- a `predicates` plugin (its allocate handler writes the devices into the pod annotations);
- `predicate.DynamicResourceAllocationEnable: true` on it while a dra pool exists and the
  scheduler is older than v1.15.0 or of an unknown version (`component_versions.
  scheduler_reads_dra_argument`; a later one does not read it and nothing changes). It is never
  taken off again: the argument is harmless without DRA pools, and removing it would restart the
  scheduler for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from vgpu_operator.core.volcano.render.common import (
    Rendered,
    RenderError,
    cm_data,
    keep_trailing_newline,
    load_mapping,
    stamp,
)
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.volcano import DEFAULT_DEVICE_CONFIG_NAME


def desired_deviceshare_arguments(config: OperatorConfig) -> dict[str, Any]:
    """Arguments that must have these values (missing ones whose default already fits are not
    added: see `_wanted`)."""
    ref = config.device_config
    args: dict[str, Any] = {
        "deviceshare.VGPUEnable": True,
        "deviceshare.KnownGeometriesCMName": ref.name,
        "deviceshare.KnownGeometriesCMNamespace": ref.namespace,
    }
    if config.ascend_vnpu.enabled:
        args["deviceshare.AscendHAMiVNPUEnable"] = True
    return args


DRA_ARGUMENT = "predicate.DynamicResourceAllocationEnable"

_DEFAULTS = {
    "deviceshare.KnownGeometriesCMName": DEFAULT_DEVICE_CONFIG_NAME,
    "deviceshare.KnownGeometriesCMNamespace": "kube-system",
}
_LEGACY = ("deviceshare.GPUSharingEnable", "deviceshare.GPUNumberEnable")


def _plugins(tier: Any) -> list[Any] | None:
    if not isinstance(tier, MutableMapping):
        return None
    plugins = tier.get("plugins")
    if plugins is None:
        plugins = CommentedSeq()
        tier["plugins"] = plugins
    return plugins if isinstance(plugins, list) else None


def _find(tiers: list[Any], name: str) -> tuple[int, int] | None:
    for t, tier in enumerate(tiers):
        plugins = tier.get("plugins") if isinstance(tier, Mapping) else None
        for p, plugin in enumerate(plugins if isinstance(plugins, list) else []):
            if isinstance(plugin, Mapping) and plugin.get("name") == name:
                return t, p
    return None


def _ensure_plugins(doc: MutableMapping[str, Any]) -> tuple[MutableMapping[str, Any], bool]:
    """The deviceshare plugin entry (created if missing, next to predicates) and whether the
    tiers changed (deviceshare or predicates added)."""
    tiers = doc.get("tiers")
    changed = False
    if tiers is None:
        tiers = CommentedSeq()
        doc["tiers"] = tiers
    if not isinstance(tiers, list):
        raise RenderError("'tiers' in the scheduler conf is not a list; refusing to edit it")
    if not tiers:
        tiers.append(CommentedMap(plugins=CommentedSeq()))
    found = _find(tiers, "deviceshare")
    if found is None:
        anchor = _find(tiers, "predicates")
        t = anchor[0] if anchor else len(tiers) - 1
        plugins = _plugins(tiers[t])
        if plugins is None:
            raise RenderError(f"tier {t} of the scheduler conf has no plugin list")
        at = anchor[1] + 1 if anchor else len(plugins)
        plugins.insert(at, CommentedMap(name="deviceshare", arguments=CommentedMap()))
        found = (t, at)
        changed = True
    if _find(tiers, "predicates") is None:
        t, p = found
        plugins = _plugins(tiers[t])
        assert plugins is not None
        plugins.insert(p, CommentedMap(name="predicates"))
        found = (t, p + 1)
        changed = True
    plugins = _plugins(tiers[found[0]])
    assert plugins is not None
    entry = plugins[found[1]]
    assert isinstance(entry, MutableMapping)
    return entry, changed


def _wanted(args: Mapping[str, Any], key: str, value: Any) -> bool:
    """Does `key` need writing? Missing keys only when the default would not do."""
    if key in args:
        current = args[key]
        return not (current is value if isinstance(value, bool) else bool(current == value))
    return bool(_DEFAULTS.get(key) != value)


def _enable_dra(tiers: Any) -> bool:
    """`predicate.DynamicResourceAllocationEnable: true` (a YAML boolean: Volcano <= v1.14 reads
    no other form) on the predicates plugin; whether that changed the conf."""
    found = _find(tiers, "predicates")
    assert found is not None  # _ensure_plugins put one there
    plugins = _plugins(tiers[found[0]])
    assert plugins is not None
    entry = plugins[found[1]]
    args = entry.get("arguments")
    if not isinstance(args, MutableMapping):
        args = CommentedMap()
        entry["arguments"] = args
    if args.get(DRA_ARGUMENT) is True:
        return False
    args[DRA_ARGUMENT] = True
    return True


def render_scheduler_conf(
    cm: Mapping[str, Any] | None, config: OperatorConfig, now: str, *, dra: bool = False
) -> Rendered:
    """The scheduler conf with the operator's deviceshare arguments, and with kube-scheduler's
    DRA plugin switched on in `predicates` when `dra` (a dra pool exists and the scheduler reads
    the switch)."""
    ref = config.scheduler.config_map
    if cm is None:
        raise RenderError(
            f"ConfigMap {ref.namespace}/{ref.name} not found; the operator edits the scheduler "
            "conf but does not create one"
        )
    current = cm_data(cm).get(ref.key, "")
    rt, doc = load_mapping(current, f"{ref.name}/{ref.key}", "edit")
    plugin, changed = _ensure_plugins(doc)
    args = plugin.get("arguments")
    if not isinstance(args, MutableMapping):
        args = CommentedMap()
        plugin["arguments"] = args
        changed = True
    for key, value in desired_deviceshare_arguments(config).items():
        if _wanted(args, key, value):
            args[key] = value
            changed = True
    for key in _LEGACY:
        if key in args and args[key] is not False:
            args[key] = False
            changed = True
    if plugin.get("enablePredicate") is False:
        plugin["enablePredicate"] = True
        changed = True
    if dra and _enable_dra(doc["tiers"]):
        changed = True
    data = cm_data(cm)
    if not changed:
        return Rendered(data=data)
    data[ref.key] = keep_trailing_newline(current, rt.dump(doc))
    return Rendered(data=data, annotations=stamp(now), changed=True)

"""Adopting a hand-configured Volcano/HAMi set-up: a component is changed (and so restarted) only
when what it reads would differ, not when the text the operator would write differs.

Three places where the text differs but what the component reads does not:
- the device plugin's flags (plugins up to v1.11): a flag the operator would add whose value is
  the plugin's own default changes nothing the plugin reads (`flag_is_default`). Defaults of
  Project-HAMi/volcano-vgpu-device-plugin@v1.11.0: cmd/vgpu/main.go and
  pkg/plugin/vgpu/util/util.go (`GlobalFlagSet`): `--resource-name` volcano.sh/vgpu-number,
  `--resource-memory-name` volcano.sh/vgpu-memory, `--resource-core-name` volcano.sh/vgpu-cores,
  `--device-split-count` 2, `--device-cores-scaling` 1.0, `--gpu-memory-factor` 1;
- the node config: the operator writes an explicit entry for every node it manages (so no plugin
  flag default decides a node's settings). A node that had no entry, whose new entry says what
  the plugin already uses without one (`implicit_entry`: hami-core, the configured defaults, no
  filtered devices), gets the entry as *taken over unchanged*, and so does a node whose
  hand-written entry the plugin reads as the new one (seed 001's `{"name": ..., "operatingmode":
  "mig"}`: a missing or zero field is the plugin's default, `reads_as`): its plugin pod is not
  replaced for it (`entries_taken_over`);
- the plugin's placement: a DaemonSet that already runs exactly on the nodes labelled for it,
  tolerating their taints (say, through a nodeSelector on a label set by hand), needs no
  nodeSelector patch, which would roll every plugin pod (`Placement.adopted`). The patch comes
  when the two part (a node leaves the pool, or a transition pauses its plugin).

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from vgpu_operator import yamlsafe
from vgpu_operator.contract import ANN_DATA_CHANGED_AT, ANN_OWNED_ENTRIES
from vgpu_operator.core.volcano.render.common import Rendered, json_compact
from vgpu_operator.models.volcano import EffectiveNodeSettings, NodeConfigFile

PLUGIN_FLAG_DEFAULTS: Mapping[str, str] = {
    "resource-name": "volcano.sh/vgpu-number",
    "resource-memory-name": "volcano.sh/vgpu-memory",
    "resource-core-name": "volcano.sh/vgpu-cores",
    "device-split-count": "2",
    "device-cores-scaling": "1",
    "gpu-memory-factor": "1",
}
# The numeric ones, as numbers (the rules compare them with the operator config's values).
NUMERIC_FLAG_DEFAULTS: Mapping[str, float] = {
    flag: float(PLUGIN_FLAG_DEFAULTS[flag])
    for flag in ("device-split-count", "device-cores-scaling", "gpu-memory-factor")
}

__all__ = [
    "NUMERIC_FLAG_DEFAULTS",
    "PLUGIN_FLAG_DEFAULTS",
    "entries_taken_over",
    "flag_is_default",
    "reads_as",
]


def flag_is_default(name: str, value: str) -> bool:
    """Whether a plugin (≤ v1.11) without `--name` already uses `value`."""
    default = PLUGIN_FLAG_DEFAULTS.get(name)
    if default is None:
        return False
    try:
        return float(default) == float(value)
    except ValueError:
        return default == value


def _entries(cm: Mapping[str, Any] | None, key: str, list_key: str) -> list[Any] | None:
    """The entries the ConfigMap has now; None when it cannot be read."""
    text = ((cm or {}).get("data") or {}).get(key, "")
    if not text.strip():
        return []
    try:
        doc = yamlsafe.json_loads(text)
    except yamlsafe.YamlRefused:
        return None
    entries = doc.get(list_key) if isinstance(doc, Mapping) else None
    return list(entries) if isinstance(entries, list) else []


def reads_as(
    name: str, entries: list[Any], implicit: Mapping[str, Any]
) -> EffectiveNodeSettings | None:
    """What the plugin on `name` reads from `entries` (every entry of the file; those with its
    name apply their non-empty, positive fields over what it uses without one, `implicit`,
    later entries winning: Project-HAMi/volcano-vgpu-device-plugin@v1.11.0:pkg/util/util.go
    `readFromConfigFile`). None when an entry by that name has a shape the plugin would fail on."""
    mine = [dict(e) for e in entries if isinstance(e, Mapping) and str(e.get("name")) == name]
    try:
        parsed = NodeConfigFile.model_validate({"nodeconfig": [dict(implicit), *mine]})
    except ValueError:
        return None
    settings = parsed.effective_for(name)
    return EffectiveNodeSettings(  # `has_entry` is not something the plugin reads
        mode=settings.mode,
        device_split_count=settings.device_split_count,
        device_memory_scaling=settings.device_memory_scaling,
        device_core_scaling=settings.device_core_scaling,
        filter_uuids=settings.filter_uuids,
        filter_indexes=settings.filter_indexes,
    )


def _created_at(cm: Mapping[str, Any] | None) -> str:
    """When the ConfigMap was created (RFC 3339; "" unknown): since then a node without an
    entry has had the settings its new, equal entry states (the defaults' own changes, in the
    device config or the plugin's flags, restart the plugin by themselves:
    core.volcano.restarts)."""
    return str(((cm or {}).get("metadata") or {}).get("creationTimestamp") or "")


def _data_written_at(cm: Mapping[str, Any] | None) -> str:
    """When the ConfigMap's data was last written (RFC 3339; "" unknown): the newest
    managedFields entry owning `data`, the operator's stamp or the creation. A plugin pod
    started since then read the entries as they are now."""
    meta = (cm or {}).get("metadata") or {}
    times = [str(meta.get("creationTimestamp") or "")]
    times.append(str((meta.get("annotations") or {}).get(ANN_DATA_CHANGED_AT) or ""))
    for mf in meta.get("managedFields") or []:
        if isinstance(mf, Mapping) and "f:data" in (mf.get("fieldsV1") or {}):
            times.append(str(mf.get("time") or ""))
    known = {when: t for t in times if (when := _parse(t)) is not None}
    return known[max(known)] if known else ""


def _parse(stamp: str) -> datetime | None:
    """An RFC 3339 time; one without an offset (not what the apiserver writes, but anyone
    may annotate) is read as UTC, so that all of them compare."""
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when


def entries_taken_over(
    rendered: Rendered,
    cm: Mapping[str, Any] | None,
    key: str,
    desired: Mapping[str, Mapping[str, Any]],
    implicit_entry: Callable[[str], Mapping[str, Any]],
) -> Rendered:
    """`rendered` with the new entries of nodes that had none, and whose entry is what their
    plugin uses without one, counted as taken over unchanged: not in `changed_entries`, and
    their time in `vgpu.volcano.sh/owned-entries` the ConfigMap's creation (what any plugin pod
    started since then read is what the entry says). Likewise a node whose entry the plugin
    reads as the rendered one (`reads_as`), timed at the data's last write: a plugin pod
    started before that may have read another entry, and is restarted."""
    entries = _entries(cm, key, "nodeconfig")
    since, written = _created_at(cm), _data_written_at(cm)
    if entries is None or not rendered.changed_entries or not since:
        return rendered  # (a ConfigMap not created yet, or of unknown age: changed now)
    existing = {str(e.get("name")) for e in entries if isinstance(e, Mapping)}
    adopted: dict[str, str] = {}
    for name in sorted(rendered.changed_entries & set(desired)):
        implicit = implicit_entry(name)
        if name not in existing and dict(desired[name]) == dict(implicit):
            adopted[name] = since
        elif name in existing and written:
            now = reads_as(name, entries, implicit)
            if now is not None and now == reads_as(name, [desired[name]], implicit):
                adopted[name] = written
    if not adopted:
        return rendered
    raw = rendered.annotations.get(ANN_OWNED_ENTRIES)
    owned: dict[str, str] = json.loads(raw) if raw else {}
    for name, when in adopted.items():
        if name in owned:
            owned[name] = when
    annotations = {**rendered.annotations, ANN_OWNED_ENTRIES: json_compact(owned)}
    return replace(
        rendered,
        annotations=annotations,
        changed_entries=frozenset(rendered.changed_entries - set(adopted)),
    )

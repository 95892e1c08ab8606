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
  filtered devices), gets the entry as *taken over unchanged*: its change time stays unknown, so
  its plugin pod is not replaced for it (`entries_taken_over`);
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
from typing import Any

from vgpu_operator.contract import ANN_OWNED_ENTRIES
from vgpu_operator.core import yamlsafe
from vgpu_operator.core.render.common import Rendered, json_compact

PLUGIN_FLAG_DEFAULTS: Mapping[str, str] = {
    "resource-name": "volcano.sh/vgpu-number",
    "resource-memory-name": "volcano.sh/vgpu-memory",
    "resource-core-name": "volcano.sh/vgpu-cores",
    "device-split-count": "2",
    "device-cores-scaling": "1",
    "gpu-memory-factor": "1",
}

__all__ = [
    "PLUGIN_FLAG_DEFAULTS",
    "entries_taken_over",
    "flag_is_default",
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


def _entry_names(cm: Mapping[str, Any] | None, key: str, list_key: str) -> set[str] | None:
    """The names of the entries the ConfigMap has now; None when it cannot be read."""
    text = ((cm or {}).get("data") or {}).get(key, "")
    if not text.strip():
        return set()
    try:
        doc = yamlsafe.json_loads(text)
    except yamlsafe.YamlRefused:
        return None
    entries = doc.get(list_key) if isinstance(doc, Mapping) else None
    if not isinstance(entries, list):
        return set()
    return {str(e.get("name")) for e in entries if isinstance(e, Mapping)}


def _created_at(cm: Mapping[str, Any] | None) -> str:
    """When the ConfigMap was created (RFC 3339; "" unknown): since then a node without an
    entry has had the settings its new, equal entry states (the defaults' own changes, in the
    device config or the plugin's flags, restart the plugin by themselves: core.restarts)."""
    return str(((cm or {}).get("metadata") or {}).get("creationTimestamp") or "")


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
    started since then read is what the entry says)."""
    existing = _entry_names(cm, key, "nodeconfig")
    since = _created_at(cm)
    if existing is None or not rendered.changed_entries or not since:
        return rendered  # (a ConfigMap not created yet, or of unknown age: changed now)
    adopted = {
        name
        for name in rendered.changed_entries
        if name not in existing
        and name in desired
        and dict(desired[name]) == dict(implicit_entry(name))
    }
    if not adopted:
        return rendered
    raw = rendered.annotations.get(ANN_OWNED_ENTRIES)
    owned: dict[str, str] = json.loads(raw) if raw else {}
    for name in adopted:
        if name in owned:
            owned[name] = since
    annotations = {**rendered.annotations, ANN_OWNED_ENTRIES: json_compact(owned)}
    return replace(
        rendered,
        annotations=annotations,
        changed_entries=frozenset(rendered.changed_entries - adopted),
    )

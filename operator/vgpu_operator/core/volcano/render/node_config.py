"""Per-node ConfigMaps: `volcano-vgpu-node-config` (`config.json`, hami-core and mig nodes) and
`hami-device-node-config` (`node-config.yaml`, ascend-vnpu nodes).

Ownership: the ConfigMap's annotation `vgpu.volcano.sh/owned-entries` is a JSON object
`{node name: RFC 3339 time its entry last changed}`; its keys are the entries the operator owns.
- A node in the desired set gets the operator's fields (other keys of an existing entry, e.g.
  `migstrategy`, are kept); duplicates by that name are dropped (the plugin lets later entries
  win, so they would silently override the rendered one).
- An entry by that name that a person wrote before is kept (`core.volcano.render.entry_origins`):
  recorded as it was in `vgpu.volcano.sh/original-entries`, merged with what the policy needs
  (the person's fields the policy does not set stay, the device filters are united: a GPU they
  excluded is never offered again), and put back exactly when the node leaves.
- An owned entry whose node left the desired set is removed, or put back as the person wrote it.
- Every other entry is left exactly as it was, in place.
The times tell the restart logic which node's plugin pod read an outdated entry.

No node's entry may take more than `bounds.MAX_NODE_ENTRY_BYTES` (as indented JSON): a larger
one (a released configuration listing thousands of UUIDs, GPU indexes of thousands of digits)
is refused, its existing entry is left as it was, and the others are written, so one node
cannot bring the ConfigMap over the apiserver's limit and block every write. The
`node-input-bounds` rule names the node (`oversized`).

A static-MIG node belongs to NVIDIA's device plugin (HAMi's does not run there, see
`core.volcano.placement`); its entry is `hami-core` with every GPU in `filterdevices`, so a
stray
HAMi plugin pod (v1.12+) registers nothing and never runs `nvidia-mig-parted` over the layout
(`operatingmode: mig` would: Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/plugin/server.go).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import replace
from typing import Any

from vgpu_operator import bounds, yamlsafe
from vgpu_operator.contract import ANN_ORIGINAL_ENTRIES, ANN_OWNED_ENTRIES
from vgpu_operator.core.volcano import config_adoption
from vgpu_operator.core.volcano.render import entry_origins
from vgpu_operator.core.volcano.render.common import (
    Rendered,
    RenderError,
    RoundTrip,
    cm_annotations,
    cm_data,
    json_compact,
    keep_trailing_newline,
    number,
    plain,
    stamp,
)
from vgpu_operator.models.config import DeviceDefaults, OperatorConfig
from vgpu_operator.models.config_refs import ConfigMapRef
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import FilterDevices

NODE_FIELDS = frozenset(
    {
        "name",
        "operatingmode",
        "devicesplitcount",
        "devicememoryscaling",
        "devicecorescaling",
        "filterdevices",
    }
)
ASCEND_FIELDS = frozenset({"name", "vDeviceCount", "hami-vnpu-core", "filterDevices"})
VGPU_MODES = ("hami-core", "mig")
# The GPU indexes a policy's filterDevices may name (0-63): what a static node's entry filters
# when the node's GPUs are not known yet (or what says so is out of bounds).
ALL_GPU_INDEXES = tuple(range(bounds.MAX_GPUS_PER_NODE))


def owned_entries(cm: Mapping[str, Any] | None) -> dict[str, str]:
    """{node: last change} from the ownership annotation; unreadable counts as owning nothing."""
    raw = cm_annotations(cm).get(ANN_OWNED_ENTRIES)
    if not raw:
        return {}
    try:
        value = yamlsafe.json_loads(raw)
    except yamlsafe.YamlRefused:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, list):
        return {str(k): "" for k in value}
    return {}


def _filter(spec: FilterDevices | None) -> dict[str, list[Any]]:
    return {
        "uuid": list(spec.uuid) if spec else [],
        "index": list(spec.index) if spec else [],
    }


def node_entry(
    name: str,
    config: NodeConfig,
    defaults: DeviceDefaults,
    gpus: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The `nodeconfig` entry for a hami-core or mig node. Every value is explicit (the policy's,
    else the operator default), so the result does not depend on plugin flag defaults (≤ v1.11
    flags override the ConfigMap; vvdp #87). A static-MIG node's entry filters every GPU
    (`gpus`: its GPU indexes; unknown: every index a policy may name)."""
    if config.device_plugin != "hami":
        return {
            "name": name,
            "operatingmode": "hami-core",
            "devicesplitcount": defaults.device_split_count,
            "devicememoryscaling": number(defaults.device_memory_scaling),
            "devicecorescaling": number(defaults.device_core_scaling),
            "filterdevices": {
                "uuid": [],
                "index": list(gpus) if gpus is not None else list(ALL_GPU_INDEXES),
            },
        }
    hc = config.hami_core
    split = hc.device_split_count if hc and hc.device_split_count else defaults.device_split_count
    mem = hc.device_memory_scaling if hc and hc.device_memory_scaling else None
    core = hc.device_core_scaling if hc and hc.device_core_scaling else None
    return {
        "name": name,
        "operatingmode": config.mode,
        "devicesplitcount": split,
        "devicememoryscaling": number(mem or defaults.device_memory_scaling),
        "devicecorescaling": number(core or defaults.device_core_scaling),
        "filterdevices": _filter(hc.filter_devices if hc else None),
    }


def ascend_entry(name: str, config: NodeConfig, hami_vnpu_core: bool = False) -> dict[str, Any]:
    """The `nodes` entry for an ascend-vnpu node: what the policy sets, and always
    `hami-vnpu-core` (the policy's, else `hami_vnpu_core`: the global `vnpus.hamiVnpuCore` the
    Ascend plugin reads). The plugin takes a matched entry's value over the global one, and a
    missing key reads as false (Project-HAMi/ascend-device-plugin@v1.4.0:internal/vnpu.go
    `NodeConfig`, internal/manager/manager.go `IsHamiVnpuCore`)."""
    spec = config.ascend_vnpu
    entry: dict[str, Any] = {"name": name}
    if spec is not None and spec.v_device_count is not None:
        entry["vDeviceCount"] = spec.v_device_count
    if spec is not None and spec.hami_vnpu_core is not None:
        entry["hami-vnpu-core"] = spec.hami_vnpu_core
    else:
        entry["hami-vnpu-core"] = hami_vnpu_core
    if spec is not None and spec.filter_devices is not None:
        entry["filterDevices"] = _filter(spec.filter_devices)
    return entry


def node_policy_fields(config: NodeConfig) -> frozenset[str]:
    """The `nodeconfig` fields the policy sets (the rest of a taken-over entry stays the
    person's): a static-MIG node's entry is the operator's throughout (every GPU filtered)."""
    if config.device_plugin != "hami":
        return NODE_FIELDS
    hc = config.hami_core
    out = {"name", "operatingmode", "filterdevices"}
    if hc is not None:
        out |= {
            key
            for key, value in (
                ("devicesplitcount", hc.device_split_count),
                ("devicememoryscaling", hc.device_memory_scaling),
                ("devicecorescaling", hc.device_core_scaling),
            )
            if value
        }
    return frozenset(out)


def ascend_policy_fields(config: NodeConfig) -> frozenset[str]:
    """The `nodes` fields the policy sets (what `ascend_entry` takes from it)."""
    spec = config.ascend_vnpu
    out = {"name", "filterDevices"}
    if spec is not None and spec.v_device_count is not None:
        out.add("vDeviceCount")
    if spec is not None and spec.hami_vnpu_core is not None:
        out.add("hami-vnpu-core")
    return frozenset(out)


def entry_bytes(entry: Mapping[str, Any]) -> int:
    """The bytes an entry takes as indented JSON (config.json's own layout, give or take the
    indentation of the list it is in)."""
    return len(json.dumps(entry, indent=4, ensure_ascii=False, default=str).encode())


def oversized(desired: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """{node: bytes} of the entries over `bounds.MAX_NODE_ENTRY_BYTES`: refused. An entry
    that `_surely_within` the bound is not measured: `entry_bytes` (indented JSON, which only
    the standard library's pure-Python encoder writes) is the costly part of a render over
    thousands of nodes, and almost every entry is far below the bound."""
    out: dict[str, int] = {}
    for name, entry in desired.items():
        if _surely_within(entry, bounds.MAX_NODE_ENTRY_BYTES):
            continue
        size = entry_bytes(entry)
        if size > bounds.MAX_NODE_ENTRY_BYTES:
            out[name] = size
    return out


# `entry_bytes`'s encoding without the indentation (json's C encoder writes it).
_COMPACT = json.JSONEncoder(ensure_ascii=False, default=str, separators=(",", ": "))


def _surely_within(entry: Mapping[str, Any], limit: int, indent: int = 4) -> bool:
    """`entry_bytes(entry) <= limit`, when an upper bound shows it (False: not known).
    json.dumps with `indent` writes the same text as with separators (",", ": ") and no indent,
    plus a newline and the level's indentation before each item of a non-empty container and
    before its closing bracket. Items are at most the commas plus the containers, the levels at
    most the containers, and the text's own count of commas and brackets, strings included, is
    at least the structural one: the bound below is never under the real size."""
    compact = _COMPACT.encode(entry)
    commas = compact.count(",")
    opening = compact.count("[") + compact.count("{")
    whitespace = (commas + 2 * opening) * (1 + indent * opening)
    return len(compact.encode()) + whitespace <= limit


def _ownership(
    old: Mapping[str, str],
    desired: Mapping[str, Any],
    changed: set[str],
    now: str,
    refused: Mapping[str, int],
) -> dict[str, str]:
    """Time of each owned entry's last change; "" when it was taken over unchanged (unknown).
    A refused entry that was owned stays owned, unchanged."""
    owned = {n: now if n in changed else old.get(n, "") for n in desired}
    owned.update({n: old[n] for n in refused if n in old})
    return owned


def _finish(
    cm: Mapping[str, Any] | None,
    ref: ConfigMapRef,
    text: str,
    changed_entries: set[str],
    owned: dict[str, str],
    now: str,
    originals: Mapping[str, list[dict[str, Any]]],
) -> Rendered:
    data = cm_data(cm)
    annotations = cm_annotations(cm)
    new_ann = {ANN_OWNED_ENTRIES: json_compact(owned)}
    if originals or ANN_ORIGINAL_ENTRIES in annotations:
        new_ann[ANN_ORIGINAL_ENTRIES] = entry_origins.record_text(originals)
    data_changed = data.get(ref.key) != text
    if data_changed:
        new_ann.update(stamp(now))
    data[ref.key] = text
    ann_changed = any(annotations.get(k) != v for k, v in new_ann.items())
    return Rendered(
        data=data,
        annotations=new_ann,
        changed=data_changed or ann_changed or cm is None,
        create=cm is None,
        changed_entries=frozenset(changed_entries),
    )


def _render(
    cm: Mapping[str, Any] | None,
    ref: ConfigMapRef,
    desired: dict[str, dict[str, Any]],
    now: str,
    list_key: str,
    fields: frozenset[str],
    load: Callable[[str], Any],
    dump: Callable[[Any, str], str],
    policy_fields: Mapping[str, frozenset[str]],
    filter_key: str,
) -> tuple[Rendered, dict[str, dict[str, Any]]]:
    """The rendered ConfigMap, and the entries it wants (a person's merged in)."""
    owned_before = owned_entries(cm)
    if not desired and not owned_before:
        return Rendered(data=cm_data(cm)), {}  # nothing of ours, here or to come
    current = cm_data(cm).get(ref.key, "")
    doc = load(current)
    if doc is None:
        doc = {}
    if not isinstance(doc, MutableMapping):
        raise RenderError(f"{ref.name}/{ref.key} is not a mapping; refusing to overwrite it")
    entries = doc.get(list_key)
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise RenderError(f"{ref.name}/{ref.key}: {list_key!r} is not a list; refusing to edit it")
    recorded = entry_origins.original_entries(cm)
    origins = entry_origins.take_over(
        list(entries), desired, owned_before, recorded, policy_fields, filter_key
    )
    refused = oversized(origins.desired)
    desired = {n: e for n, e in origins.desired.items() if n not in refused}
    notes = tuple(
        f"the {ref.key} entry for {n} would take {b} bytes, more than the "
        f"{bounds.MAX_NODE_ENTRY_BYTES} a node may; it is left as it was"
        for n, b in sorted(refused.items())
    ) + tuple(why for _, why in sorted(origins.refused.items()))
    record = {n: r for n, r in origins.record.items() if n in desired or n in owned_before}
    before = plain(doc)
    merged, changed = entry_origins.merge_entries(
        list(entries), desired, set(owned_before) - set(refused), fields, origins.restore
    )
    entries[:] = merged
    doc[list_key] = entries
    text = current if plain(doc) == before and current else dump(doc, current)
    owned = _ownership(owned_before, desired, changed, now, refused)
    rendered = _finish(cm, ref, text, changed, owned, now, record)
    return replace(rendered, notes=notes), desired


def _json_load(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return yamlsafe.json_loads(text)
    except yamlsafe.YamlRefused as exc:
        raise RenderError(
            f"config.json is not valid JSON ({exc}); refusing to overwrite it"
        ) from exc


def _json_dump(doc: Any, original: str) -> str:
    text = json.dumps(doc, indent=4, ensure_ascii=False) + "\n"
    return keep_trailing_newline(original, text)


def node_entries(
    released: Mapping[str, NodeConfig | None],
    config: OperatorConfig,
    gpus: Mapping[str, Sequence[int] | None] | None = None,
) -> dict[str, dict[str, Any]]:
    """{node: its `nodeconfig` entry} for the hami-core and mig nodes of `released`."""
    return {
        name: node_entry(name, rc, config.device_defaults, (gpus or {}).get(name))
        for name, rc in released.items()
        if rc is not None and rc.mode in VGPU_MODES
    }


def ascend_entries(
    released: Mapping[str, NodeConfig | None], hami_vnpu_core: bool = False
) -> dict[str, dict[str, Any]]:
    """{node: its `nodes` entry} for the ascend-vnpu nodes of `released`."""
    return {
        name: ascend_entry(name, rc, hami_vnpu_core)
        for name, rc in released.items()
        if rc is not None and rc.mode == "ascend-vnpu"
    }


def render_node_config(
    cm: Mapping[str, Any] | None,
    released: Mapping[str, NodeConfig | None],
    config: OperatorConfig,
    now: str,
    gpus: Mapping[str, Sequence[int] | None] | None = None,
) -> Rendered:
    """`volcano-vgpu-node-config`: `released` maps every node the operator manages to its
    released configuration (`vgpu.volcano.sh/config`); hami-core and mig nodes get entries.
    `gpus`: the GPU indexes of nodes, for the entries of static-MIG nodes."""
    fields = {n: node_policy_fields(rc) for n, rc in released.items() if rc is not None}
    rendered, desired = _render(
        cm,
        config.node_config,
        node_entries(released, config, gpus),
        now,
        "nodeconfig",
        NODE_FIELDS,
        _json_load,
        _json_dump,
        fields,
        "filterdevices",
    )

    def implicit(name: str) -> dict[str, Any]:  # what a plugin uses for a node without entry
        return node_entry(name, NodeConfig(mode="hami-core"), config.device_defaults)

    key = config.node_config.key  # adopting a hand-made node config (core.volcano.config_adoption)
    return config_adoption.entries_taken_over(rendered, cm, key, desired, implicit)


def render_ascend_node_config(
    cm: Mapping[str, Any] | None,
    released: Mapping[str, NodeConfig | None],
    config: OperatorConfig,
    now: str,
    hami_vnpu_core: bool = False,
) -> Rendered:
    """`hami-device-node-config`: one `nodes` entry per ascend-vnpu node, same ownership rules.
    `hami_vnpu_core`: the global `vnpus.hamiVnpuCore` (the entries' default)."""
    desired = ascend_entries(released, hami_vnpu_core)
    state: dict[str, RoundTrip] = {}

    def load(text: str) -> Any:
        state["rt"] = RoundTrip(text)
        return state["rt"].load()

    def dump(doc: Any, original: str) -> str:
        return keep_trailing_newline(original, state["rt"].dump(doc))

    fields = {n: ascend_policy_fields(rc) for n, rc in released.items() if rc is not None}
    rendered, _ = _render(
        cm,
        config.ascend_node_config,
        desired,
        now,
        "nodes",
        ASCEND_FIELDS,
        load,
        dump,
        fields,
        "filterDevices",
    )
    return rendered

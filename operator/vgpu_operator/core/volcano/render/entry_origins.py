"""A person's own per-node entries in the node-config ConfigMaps, kept (issue 29).

When a policy takes a node whose entry someone wrote by hand (an entry by that name that the
operator does not own, `vgpu.volcano.sh/owned-entries`), the operator:
- records that entry as it was (every entry by that name, in order: the plugin lets later ones
  win) in the ConfigMap's annotation `vgpu.volcano.sh/original-entries`, `{node: [entries]}`;
- writes the entry merged with what the policy needs (`merged`): the fields the policy sets are
  the policy's, every other field stays the person's (their value wins over the operator's
  default), and the device filter is the union of both (`filterdevices` for
  `volcano-vgpu-node-config`, `filterDevices` for `hami-device-node-config`), so a GPU the
  person excluded is never offered again. Each pass merges from the record, not from the last
  merged entry, so a field the policy stops setting goes back to the person's value;
- when the node leaves, puts the recorded entries back exactly, in place of its own, instead of
  deleting the entry, and drops the record.
An entry the operator created itself (no record) is deleted on leave, as before. An original
larger than `bounds.MAX_NODE_ENTRY_BYTES` is not taken over (its entry is left as it was, and a
note says so), so the record cannot outgrow the ConfigMap's annotations.

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_operator import bounds
from vgpu_operator.contract import ANN_ORIGINAL_ENTRIES
from vgpu_operator.core.volcano.render.common import annotation_mapping, plain

__all__ = [
    "Origins",
    "entries_named",
    "merge_entries",
    "merged",
    "original_entries",
    "record_text",
    "take_over",
]

# The record's whole size: a quarter of what a ConfigMap's annotations may take together
# (256 KiB, kubernetes@v1.30.0:staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go
# `TotalAnnotationSizeLimitB`); past it a further entry is not taken over.
MAX_RECORD_BYTES = 64 * 1024


def original_entries(cm: Mapping[str, Any] | None) -> dict[str, list[dict[str, Any]]]:
    """{node: the person's entries as they were} from the record; what does not read as a list
    of mappings per node is ignored (nothing to restore for it)."""
    value = annotation_mapping(cm, ANN_ORIGINAL_ENTRIES)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, entries in value.items():
        if isinstance(entries, list) and entries and all(isinstance(e, Mapping) for e in entries):
            out[str(name)] = [dict(plain(e)) for e in entries]
    return out


def record_text(record: Mapping[str, list[dict[str, Any]]]) -> str:
    """The annotation's JSON: nodes sorted, each entry's keys in the person's order."""
    return json.dumps(
        {name: record[name] for name in sorted(record)}, separators=(",", ":"), ensure_ascii=False
    )


def entries_named(entries: Iterable[Any], name: str) -> list[dict[str, Any]]:
    """Plain copies of the entries by that name, in file order."""
    return [
        dict(plain(e)) for e in entries if isinstance(e, Mapping) and str(e.get("name")) == name
    ]


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, Mapping):
        return "mapping"
    return type(value).__name__


def _union(mine: Any, theirs: Any) -> Any:
    """The person's filter list with the policy's additions: neither loses a device. A value
    that is not a list (the plugin could not read it) gives way to the policy's; the record
    still has it, to put back."""
    if not isinstance(mine, list):
        return theirs
    extra = [x for x in (theirs if isinstance(theirs, list) else []) if x not in mine]
    return [*mine, *extra]


def _filter(mine: Any, theirs: Any) -> Any:
    if not isinstance(mine, Mapping) or not isinstance(theirs, Mapping):
        return theirs
    out = dict(theirs)
    for key, value in mine.items():
        out[key] = _union(value, theirs.get(key)) if key in theirs else value
    return out


def _read(value: Any) -> bool:
    """Whether the plugin reads a field's value rather than its default: not empty, and a
    number above zero (Project-HAMi/volcano-vgpu-device-plugin@v1.11.0:pkg/util/util.go
    `readFromConfigFile`); a boolean always (the Ascend plugin takes a matched entry's)."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return value > 0
    return value not in (None, "", [], {})


def merged(
    originals: list[dict[str, Any]],
    want: Mapping[str, Any],
    policy_fields: frozenset[str],
    filter_key: str,
) -> dict[str, Any]:
    """The entry for a node whose person-written `originals` the operator took over: `want`
    (every field explicit), with each field the policy does not set (`policy_fields`) the
    person's where the plugin reads theirs, and the filter the union of both."""
    theirs: dict[str, Any] = {}
    for entry in originals:  # later entries win, as in the plugin
        theirs.update({k: v for k, v in entry.items() if _read(v) or k not in theirs})
    out = dict(want)
    for key, value in theirs.items():
        if key == filter_key:
            out[key] = _filter(value, want[key]) if key in want else value
        elif key in policy_fields or key == "name":
            continue
        elif key not in want:
            out[key] = value  # a field the operator does not render (`migstrategy`)
        elif _read(value) and _kind(value) == _kind(want[key]):
            out[key] = value  # (a value of another kind, the plugin could not read)
    return out


def _size(entries: list[dict[str, Any]]) -> int:
    return len(json.dumps(entries, separators=(",", ":")).encode()) if entries else 0


@dataclass(frozen=True)
class Origins:
    """The desired entries with the people's merged in, and what to record and restore."""

    desired: dict[str, dict[str, Any]]
    record: dict[str, list[dict[str, Any]]]  # what the annotation says after this write
    restore: dict[str, list[dict[str, Any]]]  # nodes that leave: their entries as they were
    refused: dict[str, str] = field(default_factory=dict)  # node -> why it is not taken over


def take_over(
    entries: list[Any],
    desired: Mapping[str, dict[str, Any]],
    owned: Iterable[str],
    recorded: Mapping[str, list[dict[str, Any]]],
    policy_fields: Mapping[str, frozenset[str]],
    filter_key: str,
) -> Origins:
    """`entries`: the file's entries now; `desired`: the operator's entry per node it manages;
    `owned`: the nodes whose entries it owns; `recorded`: the record so far."""
    owned = set(owned)
    record: dict[str, list[dict[str, Any]]] = {}
    out: dict[str, dict[str, Any]] = {}
    refused: dict[str, str] = {}
    budget = MAX_RECORD_BYTES
    for name in sorted(desired):
        # owned: what it recorded when it took the entry over (none: it wrote it itself)
        mine = name in owned
        originals = recorded.get(name) if mine else (entries_named(entries, name) or None)
        if originals is not None:
            size = _size(originals)
            if size > bounds.MAX_NODE_ENTRY_BYTES or size > budget:
                refused[name] = (
                    f"the hand-written entry for {name} takes {size} bytes, more than the "
                    "operator records to put it back; it is left as it was"
                )
                continue
            budget -= size
            record[name] = originals
            fields = policy_fields.get(name, frozenset(desired[name]))
            out[name] = merged(originals, desired[name], fields, filter_key)
        else:
            out[name] = dict(desired[name])
    restore = {
        name: originals
        for name, originals in recorded.items()
        if name in owned and name not in desired
    }
    return Origins(out, record, restore, refused)


def merge_entries(
    entries: list[Any],
    desired: Mapping[str, dict[str, Any]],
    owned: set[str],
    fields: frozenset[str],
    restore: Mapping[str, list[dict[str, Any]]],
) -> tuple[list[Any], set[str]]:
    """New entry list and the names whose entries changed. Entries are updated in place so a
    round-trip document keeps comments on them; a leaving node's entry is replaced by what a
    person wrote there before (`restore`), or removed."""
    before: dict[str, list[Any]] = {}
    for entry in entries:
        if isinstance(entry, Mapping):
            before.setdefault(str(entry.get("name", "")), []).append(plain(entry))
    out: list[Any] = []
    placed: set[str] = set()
    for entry in entries:
        name = str(entry.get("name", "")) if isinstance(entry, Mapping) else None
        if name is not None and name in desired:
            if name in placed:
                continue  # a duplicate would override the rendered entry
            assert isinstance(entry, MutableMapping)
            want = desired[name]
            for key in [k for k in entry if k in fields and k not in want]:
                del entry[key]
            for key, value in want.items():
                if key not in entry or plain(entry[key]) != plain(value):
                    entry[key] = value
            out.append(entry)
            placed.add(name)
        elif name is not None and name in owned:
            if name in restore and name not in placed:
                out.extend(dict(e) for e in restore[name])  # the person's, as they were
                placed.add(name)
            continue  # the node left: its entry goes
        else:
            out.append(entry)
    for name in sorted(set(desired) - placed):
        out.append(dict(desired[name]))
    for name in sorted(set(restore) - placed):
        out.extend(dict(e) for e in restore[name])  # (its entry was removed meanwhile)
    after: dict[str, list[Any]] = {}
    for entry in out:
        if isinstance(entry, Mapping):
            after.setdefault(str(entry.get("name", "")), []).append(plain(entry))
    touched = set(desired) | (owned & set(before)) | set(restore)
    changed = {n for n in touched if before.get(n) != after.get(n)}
    return out, changed

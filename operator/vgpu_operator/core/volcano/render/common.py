"""Shared pieces of the renderers: the result type, ruamel round-trip YAML that keeps comments,
quotes and the document's own indentation, and value comparison the way the Go readers see it
(1 == 1.0, a mapping is a mapping whatever its comments)."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError
from ruamel.yaml.util import load_yaml_guess_indent

from vgpu_operator import yamlsafe
from vgpu_operator.contract import ANN_DATA_CHANGED_AT


class RenderError(ValueError):
    """The current object cannot be changed safely (e.g. its data does not parse): the operator
    writes nothing and reports instead of overwriting what it cannot read."""


@dataclass(frozen=True)
class Rendered:
    """A ConfigMap after rendering. `changed` False: nothing to write."""

    data: dict[str, str]  # the full `data` after rendering (other keys untouched)
    annotations: dict[str, str] = field(default_factory=dict)  # the operator's, to merge-patch
    changed: bool = False
    create: bool = False  # the ConfigMap does not exist yet
    changed_entries: frozenset[str] = frozenset()  # node names whose entry changed (node configs)
    notes: tuple[str, ...] = ()  # things left alone on purpose, for events/logs


def cm_data(cm: Mapping[str, Any] | None) -> dict[str, str]:
    return dict((cm or {}).get("data") or {})


def cm_annotations(cm: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(((cm or {}).get("metadata") or {}).get("annotations") or {})


def annotation_mapping(cm: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    """A ConfigMap annotation holding a JSON object (the operator's records), parsed; absent,
    unreadable or not an object: empty (a record that does not read records nothing)."""
    raw = cm_annotations(cm).get(key)
    if not raw:
        return {}
    try:
        value = yamlsafe.json_loads(raw)
    except yamlsafe.YamlRefused:
        return {}
    return value if isinstance(value, Mapping) else {}


def plain(value: Any) -> Any:
    """A comparable plain copy: mappings -> dict, sequences -> list, integral floats -> int."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return str(value)


def number(value: float) -> int | float:
    """Write integral values as integers (as the shipped manifests do)."""
    return int(value) if float(value).is_integer() else value


_KEY_ONLY = re.compile(r"^(\s*)[^\s#-][^:#]*:\s*(#.*)?$")
_KEY_LINE = re.compile(r"^(\s*)[^\s#-][^:#]*:")


def _mapping_indent(text: str) -> int:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    for i, line in enumerate(lines[:-1]):
        head = _KEY_ONLY.match(line)
        nxt = _KEY_LINE.match(lines[i + 1])
        if head and nxt and len(nxt.group(1)) > len(head.group(1)):
            return len(nxt.group(1)) - len(head.group(1))
    return 2


class RoundTrip:
    """Load and dump one YAML document, keeping comments, quoting and indentation."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._yaml = YAML(typ="rt")
        self._yaml.preserve_quotes = True
        self._yaml.width = 4096
        sequence, offset = 2, 0
        self._doc: Any = None
        if text.strip():
            try:
                yamlsafe.check_round_trip(self._yaml, text)  # before anything is constructed
                self._doc, guessed, block_seq = load_yaml_guess_indent(text, yaml=self._yaml)
            except yamlsafe.YamlRefused as exc:
                raise RenderError(str(exc)) from exc
            except YAMLError as exc:
                raise RenderError(f"not valid YAML: {exc}") from exc
            except RecursionError as exc:
                raise RenderError("not valid YAML: nested too deeply") from exc
            except (ValueError, TypeError, OverflowError) as exc:  # e.g. a timestamp of month 13
                raise RenderError(f"not valid YAML: {type(exc).__name__}: {exc}") from exc
            sequence = guessed or 2
            offset = block_seq or 0
        self._yaml.indent(mapping=_mapping_indent(text), sequence=sequence, offset=offset)

    def load(self) -> Any:
        """The document (None when the text is empty)."""
        return self._doc

    def dump(self, doc: Any) -> str:
        out = io.StringIO()
        self._yaml.dump(doc, out)
        return out.getvalue()


def load_mapping(text: str, what: str, verb: str) -> tuple[RoundTrip, MutableMapping[Any, Any]]:
    """Round-trip-load a YAML document that must be a mapping (empty: a new one)."""
    rt = RoundTrip(text)
    doc = rt.load()
    if doc is None:
        doc = CommentedMap()
    if not isinstance(doc, MutableMapping):
        raise RenderError(f"{what} is not a YAML mapping; refusing to {verb} it")
    return rt, doc


def keep_trailing_newline(original: str, rendered: str) -> str:
    """ConfigMap values written with `|-` have no final newline; keep the original's choice."""
    if original and not original.endswith("\n") and rendered.endswith("\n"):
        return rendered.rstrip("\n")
    return rendered


def stamp(now: str) -> dict[str, str]:
    """The annotation that dates a data change (what the restart rule compares pod starts to)."""
    return {ANN_DATA_CHANGED_AT: now}


def json_compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))

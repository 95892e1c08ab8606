"""The YAML `vgpu-operator validate` reads: each document of a file with the line it starts on,
as kubectl hands it to the apiserver (JSON: a timestamp stays a string, every map key is a
string), bounded (aliases may not expand a document past MAX_VALUES values), and a YAML error
as a problem of the file, never an exception."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml

from vgpu_operator.commands.validate_spec import Problem


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, a timestamp left as the string it is (kubectl's YAML reader turns
    the document into JSON, where a date is a string)."""

    def construct_timestamp_text(self, node: yaml.ScalarNode) -> str:
        return str(node.value)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _Loader.construct_timestamp_text)


# What a document's aliases may expand it to: kubectl's YAML reader refuses "excessive
# aliasing" too (go-yaml/yaml@v3.0.1:decode.go, allowedAliasRatio); the models walk every
# value, so nine anchors of nine aliases each would be 9^9 values to them.
MAX_VALUES = 1_000_000


def expanded_size(value: Any, sizes: dict[int, int] | None = None) -> int:
    """How many values `value` holds once every alias is written out (a cycle: unbounded)."""
    sizes = {} if sizes is None else sizes
    if not isinstance(value, (dict, list)):
        return 1
    if id(value) in sizes:
        return sizes[id(value)]
    sizes[id(value)] = MAX_VALUES + 1  # met again before it is summed: a cycle
    children = value.values() if isinstance(value, dict) else value
    total = 1
    for child in children:
        total += expanded_size(child, sizes)
        if total > MAX_VALUES:
            break
    sizes[id(value)] = total
    return total


def as_json(value: Any, seen: dict[int, Any] | None = None) -> Any:
    """A YAML value as JSON has it: every map key a string (`1` -> "1", `true` -> "true").
    A value an alias repeats is converted once (nine anchors of nine aliases stay 81 values,
    not 9^9)."""
    seen = {} if seen is None else seen
    if not isinstance(value, (dict, list)):
        return value
    if id(value) not in seen:
        if isinstance(value, dict):
            seen[id(value)] = {_json_key(k): as_json(v, seen) for k, v in value.items()}
        else:
            seen[id(value)] = [as_json(v, seen) for v in value]
    return seen[id(value)]


def _json_key(key: Any) -> str:
    if isinstance(key, bool) or key is None:
        return json.dumps(key)
    return str(key)


def parse(text: str) -> Iterator[tuple[int, Any]]:
    """(line, document) for each document of `text` that is not empty; a YAML error ends it
    with a (line, Problem) pair."""
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            document = loader.construct_document(node)
            line = node.start_mark.line + 1
            if document is not None and expanded_size(document) > MAX_VALUES:
                yield (
                    line,
                    Problem(
                        "<yaml>",
                        f"its aliases expand it past {MAX_VALUES} values (or it holds itself)",
                        "write the values out instead of repeating anchors",
                        None,
                    ),
                )
                return
            if document is not None:
                yield line, as_json(document)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        where = f" at line {line}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc)
        yield line, Problem("<yaml>", f"not valid YAML{where}: {what}", "fix the YAML syntax", None)
    except RecursionError:
        yield 1, Problem("<yaml>", "nested too deeply to read", "flatten the document", None)
    finally:
        loader.dispose()

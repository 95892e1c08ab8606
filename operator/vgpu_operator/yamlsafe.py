"""YAML from the cluster, read so that no document can cost more than its size.

Anyone who may edit a ConfigMap the operator reads decides what this parses, so:

- aliases are refused before anything is expanded: a "billion laughs" document of a few hundred
  bytes (nine anchors of nine aliases each) would otherwise become 9^9 values for whoever walks
  it (an anchor alone is harmless and kept);
- integers are bounded: a scalar of more than 20 digits, or a value outside the 64-bit range the
  Go readers (yaml.v2/v3 into int/int64/uint64) take, is refused before Python converts it
  (CPython refuses more than 4,300 digits with a ValueError of its own, after quadratic work);
- timestamps are not constructed: a YAML 1.1 timestamp stays the string it was (`9999-12-31T
  23:59:59.5Z` cannot overflow date arithmetic later, and a month 13 cannot raise);
- flow collections nested deeper than MAX_FLOW_DEPTH are refused by a linear scan before any
  parser sees them (`[` x 5,000 costs ruamel's scanner 20 s of CPU, its work per token grows
  with the depth); block nesting deeper than the interpreter's recursion limit, and any other
  failure, is one `YamlRefused` (a ValueError) naming what was wrong, never another exception.

`load(text)` is PyYAML's safe loader with these rules (what the Go readers see, YAML 1.1);
`json_loads(text)` is `json.loads` with the integer bound; `check_round_trip(yaml, text)`
applies the alias and integer rules to ruamel's round-trip loader (the renderers, which keep
comments) by reading its event stream, which builds nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_INT_DIGITS = 20  # 2**64 has 20 digits
MAX_FLOW_DEPTH = 64  # `[`/`{` nesting; the components' own files nest a few levels
INT64_MIN = -(2**63)
UINT64_MAX = 2**64 - 1
# A plain scalar that YAML 1.1 or 1.2 resolves as an integer (decimal, 0x, 0o, 0b, sexagesimal).
_INTEGER = re.compile(r"^[-+]?(0[xob])?[0-9a-fA-F_:]+$")


class YamlRefused(ValueError):
    """The document is refused (aliases, an unbounded integer, too deep) or does not parse."""


def _alias_refused(mark: Any) -> YamlRefused:
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return YamlRefused(
        f"YAML aliases (*name) are refused{where}: write the values out instead of "
        "referring to an anchor"
    )


def _digits(text: str) -> int:
    return sum(c.isalnum() for c in text.removeprefix("-").removeprefix("+"))


_OPENS_AFTER = frozenset("\n:,-[{?")


def flow_depth(text: str) -> int:
    """The deepest nesting of flow collections (`[`, `{`) in a YAML or JSON text, from one
    pass over it: quoted scalars and comments are skipped, and a bracket counts only where a
    flow collection can start (after a line start, `:`, `,`, `-`, `?` or another bracket, spaces
    between), not inside a plain scalar such as `a[0]`."""
    depth = deepest = 0
    quote = ""
    last = "\n"  # the last character that is not a space, outside quotes
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                if quote == "'" and i + 1 < n and text[i + 1] == "'":
                    i += 2
                    continue
                quote = ""
                last = c
            i += 1
            continue
        if c in "'\"" and last in _OPENS_AFTER | {" "}:
            quote = c
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n"):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif c in "[{" and last in _OPENS_AFTER:
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}" and depth:
            depth -= 1
        if c not in " \t\r":
            last = c
        i += 1
    return deepest


def _check_depth(text: str) -> None:
    deepest = flow_depth(text)
    if deepest > MAX_FLOW_DEPTH:
        raise YamlRefused(
            f"collections nested {deepest} levels deep are refused (at most {MAX_FLOW_DEPTH})"
        )


def _bounded_int(loader: Any, node: ScalarNode) -> int:
    text = str(node.value)
    if _digits(text) > MAX_INT_DIGITS:
        raise ConstructorError(
            None,
            None,
            f"an integer of {_digits(text)} digits is refused (at most {MAX_INT_DIGITS})",
            node.start_mark,
        )
    value = int(SafeConstructor.construct_yaml_int(loader, node))
    if not INT64_MIN <= value <= UINT64_MAX:
        raise ConstructorError(
            None, None, f"integer {value} is outside the 64-bit range", node.start_mark
        )
    return value


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader refusing aliases and big integers, leaving timestamps as strings."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):
            raise _alias_refused(self.peek_event().start_mark)  # type: ignore[no-untyped-call]
        return super().compose_node(parent, index)

    def construct_bounded_int(self, node: ScalarNode) -> int:
        return _bounded_int(self, node)

    def construct_timestamp_text(self, node: ScalarNode) -> str:
        return str(node.value)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_bounded_int)
_BoundedLoader.add_constructor(
    "tag:yaml.org,2002:timestamp", _BoundedLoader.construct_timestamp_text
)

# libyaml's parser and composer (C; the Go readers' yaml.v2 is a port of libyaml) when PyYAML
# was built with it: about seven times faster than the pure Python ones. Its composer hands an
# alias back as the very node its anchor names, so an alias is a node met twice in the graph:
# `_check_nodes` finds it without expanding anything, before construction.
_CSafeLoader: Any = getattr(yaml, "CSafeLoader", None)
_FastLoader: Any = None
if _CSafeLoader is not None:
    _FastLoader = type("_FastLoader", (_CSafeLoader,), {})
    _FastLoader.add_constructor(
        "tag:yaml.org,2002:int",
        _bounded_int,
    )
    _FastLoader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: str(node.value))


def _check_nodes(root: Node, *, plain_ints: bool = False) -> None:
    """Refuse a composed document holding an alias (a node met twice) and, with `plain_ints`,
    a plain scalar that reads as an integer of more than MAX_INT_DIGITS digits."""
    seen: set[int] = set()
    stack: list[Node] = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            raise _alias_refused(node.start_mark)
        seen.add(id(node))
        if isinstance(node, SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
        elif plain_ints and isinstance(node, ScalarNode) and not node.style:
            value = str(node.value)
            if _INTEGER.match(value) and _digits(value) > MAX_INT_DIGITS:
                raise YamlRefused(
                    f"an integer of {_digits(value)} digits is refused (at most {MAX_INT_DIGITS})"
                )


def _compose(text: str) -> tuple[Any, Node | None]:
    """libyaml's loader and its composed document (None: empty), aliases refused."""
    loader = _FastLoader(text)
    node = loader.get_single_node()
    if node is not None:
        _check_nodes(node, plain_ints=True)
    return loader, node


def load(text: str) -> Any:
    """One YAML document (YAML 1.1, as the Go readers) under the rules above."""
    _check_depth(text)
    loader: Any = None
    try:
        if _FastLoader is not None:
            loader, node = _compose(text)
            return None if node is None else loader.construct_document(node)
        loader = _BoundedLoader(text)  # its reader refuses control characters at once
        return loader.get_single_data()
    except YamlRefused:
        raise
    except yaml.YAMLError as exc:
        raise YamlRefused(str(exc)) from exc
    except RecursionError as exc:
        raise YamlRefused("nested too deeply") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        raise YamlRefused(f"{type(exc).__name__}: {exc}") from exc
    finally:
        if loader is not None:
            loader.dispose()


def _json_int(text: str) -> int:
    if _digits(text) > MAX_INT_DIGITS:
        raise YamlRefused(
            f"an integer of {_digits(text)} digits is refused (at most {MAX_INT_DIGITS})"
        )
    return int(text)


def json_loads(text: str) -> Any:
    """JSON with the same integer and depth bounds; every failure is a `YamlRefused` (a
    ValueError)."""
    _check_depth(text)
    try:
        return json.loads(text, parse_int=_json_int)
    except YamlRefused:
        raise
    except RecursionError as exc:
        raise YamlRefused("nested too deeply") from exc
    except ValueError as exc:
        raise YamlRefused(f"not valid JSON: {exc}") from exc


def check_round_trip(parser: Any, text: str) -> None:
    """Refuse `text` before ruamel's loader `parser` (a `ruamel.yaml.YAML`) constructs it: an
    alias anywhere, a plain integer scalar of more than MAX_INT_DIGITS digits, flow collections
    nested deeper than MAX_FLOW_DEPTH. With libyaml this composes the document in C (what is
    not YAML to it, the Go readers' parser, is refused too); without, it reads `parser`'s own
    event stream."""
    _check_depth(text)
    if _FastLoader is not None:
        loader = None
        try:
            loader, _ = _compose(text)
            return
        except YamlRefused:
            raise
        except RecursionError as exc:
            raise YamlRefused("nested too deeply") from exc
        except Exception as exc:
            raise YamlRefused(f"not valid YAML: {exc}") from exc
        finally:
            if loader is not None:
                loader.dispose()
    try:
        for event in parser.parse(text):
            name = type(event).__name__
            if name == "AliasEvent":
                raise _alias_refused(getattr(event, "start_mark", None))
            if name == "ScalarEvent" and not getattr(event, "style", None):
                value = str(getattr(event, "value", ""))
                if _INTEGER.match(value) and _digits(value) > MAX_INT_DIGITS:
                    raise YamlRefused(
                        f"an integer of {_digits(value)} digits is refused (at most "
                        f"{MAX_INT_DIGITS})"
                    )
    except YamlRefused:
        raise
    except RecursionError as exc:
        raise YamlRefused("nested too deeply") from exc
    except Exception as exc:  # ruamel's own errors: the loader would raise them the same way
        raise YamlRefused(f"not valid YAML: {exc}") from exc


__all__ = [
    "MAX_FLOW_DEPTH",
    "MAX_INT_DIGITS",
    "YamlRefused",
    "check_round_trip",
    "flow_depth",
    "json_loads",
    "load",
]

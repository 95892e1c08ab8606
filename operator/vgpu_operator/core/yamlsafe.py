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
- nesting deeper than the interpreter's recursion limit, and any other failure, is one
  `YamlRefused` (a ValueError) naming what was wrong, never another exception.

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
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import ScalarNode

MAX_INT_DIGITS = 20  # 2**64 has 20 digits
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


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader refusing aliases and big integers, leaving timestamps as strings."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):
            raise _alias_refused(self.peek_event().start_mark)  # type: ignore[no-untyped-call]
        return super().compose_node(parent, index)

    def construct_bounded_int(self, node: ScalarNode) -> int:
        text = str(node.value)
        if _digits(text) > MAX_INT_DIGITS:
            raise ConstructorError(
                None,
                None,
                f"an integer of {_digits(text)} digits is refused (at most {MAX_INT_DIGITS})",
                node.start_mark,
            )
        value = int(super().construct_yaml_int(node))
        if not INT64_MIN <= value <= UINT64_MAX:
            raise ConstructorError(
                None, None, f"integer {value} is outside the 64-bit range", node.start_mark
            )
        return value

    def construct_timestamp_text(self, node: ScalarNode) -> str:
        return str(node.value)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_bounded_int)
_BoundedLoader.add_constructor(
    "tag:yaml.org,2002:timestamp", _BoundedLoader.construct_timestamp_text
)


def load(text: str) -> Any:
    """One YAML document (YAML 1.1, as the Go readers) under the rules above."""
    loader: _BoundedLoader | None = None
    try:
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
    """JSON with the same integer bound; every failure is a `YamlRefused` (a ValueError)."""
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
    alias anywhere, or a plain integer scalar of more than MAX_INT_DIGITS digits."""
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


__all__ = ["MAX_INT_DIGITS", "YamlRefused", "check_round_trip", "json_loads", "load"]

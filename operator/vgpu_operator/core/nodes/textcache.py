"""A cache of what was parsed from annotation texts, bounded in bytes.

The nodes of a pool carry the same few annotation texts and every watch event of every node is
parsed, so parsing each distinct text once pays. But the texts come from the cluster: anyone who
may annotate Nodes chooses them, so the cache is bounded by what its entries cost, not by their
number (4,096 entries of 256 KiB texts would be 1 GiB). An entry costs its text plus what was
parsed from it, estimated as `COST_PER_CHAR` bytes per character (measured: a parsed NodeConfig
takes up to 17 times its JSON text, small objects per few characters being the worst case) plus
`COST_PER_ENTRY`; texts longer than `MAX_TEXT` are parsed every time and never kept. Least
recently used entries go first. Thread-safe (the tests run controllers in threads).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

COST_PER_CHAR = 32
COST_PER_ENTRY = 1024
MAX_TEXT = 64 * 1024
ANNOTATION_BUDGET = 16 * 1024 * 1024  # every annotation cache of the process together


def cost(text: str | None) -> int:
    return COST_PER_CHAR * len(text or "") + COST_PER_ENTRY


class TextCache:
    """`get(kind, text, parse)`: `parse(text)` once per (kind, text) while it stays cached."""

    def __init__(self, budget: int = ANNOTATION_BUDGET, max_text: int = MAX_TEXT) -> None:
        self.budget = budget
        self.max_text = max_text
        self.used = 0
        self._entries: OrderedDict[tuple[Hashable, str | None], tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, kind: Hashable, text: str | None, parse: Callable[[str | None], T]) -> T:
        key = (kind, text)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                value: T = hit[0]
                return value
        value = parse(text)
        size = cost(text)
        if text is not None and len(text) > self.max_text:
            return value
        with self._lock:
            if key not in self._entries:
                self._entries[key] = (value, size)
                self.used += size
                while self.used > self.budget and self._entries:
                    _, (_, dropped) = self._entries.popitem(last=False)
                    self.used -= dropped
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.used = 0


# The one cache of parsed node annotations (core.nodes.facts): 16 MiB for all of them together.
ANNOTATIONS = TextCache()


# Parts that kept objects repeat: a pool's Nodes carry the same capacity, annotations and taints,
# a Deployment's replicas the same containers and labels. Each distinct part is kept once, by its
# JSON text, and every object that has an equal part holds that one: kept objects are read,
# never written. Bounded like the annotations (the objects are anyone's who may create them).
PARTS = TextCache(budget=4 * 1024 * 1024)


def shared(value: T) -> T:
    """An object equal to `value` (JSON: dicts, lists, strings, numbers), the one kept for its
    text; `value` itself the first time, or when it is empty."""
    if not value:
        return value
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    kept: T = PARTS.get("part", text, lambda _text: value)
    return kept

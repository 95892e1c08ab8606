"""The caches of parsed node annotations are bounded in bytes, together: distinct large
annotations (anyone who may annotate Nodes chooses them) never hold more than 16 MiB."""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Iterator

import pytest

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.textcache import ANNOTATION_BUDGET, ANNOTATIONS, MAX_TEXT, TextCache
from vgpu_operator.models.node import NodeConfig

MIB = 1024 * 1024


@pytest.fixture
def empty_cache() -> Iterator[None]:
    ANNOTATIONS.clear()
    yield
    ANNOTATIONS.clear()


def owned_text(i: int, size: int) -> str:
    """A valid, trusted ownership record of about `size` bytes, distinct per `i`."""
    labels = {f"example.com/k{i}-{j}": "v" * 40 for j in range(size // 70)}
    return json.dumps({"labels": labels})


def config_text(i: int, size: int) -> str:
    """A valid released configuration of about `size` bytes (many small objects per byte)."""
    uuids = [f"GPU-{i}-{j}" for j in range(size // 16)]
    return NodeConfig.model_validate(
        {"mode": "hami-core", "hamiCore": {"filterDevices": {"uuid": uuids}}}
    ).to_annotation()


def node(i: int, owned: str, config: str) -> dict[str, object]:
    return {
        "metadata": {
            "name": f"n{i}",
            "annotations": {contract.ANN_OWNED: owned, contract.ANN_CONFIG: config},
        }
    }


def test_distinct_large_annotations_keep_at_most_16_mib(empty_cache: None) -> None:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(80):  # unbounded, about 32 MiB would stay (texts and what they parse to)
        facts = node_facts(node(i, owned_text(i, 60_000), config_text(i, 55_000)))
        assert facts.errors == {} and facts.config is not None
        del facts
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert ANNOTATIONS.used <= ANNOTATION_BUDGET
    assert kept <= ANNOTATION_BUDGET + 2 * MIB, f"{kept / MIB:.1f} MiB kept"
    assert 0 < len(ANNOTATIONS) < 2 * 80  # the oldest went first


def test_the_same_text_is_parsed_once(empty_cache: None) -> None:
    text = config_text(0, 2_000)
    first = node_facts(node(0, owned_text(0, 500), text)).config
    again = node_facts(node(1, owned_text(0, 500), text)).config
    assert first is again  # shared: parsed once


def test_texts_over_the_limit_are_never_kept() -> None:
    cache = TextCache(budget=MIB)
    calls: list[str | None] = []

    def parse(text: str | None) -> int:
        calls.append(text)
        return len(text or "")

    big = "x" * (MAX_TEXT + 1)
    assert cache.get("k", big, parse) == cache.get("k", big, parse) == MAX_TEXT + 1
    assert len(calls) == 2 and len(cache) == 0 and cache.used == 0
    cache.get("k", "small", parse)
    cache.get("k", "small", parse)
    assert calls[2:] == ["small"] and len(cache) == 1

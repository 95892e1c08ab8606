"""YAML and JSON from the cluster: aliases refused before anything is expanded, integers and
nesting bounded, timestamps left as text; every failure one ValueError, and none costly."""

from __future__ import annotations

import contextlib
import time

import pytest
from ruamel.yaml import YAML

from tests.kit.hostile import BOMB
from vgpu_operator import yamlsafe


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (BOMB, "aliases"),
        ("base: &b {x: 1}\nother:\n  <<: *b\n", "aliases"),  # a merge key is an alias too
        ("n: " + "9" * 21, "21 digits"),
        ("n: 18446744073709551616", "64-bit range"),
        ("n: -9223372036854775809", "64-bit range"),
        ("n: 0x" + "f" * 30, "digits"),
        ("[" * 65 + "]" * 65, "nested 65 levels"),
        ("a: [1, 2", "expected"),
        ("\x1b", "characters are not allowed"),
    ],
)
def test_refused(text: str, problem: str) -> None:
    with pytest.raises(yamlsafe.YamlRefused, match=problem):
        yamlsafe.load(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("a: &anchor 1\nb: 2\n", {"a": 1, "b": 2}),  # an anchor alone is harmless
        ("n: 18446744073709551615", {"n": 2**64 - 1}),
        ("n: -9223372036854775808", {"n": -(2**63)}),
        ("t: 9999-12-31T23:59:59.5Z", {"t": "9999-12-31T23:59:59.5Z"}),  # not constructed
        ("t: 2026-13-01", {"t": "2026-13-01"}),
        ("k: a[0] [1]\n", {"k": "a[0] [1]"}),  # brackets inside a plain scalar
    ],
)
def test_accepted(text: str, value: object) -> None:
    assert yamlsafe.load(text) == value


def test_64_levels_are_fine() -> None:
    value = yamlsafe.load("[" * 64 + "]" * 64)
    for _ in range(63):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []


def test_round_trip_check_refuses_what_load_refuses() -> None:
    parser = YAML(typ="rt")
    for text in (BOMB, "n: " + "1" * 30, "{" * 100):
        with pytest.raises(yamlsafe.YamlRefused):
            yamlsafe.check_round_trip(parser, text)
    yamlsafe.check_round_trip(parser, "a: &x [1]\nb: '*not-an-alias'\n")


def test_json_bounds_integers_and_depth() -> None:
    assert yamlsafe.json_loads('{"a": [1, 18446744073709551615]}') == {"a": [1, 2**64 - 1]}
    for text in ('{"a": ' + "1" * 4301 + "}", "[" * 5000, '{"a": 1'):
        with pytest.raises(yamlsafe.YamlRefused):
            yamlsafe.json_loads(text)


@pytest.mark.parametrize(
    "text", ["[" * 100_000, "{" * 100_000, BOMB * 100, "a:\n" + "- [x, {y: [z]}]\n" * 5_000]
)
def test_nothing_costs_more_than_its_size(text: str) -> None:
    started = time.process_time()
    for load in (yamlsafe.load, lambda t: yamlsafe.check_round_trip(YAML(typ="rt"), t)):
        with contextlib.suppress(yamlsafe.YamlRefused):
            load(text)
    assert time.process_time() - started < 5.0

"""The tests' own layout: no test module imports another test module. What tests share lives in
the kits (tests/kit/ for the unit tests; tests/cluster/*kit.py, helpers.py, volcano_env.py and
the like for the cluster tests), so a test module can be moved, renamed or deleted alone. The
check is shown failing on a break made in memory."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def is_test_module(dotted: str) -> bool:
    return dotted.rsplit(".", 1)[-1].startswith("test_")


def imported_test_modules(source: str) -> list[str]:
    """The test modules `source` imports (`import tests.x.test_y`, `from tests.x.test_y import
    z`, `from tests.x import test_y`), as dotted names."""
    found: list[str] = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import):
            found += [a.name for a in n.names if is_test_module(a.name)]
        elif isinstance(n, ast.ImportFrom) and n.module:
            if is_test_module(n.module):
                found.append(n.module)
            else:
                found += [f"{n.module}.{a.name}" for a in n.names if is_test_module(a.name)]
    return found


def all_test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_the_test_files_are_found() -> None:
    names = {p.relative_to(TESTS).as_posix() for p in all_test_files()}
    assert "unit/test_test_layout.py" in names
    assert any(n.startswith("cluster/") for n in names)
    assert len(names) > 100, len(names)


def test_no_test_module_imports_another() -> None:
    bad = {
        p.relative_to(TESTS).as_posix(): found
        for p in all_test_files()
        if (found := imported_test_modules(p.read_text()))
    }
    assert bad == {}, "move what they share into a kit module: " + repr(bad)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        (
            "from tests.unit.agent.test_agent_loop import DYN\n",
            ["tests.unit.agent.test_agent_loop"],
        ),
        ("import tests.cluster.test_examples as ex\n", ["tests.cluster.test_examples"]),
        ("from tests.unit.core import test_plan, plan_world\n", ["tests.unit.core.test_plan"]),
        (  # inside a function too
            "def f():\n    from tests.unit.controller.test_write_backoff import FakeApi\n",
            ["tests.unit.controller.test_write_backoff"],
        ),
        ("from tests.kit.fakeapi import FakeApi\nimport pytest\n", []),
        ("from vgpu_operator.core import plan\nfrom tests.cluster.helpers import unique\n", []),
    ],
)
def test_the_check_sees_a_test_module_import(source: str, found: list[str]) -> None:
    assert imported_test_modules(source) == found


def test_the_check_fails_on_a_break_made_in_memory() -> None:
    tree = {p: p.read_text() for p in all_test_files()}
    victim = TESTS / "unit" / "agent" / "test_agent_mig_manager.py"
    assert victim in tree
    tree[victim] = "from tests.unit.agent.test_agent_loop import DYN\n" + tree[victim]
    bad = {p: f for p, text in tree.items() if (f := imported_test_modules(text))}
    assert bad == {victim: ["tests.unit.agent.test_agent_loop"]}

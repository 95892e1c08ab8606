"""The package's shape: no import cycle (imports under TYPE_CHECKING count too), and every API
call through the one seam (`kubeapi`): nothing else builds requests or reads watch streams."""

from __future__ import annotations

import ast
from pathlib import Path

import vgpu_operator

ROOT = Path(vgpu_operator.__file__).parent
PACKAGE = "vgpu_operator"


def module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in ROOT.rglob("*.py")}


def imports(path: Path, known: set[str]) -> set[str]:
    """The package's modules that `path` imports, wherever the import stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return {m for m in found if m in known}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph[v]:
                groups.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return groups


def test_the_package_has_no_import_cycle() -> None:
    found = modules()
    known = set(found)
    graph = {}
    for name, path in found.items():
        edges = imports(path, known) - {name}
        # A package's own __init__ re-exporting its submodules is not a cycle: importing a
        # submodule runs the package first by design.
        graph[name] = {e for e in edges if not name.startswith(e + ".")}
    assert cycles(graph) == []


def test_the_checker_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_only_the_seam_makes_requests_or_reads_watch_streams() -> None:
    """`call_api` (the library's request machinery) and `watch=true` streams live in kubeapi;
    the agent and the controller use `kubeapi.request` and `kubeapi.list_watch`."""
    offenders = []
    for name, path in modules().items():
        if name.startswith(f"{PACKAGE}.kubeapi"):
            continue
        text = path.read_text()
        if "call_api(" in text or '"watch"' in text or "allowWatchBookmarks" in text:
            offenders.append(name)
    assert offenders == []

"""The package's shape, as docs/architecture.md draws it: no import cycle (imports inside
functions count too), no import up the floors (models never reach into core, core never into
the API seam, the controller or the agent, and each wing of core only into the wings below it),
no module importing another module's private name, and every API call through the one seam
(`kubeapi`).

Each check is a pure function over {module name: source text}; the tests run it on the real
package, and on a copy of the real package's sources with one deliberate break made in memory,
so a check that could never fail would fail here."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import vgpu_operator

ROOT = Path(vgpu_operator.__file__).parent
PACKAGE = "vgpu_operator"

Sources = Mapping[str, str]

# The floors, lowest first: each room may import itself and the rooms listed for it, nothing
# else. docs/architecture.md shows the same table; a new module lands in the room its path says.
GROUND = "ground"
ALLOWED: dict[str, frozenset[str]] = {
    GROUND: frozenset(),
    "models": frozenset({GROUND}),
    "kubeapi": frozenset({GROUND}),
    "crdgen": frozenset({GROUND, "models"}),
    "core.mig": frozenset({GROUND, "models"}),
    "core.dra": frozenset({GROUND, "models"}),
    "core.admission": frozenset({GROUND, "models"}),
    "core.nodes": frozenset({GROUND, "models", "core.mig"}),
    "core.volcano": frozenset(
        {GROUND, "models", "core.mig", "core.dra", "core.admission", "core.nodes"}
    ),
    "core.rollout": frozenset(
        {GROUND, "models", "core.mig", "core.dra", "core.admission", "core.nodes", "core.volcano"}
    ),
    "core.rules": frozenset(
        {GROUND, "models", "core.mig", "core.dra", "core.admission", "core.nodes", "core.volcano"}
    ),
}
CORE_WINGS = (
    "core.mig",
    "core.dra",
    "core.admission",
    "core.nodes",
    "core.volcano",
    "core.rollout",
    "core.rules",
)
ALLOWED["core"] = frozenset({GROUND, "models", *CORE_WINGS})
ALLOWED["controller"] = ALLOWED["core"] | {"core", "kubeapi"}
ALLOWED["agent"] = ALLOWED["controller"]
ALLOWED["commands"] = frozenset(ALLOWED) | {"controller", "agent"}


def room(module: str) -> str:
    """The room a module lives in: a wing of core, a folder, or the ground floor."""
    parts = [*module.split(".")[1:], "", ""]
    if parts[0] == "core":
        wing = f"core.{parts[1]}"
        return wing if wing in CORE_WINGS else "core"
    if parts[0] in ("models", "kubeapi", "controller", "agent", "commands", "crdgen"):
        return parts[0]
    return GROUND


def module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_sources() -> dict[str, str]:
    return {module_name(p): p.read_text() for p in ROOT.rglob("*.py")}


def imported(source: str, known: set[str]) -> Iterator[tuple[str, str | None]]:
    """(module, name) for each package module a source imports, wherever the import stands;
    name is the imported attribute for `from module import name` of a non-module, else None."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from ((a.name, None) for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module not in known:
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield (sub, None) if sub in known else (node.module, alias.name)


def import_graph(sources: Sources) -> dict[str, set[str]]:
    known = set(sources)
    graph = {}
    for name, source in sources.items():
        edges = {m for m, _ in imported(source, known)} - {name}
        # A package's own __init__ re-exporting its submodules is not a cycle: importing a
        # submodule runs the package first by design.
        graph[name] = {e for e in edges if not name.startswith(e + ".")}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
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


def upward_imports(sources: Sources) -> list[str]:
    """`importer -> imported` for every import a room's row in ALLOWED does not list."""
    found = []
    for name, edges in import_graph(sources).items():
        for target in sorted(edges):
            if room(target) != room(name) and room(target) not in ALLOWED[room(name)]:
                found.append(f"{name} -> {target}")
    return found


def private_imports(sources: Sources) -> list[str]:
    """`importer -> module._name` for every private name one module takes from another."""
    known = set(sources)
    found = []
    for name, source in sources.items():
        for module, attr in imported(source, known):
            private = attr is not None and attr.startswith("_") and not attr.startswith("__")
            if private and module != name:
                found.append(f"{name} -> {module}.{attr}")
    return found


def broken(sources: Sources, module: str, line: str) -> dict[str, str]:
    """The package's sources with one import added to one module, in memory."""
    return {**sources, module: sources[module] + f"\n{line}\n"}


# The real package.


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(import_graph(package_sources())) == []


def test_no_module_imports_up_the_floors() -> None:
    assert upward_imports(package_sources()) == []


def test_no_module_imports_another_modules_private_name() -> None:
    assert private_imports(package_sources()) == []


def test_every_module_has_a_room_with_a_row() -> None:
    assert {room(m) for m in package_sources()} <= set(ALLOWED)


# Each check, failing on a deliberate break.


def test_the_cycle_check_fails_on_a_cycle_made_in_memory() -> None:
    # core.nodes.planner imports core.nodes.facts; make facts import the planner back
    sources = broken(
        package_sources(), f"{PACKAGE}.core.nodes.facts", "import vgpu_operator.core.nodes.planner"
    )
    found = cycles(import_graph(sources))
    assert len(found) == 1
    assert {f"{PACKAGE}.core.nodes.facts", f"{PACKAGE}.core.nodes.planner"} <= set(found[0])
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_the_floor_check_fails_when_models_reach_into_core() -> None:
    sources = broken(
        package_sources(),
        f"{PACKAGE}.models.policy",
        "from vgpu_operator.core.nodes.facts import NodeFacts",
    )
    assert upward_imports(sources) == [f"{PACKAGE}.models.policy -> {PACKAGE}.core.nodes.facts"]


def test_the_floor_check_fails_when_core_reaches_into_the_seam_or_the_shells() -> None:
    sources = package_sources()
    for line, target in [
        ("from vgpu_operator.kubeapi import request", "kubeapi"),
        ("from vgpu_operator.controller.app import start", "controller.app"),
        ("import vgpu_operator.agent.loop", "agent.loop"),
    ]:
        found = upward_imports(broken(sources, f"{PACKAGE}.core.plan", line))
        assert found == [f"{PACKAGE}.core.plan -> {PACKAGE}.{target}"]


def test_the_floor_check_fails_when_a_wing_reaches_up_a_wing() -> None:
    sources = broken(
        package_sources(),
        f"{PACKAGE}.core.nodes.patch",
        "from vgpu_operator.core.rollout.decide import decide_cluster",
    )
    assert upward_imports(sources) == [
        f"{PACKAGE}.core.nodes.patch -> {PACKAGE}.core.rollout.decide"
    ]


def test_the_private_name_check_fails_on_a_private_import() -> None:
    sources = broken(
        package_sources(),
        f"{PACKAGE}.core.rollout.leave",
        "from vgpu_operator.core.rollout.arrive import _finish",
    )
    assert private_imports(sources) == [
        f"{PACKAGE}.core.rollout.leave -> {PACKAGE}.core.rollout.arrive._finish"
    ]


# The one seam.


def test_only_the_seam_makes_requests_or_reads_watch_streams() -> None:
    """`call_api` (the library's request machinery) and `watch=true` streams live in kubeapi;
    the agent and the controller use `kubeapi.request` and `kubeapi.list_watch`."""
    offenders = []
    for name, text in package_sources().items():
        if name.startswith(f"{PACKAGE}.kubeapi"):
            continue
        if "call_api(" in text or '"watch"' in text or "allowWatchBookmarks" in text:
            offenders.append(name)
    assert offenders == []

"""A recording stand-in for the apiserver at the one seam every write goes through,
`kubeapi.request`: each call is recorded in order (method, path, body, content type, loop time),
answered by the newest route that matches it, or refused with a `kubeapi` error.

    api = FakeApi().install(monkeypatch)
    api.route("GET", r"/api/v1/nodes/[^/]+", lambda call: nodes[call.name])
    api.refuse("volcano-vgpu-node-config", kubeapi.error_for(422, "", body=...))
    ...
    api.accept("volcano-vgpu-node-config")  # the refusal goes away
    assert api.sent() == [("POST", "configmaps"), ("PATCH", "volcano-vgpu-node-config")]

A request no route matches is answered with the object it names ({"metadata": {"name", "uid"}}),
or fails the test when the FakeApi is `strict`. `FakeNodes` serves a pool of Nodes through it, as
the policy reconciler reads and writes them.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.kit.nodekit import apply, node, parsed, policy
from vgpu_operator import kubeapi
from vgpu_operator.controller.reconciler import PolicyEntry
from vgpu_operator.core.nodes.facts import NodeFacts, node_facts

ANY = "*"
NODE_PATH = r"/api/v1/nodes/[^/]+"


@dataclass(frozen=True)
class Call:
    """One request as the code under test made it."""

    method: str
    path: str
    body: Any = None
    content_type: str = kubeapi.JSON
    at: float = field(default=0.0, compare=False)  # the event loop's time

    @property
    def name(self) -> str:
        """The last path segment: the object's name (or the collection's, for a POST)."""
        return self.path.rsplit("/", 1)[-1]


Answer = Mapping[str, Any] | Callable[[Call], Any]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    answer: Answer | None = None
    error: kubeapi.ApiError | None = None

    def matches(self, call: Call) -> bool:
        return self.method in (ANY, call.method) and self.pattern.fullmatch(call.path) is not None


class FakeApi:
    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self.calls: list[Call] = []
        self._routes: dict[tuple[str, str], Route] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeApi:
        monkeypatch.setattr(kubeapi, "request", self.request)
        return self

    # --- what the test sets up -----------------------------------------------------------------

    def route(
        self,
        method: str,
        path: str,
        answer: Answer | None = None,
        *,
        error: kubeapi.ApiError | None = None,
    ) -> None:
        """Answer `method` requests (ANY: every method) whose path fullmatches the regex `path`:
        with `answer` (a mapping, returned as a copy, or a function of the Call; None answers
        {}) or by raising `error`. Routing the same (method, path) again replaces the route and
        makes it the newest."""
        self._routes.pop((method, path), None)
        self._routes[(method, path)] = Route(method, re.compile(path), answer, error)

    def unroute(self, method: str, path: str) -> None:
        del self._routes[(method, path)]

    def refuse(self, name: str, error: kubeapi.ApiError, method: str = ANY) -> None:
        """Requests on the object (or collection) `name` raise `error` until `accept(name)`."""
        self.route(method, _named(name), error=error)

    def accept(self, name: str, method: str = ANY) -> None:
        self.unroute(method, _named(name))

    # --- the seam ------------------------------------------------------------------------------

    async def request(
        self,
        _api: Any,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = kubeapi.JSON,
        **_: Any,
    ) -> dict[str, Any]:
        call = Call(method, path, body, content_type, asyncio.get_running_loop().time())
        self.calls.append(call)
        for r in reversed(self._routes.values()):
            if r.matches(call):
                if r.error is not None:
                    raise r.error
                if r.answer is None:
                    return {}
                if callable(r.answer):
                    return r.answer(call)  # type: ignore[no-any-return]
                return copy.deepcopy(dict(r.answer))
        if self.strict:
            raise AssertionError(f"unexpected {method} {path}")
        return {"metadata": {"name": call.name, "uid": f"uid-{call.name}"}}

    # --- what the test reads -------------------------------------------------------------------

    def sent(self, method: str = ANY) -> list[tuple[str, str]]:
        """(method, object name) of every call, in order."""
        return [(c.method, c.name) for c in self.calls if method in (ANY, c.method)]

    def bodies(self, method: str, path: str) -> list[Any]:
        """The bodies of the `method` calls whose path fullmatches the regex `path`."""
        pattern = re.compile(path)
        return [c.body for c in self.calls if c.method == method and pattern.fullmatch(c.path)]

    def count(self, name: str, method: str = ANY) -> int:
        return sum(1 for m, n in self.sent(method) if n == name)


def _named(name: str) -> str:
    return rf".*/{re.escape(name)}"


class FakeNodes:
    """Nodes in a dict behind a strict FakeApi, as the policy reconciler sees them: GET and merge
    PATCH (with the apiserver's resourceVersion check) of each Node, and PATCHes of a policy's
    status; `refuse(node, error)` makes that node's PATCHes fail. `snapshot` is the reconciler's
    view: every node, and one policy "p" with `spec`."""

    def __init__(self, api: FakeApi, names: Iterable[str], spec: Mapping[str, Any]) -> None:
        self.api = api
        self.spec = dict(spec)
        self.nodes = {n: node(n, {"pool": "a"}) for n in names}
        api.route("GET", NODE_PATH, lambda call: self.nodes[call.name])
        api.route("PATCH", NODE_PATH, self._patch)
        api.route("PATCH", r".*/status")

    def _patch(self, call: Call) -> dict[str, Any]:
        self.nodes[call.name] = apply(self.nodes[call.name], call.body)
        return self.nodes[call.name]

    def refuse(self, name: str, error: kubeapi.ApiError) -> None:
        self.api.refuse(name, error, method="PATCH")

    def accept(self, name: str) -> None:
        self.api.accept(name, method="PATCH")

    @property
    def patches(self) -> list[tuple[str, float]]:
        """(node, loop time) of every node PATCH, refused ones too."""
        node_path = re.compile(NODE_PATH)
        return [
            (c.name, c.at)
            for c in self.api.calls
            if c.method == "PATCH" and node_path.fullmatch(c.path)
        ]

    @property
    def status(self) -> list[dict[str, Any]]:
        """Every policy status written, in order."""
        return [b["status"] for b in self.api.bodies("PATCH", r".*/status")]

    def count(self) -> Counter[str]:
        return Counter(n for n, _ in self.patches)

    def snapshot(self) -> tuple[dict[str, NodeFacts], dict[str, PolicyEntry]]:
        facts = {n: node_facts(raw) for n, raw in self.nodes.items()}
        [p] = parsed([policy("p", self.spec)])
        return facts, {"p": PolicyEntry(p, "uid-p", "1", (), {})}

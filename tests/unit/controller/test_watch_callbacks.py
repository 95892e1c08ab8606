"""What the controller's watch callbacks ask for, and the gate before the first pass.

The callbacks only turn events into requests for work; the reconciler here records them.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from vgpu_operator import contract
from vgpu_operator.controller.handlers import (
    ControllerState,
    IndexedNode,
    _after,
    indexed_node,
    node_event,
    policy_entry,
)
from vgpu_operator.controller.informer import ADDED, DELETED, MODIFIED, Change, Informer
from vgpu_operator.controller.kube import Credentials
from vgpu_operator.core.nodefacts import NodeFacts


class Requests:
    """Stands in for the Reconciler's request side (the only part the callbacks use)."""

    def __init__(self, own: set[str] | None = None) -> None:
        self.nodes: list[list[str]] = []
        self.own = own or set()

    def request_nodes(self, names: list[str]) -> None:
        self.nodes.append(list(names))

    def is_own_write(self, name: str, facts: NodeFacts) -> bool:
        return facts.resource_version in self.own


def node(rv: str, labels: dict[str, str] | None = None, heartbeat: str = "t0") -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "uid": "u", "resourceVersion": rv, "labels": labels or {}},
        "status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": heartbeat}]},
    }


def state_with(requests: Requests) -> ControllerState:
    state = ControllerState(credentials=Credentials(server="https://x", token="t", ca_path=None))
    state.reconciler = requests  # type: ignore[assignment]
    return state


def change(kind: str, now: dict[str, Any], before: dict[str, Any] | None) -> Change[IndexedNode]:
    previous = indexed_node(before) if before else None
    return Change(kind, "n", indexed_node(now), previous, now)


async def test_node_events_ask_for_the_node_only_when_something_it_reads_changed() -> None:
    requests = Requests(own={"5"})
    state = state_with(requests)
    await node_event(state, change(ADDED, node("1"), None))
    assert requests.nodes == [["n"]]  # a new node
    await node_event(state, change(MODIFIED, node("2", heartbeat="t1"), node("1")))
    assert requests.nodes == [["n"]]  # a heartbeat: nothing the operator reads
    await node_event(state, change(MODIFIED, node("3", {"pool": "a"}), node("2")))
    assert requests.nodes == [["n"], ["n"]]  # relabelled: plan it again
    own = node("5", {"pool": "a", contract.LABEL_POLICY: "p"})
    await node_event(state, change(MODIFIED, own, node("3", {"pool": "a"})))
    assert requests.nodes == [["n"], ["n"]]  # the echo of the operator's own write
    await node_event(state, change(DELETED, node("6"), node("5")))
    assert requests.nodes == [["n"], ["n"], []]  # statuses count nodes: recompute them


async def ignore(_: Change[Any]) -> None:
    return None


def unlisted() -> ControllerState:
    """A state whose two informers have not delivered their first listing yet."""
    state = state_with(Requests())
    state.nodes = Informer(None, "nodes", "/api/v1/nodes", indexed_node, ignore)
    state.policies = Informer(None, "policies", "/p", policy_entry, ignore)
    return state


async def test_no_pass_before_both_nodes_and_policies_are_listed() -> None:
    state = unlisted()
    assert state.nodes is not None and state.policies is not None
    started = asyncio.Event()

    async def first_pass() -> None:
        started.set()

    task = asyncio.create_task(_after(state.wait_synced(), first_pass()))
    state.nodes.synced.set()
    await asyncio.sleep(0.05)
    assert not started.is_set()
    assert state.node_objects() is not None  # the configuration rules need only the nodes
    state.policies.synced.set()
    await asyncio.wait_for(task, 5)
    assert started.is_set()


async def test_a_gated_pass_that_is_cancelled_before_it_starts_leaves_no_coroutine() -> None:
    state = unlisted()
    ran = []

    async def first_pass() -> None:
        ran.append(True)

    then = first_pass()
    task = asyncio.create_task(_after(state.wait_synced(), then))
    await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    # closed, not left to warn "coroutine was never awaited"
    assert ran == [] and inspect.getcoroutinestate(then) == "CORO_CLOSED"

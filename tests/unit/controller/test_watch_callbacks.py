"""What the controller's watch callbacks ask for, and how a gated pass is started.

The callbacks only turn events into requests for work; the reconciler here records them.
"""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace
from typing import Any

from tests.kit.volcano_fixtures import healthy
from vgpu_operator import contract
from vgpu_operator.controller.app import Controller, Settings, after
from vgpu_operator.controller.informer import ADDED, DELETED, MODIFIED, Change
from vgpu_operator.controller.kept import IndexedNode, indexed_node
from vgpu_operator.controller.volcano import VolcanoOptions
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.volcano import REGISTER_ANNOTATION


class Requests:
    """Stands in for the Reconciler's request side and its node writer's memory of its own
    writes (the only parts the callbacks use)."""

    def __init__(self, own: set[str] | None = None) -> None:
        self.nodes: list[list[str]] = []
        self.full = 0
        self.own = own or set()
        self.node_writer = self
        self.rollout = SimpleNamespace(waiting_on_configuration=frozenset())
        self.observer = None
        self.published: list[Any] = []

    def request_nodes(self, names: list[str]) -> None:
        self.nodes.append(list(names))

    def request_full(self) -> None:
        self.full += 1

    def configuration_published(self, snapshot: Any) -> bool:
        """Told of each configuration pass (its own full pass when the scheduler the refusals
        read changed: tests/unit/core/test_refusals.py); recorded here."""
        self.published.append(snapshot)
        return False

    def is_own_write(self, name: str, facts: NodeFacts) -> bool:
        return facts.resource_version in self.own


def node(rv: str, labels: dict[str, str] | None = None, heartbeat: str = "t0") -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "uid": "u", "resourceVersion": rv, "labels": labels or {}},
        "status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": heartbeat}]},
    }


def controller(requests: Requests | None = None) -> Controller:
    """A controller not started (no I/O), its reconciler's request side recorded."""
    settings = Settings(credentials=Credentials(), volcano=VolcanoOptions(enabled=False))
    made = Controller(settings, api=None)  # type: ignore[arg-type]  # no request is made
    if requests is not None:
        made.reconciler = requests  # type: ignore[assignment]
    return made


def change(kind: str, now: dict[str, Any], before: dict[str, Any] | None) -> Change[IndexedNode]:
    previous = indexed_node(before) if before else None
    return Change(kind, "n", indexed_node(now), previous, now)


async def test_node_events_ask_for_the_node_only_when_something_it_reads_changed() -> None:
    requests = Requests(own={"5"})
    state = controller(requests)
    await state.node_event(change(ADDED, node("1"), None))
    assert requests.nodes == [["n"]]  # a new node
    await state.node_event(change(MODIFIED, node("2", heartbeat="t1"), node("1")))
    assert requests.nodes == [["n"]]  # a heartbeat: nothing the operator reads
    await state.node_event(change(MODIFIED, node("3", {"pool": "a"}), node("2")))
    assert requests.nodes == [["n"], ["n"]]  # relabelled: plan it again
    own = node("5", {"pool": "a", contract.LABEL_POLICY: "p"})
    await state.node_event(change(MODIFIED, own, node("3", {"pool": "a"})))
    assert requests.nodes == [["n"], ["n"]]  # the echo of the operator's own write
    await state.node_event(change(DELETED, node("6"), node("5")))
    assert requests.nodes == [["n"], ["n"], []]  # statuses count nodes: recompute them


def registered(rv: str, text: str | None, rolling: bool) -> dict[str, Any]:
    """A node whose device plugin registration reads `text`; `rolling`: in transition."""
    obj = node(rv)
    annotations: dict[str, str] = {}
    if text is not None:
        annotations[REGISTER_ANNOTATION] = text
    if rolling:
        annotations[contract.ANN_ROLLOUT] = '{"phase":"Verifying"}'
    obj["metadata"]["annotations"] = annotations
    return obj


async def test_a_new_registration_wakes_a_node_in_transition_only() -> None:
    """A node in Verifying waits for the plugin's registration, which is not one of the node's
    facts: its change must still ask for the node (seen stalling a roll when nothing else
    happened to ask), and only for a node in transition."""
    requests = Requests()
    state = controller(requests)
    old, new = (
        "GPU-a,10,24564,NVIDIA-RTX,true,hami-core:",
        "GPU-a,5,24564,NVIDIA-RTX,true,hami-core:",
    )
    await state.node_event(change(MODIFIED, registered("2", new, True), registered("1", old, True)))
    assert requests.nodes == [["n"]]
    await state.node_event(change(MODIFIED, registered("3", new, True), registered("2", new, True)))
    assert requests.nodes == [["n"]]  # the same registration: nothing new to verify
    await state.node_event(
        change(MODIFIED, registered("5", old, False), registered("4", new, False))
    )
    assert requests.nodes == [["n"]]  # no transition: the configuration pass reads it alone


def test_a_configuration_pass_asks_for_what_its_snapshot_and_findings_change() -> None:
    """Its findings changed: a full pass (the policies' ConfigConsistent condition); nodes
    whose next step waited for a configuration pass: a pass over them; else nothing."""
    requests = Requests()
    state = controller(requests)
    state.configuration_passed(healthy(), findings_changed=False)
    assert (requests.full, requests.nodes) == (0, [])
    state.configuration_passed(healthy(), findings_changed=True)
    assert (requests.full, requests.nodes) == (1, [])
    requests.rollout.waiting_on_configuration = frozenset({"gpu-a"})
    state.configuration_passed(healthy(), findings_changed=False)
    assert (requests.full, requests.nodes) == (1, [["gpu-a"]])
    assert len(requests.published) == 3  # the reconciler is told of every pass


async def test_a_gated_pass_that_is_cancelled_before_it_starts_leaves_no_coroutine() -> None:
    state = controller()  # its informers have not delivered their first listing
    ran = []

    async def first_pass() -> None:
        ran.append(True)

    then = first_pass()
    task = asyncio.create_task(after(state.cache.wait_synced(), then))
    await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    # closed, not left to warn "coroutine was never awaited"
    assert ran == [] and inspect.getcoroutinestate(then) == "CORO_CLOSED"

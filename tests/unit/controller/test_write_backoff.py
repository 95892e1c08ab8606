"""The policy reconciler's node writes against a stand-in apiserver: a node whose write is refused
(anything but 404/409) backs off alone, the other nodes are written in the same pass, the
reconciler wakes itself when the node is due, and the policy status names the node."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from typing import Any

import pytest

from tests.kit.cachekit import StubCache
from tests.kit.fakeapi import FakeApi, FakeNodes
from tests.kit.nodekit import HAMI
from vgpu_operator import kubeapi
from vgpu_operator.controller.reconciler import Reconciler, ReconcilerOptions
from vgpu_operator.core.backoff import Backoff

DENIED = "nodes \"n1\" is forbidden: ValidatingAdmissionPolicy 'deny' denied request"


def invalid(message: str = DENIED) -> kubeapi.ApiError:
    return kubeapi.error_for(422, "Unprocessable Entity", body=json.dumps({"message": message}))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNodes:
    return FakeNodes(FakeApi(strict=True).install(monkeypatch), ["n1", "n2", "n3"], HAMI)


def reconciler(fake: FakeNodes, backoff: Backoff[str], clock: Any = None) -> Reconciler:
    r = Reconciler(
        api=None,  # type: ignore[arg-type]  # the stand-in ignores it
        cache=StubCache(fake.snapshot),
        post_event=lambda *_: None,
        options=ReconcilerOptions(resync_seconds=3600, status_interval=0.0),
        node_backoff=backoff,
    )
    if clock is not None:
        r.node_writer.clock = clock
    return r


async def test_a_refused_node_waits_for_its_backoff_and_the_others_are_written(
    fake: FakeNodes,
) -> None:
    now = [1000.0]
    r = reconciler(fake, Backoff(initial=1.0, cap=60.0, jitter=0.0), clock=lambda: now[0])
    fake.refuse("n1", invalid())
    await r.reconcile(full=True, only=set())
    assert fake.count() == Counter({"n1": 1, "n2": 1, "n3": 1})
    assert r.node_writer.backoff.failing() == {"n1": (1, f"422 {DENIED}", 1000.0)}
    [status] = fake.status
    [problem] = status["problemNodes"]
    assert (problem["node"], problem["reason"]) == ("n1", "WriteFailed")
    assert DENIED in problem["message"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Stalled"] == "True"

    # Passes before the node is due (a node event, a full pass) do not write it.
    await r.reconcile(full=False, only={"n1"})
    await r.reconcile(full=True, only=set())
    now[0] = 1000.9
    await r.reconcile(full=False, only={"n1"})
    assert fake.count()["n1"] == 1

    now[0] = 1001.0  # due: tried again, refused again, twice as long now
    await r.reconcile(full=False, only={"n1"})
    assert fake.count()["n1"] == 2
    failure = r.node_writer.backoff.get("n1")
    assert failure is not None and (failure.attempts, failure.next_at) == (2, 1003.0)

    # The refusal goes away: the next due pass writes it, and the status forgets it.
    fake.accept("n1")
    now[0] = 1003.0
    await r.reconcile(full=False, only={"n1"})
    assert fake.count() == Counter({"n1": 3, "n2": 1, "n3": 1})
    assert len(r.node_writer.backoff) == 0
    assert fake.status[-1]["problemNodes"] == []


async def test_retry_after_is_honoured(fake: FakeNodes) -> None:
    now = [50.0]
    r = reconciler(fake, Backoff(initial=1.0, cap=60.0, jitter=0.0), clock=lambda: now[0])
    fake.refuse(
        "n2",
        kubeapi.error_for(
            429, "Too Many Requests", body='{"message": "slow down"}', headers={"Retry-After": "5"}
        ),
    )
    await r.reconcile(full=True, only=set())
    failure = r.node_writer.backoff.get("n2")
    assert failure is not None and failure.next_at == 55.0
    assert failure.message == "429 slow down"
    now[0] = 54.9
    await r.reconcile(full=False, only={"n2"})
    assert fake.count()["n2"] == 1


async def test_conflicts_and_deleted_nodes_are_not_backed_off(fake: FakeNodes) -> None:
    r = reconciler(fake, Backoff(initial=1.0, cap=60.0, jitter=0.0))
    fake.refuse("n1", kubeapi.error_for(409, "Conflict"))
    fake.refuse("n3", kubeapi.error_for(404, "Not Found"))
    await r.reconcile(full=True, only=set())
    # n1: read again and planned again, `conflict_retries` times; n3 is gone
    assert fake.count() == Counter({"n1": 4, "n2": 1, "n3": 1})
    assert len(r.node_writer.backoff) == 0


async def test_the_reconciler_wakes_itself_when_a_node_is_due(fake: FakeNodes) -> None:
    """The real loop, a short backoff: n1 is tried at 0, 0.1, 0.3, 0.7 s, ... (doubling), not
    every pass; n2 and n3 are written once."""
    r = reconciler(fake, Backoff(initial=0.1, cap=10.0, jitter=0.0))
    fake.refuse("n1", kubeapi.error_for(503, "Service Unavailable"))
    task = asyncio.create_task(r.run())
    try:
        r.request_full()
        await asyncio.sleep(1.2)
        # Node events for n1 meanwhile change nothing.
        r.request_nodes(["n1"])
        await asyncio.sleep(0.2)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    counts = fake.count()
    assert counts["n2"] == 1 and counts["n3"] == 1
    times = [t for n, t in fake.patches if n == "n1"]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # 0, 0.1, 0.3, 0.7 (+ the passes' own time; the next one is due after 1.5): a loaded
    # machine may get one fewer, never more.
    assert 3 <= len(times) <= 4, gaps
    for i, gap in enumerate(gaps):
        assert gap >= 0.1 * 2**i, gaps

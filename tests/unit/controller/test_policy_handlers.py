"""Kopf's policy handlers (`controller.handlers`) only wake the reconcilers and wait for their
release; the release is the reconciler's decision (its status writer's
`PolicyStatusWriter.report_releases`), made from the nodes it holds."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest

from tests.kit.cachekit import empty_cache
from vgpu_operator import contract
from vgpu_operator.controller.app import Settings
from vgpu_operator.controller.handlers import build_registry
from vgpu_operator.controller.kept import policy_entry
from vgpu_operator.controller.policy_writes import PolicyStatusWriter
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runtime import Runtime
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.kubeapi.credentials import Credentials


class Recorded:
    """The controller as the handlers see it: what they asked of it."""

    def __init__(self, still: list[str] | None = None) -> None:
        self.asked: list[tuple[str, ...]] = []
        self.still = still or []

    def policy_changed(self) -> None:
        self.asked.append(("changed",))

    def policy_gone(self, name: str) -> None:
        self.asked.append(("gone", name))

    async def release(self, name: str, timeout: float) -> list[str]:
        self.asked.append(("release", name))
        return self.still


def handler(observe: bool, handler_id: str, reason: str | None = None) -> tuple[Any, Runtime]:
    options = ReconcilerOptions(observe=observe)
    runtime = Runtime(Settings(credentials=Credentials(), options=options))
    registry = build_registry(runtime)
    for group in (registry._changing, registry._watching):
        for h in group.get_all_handlers():
            got = getattr(h, "reason", None)
            if h.id == handler_id and (reason is None or (got is not None and got.value == reason)):
                return h.fn, runtime
    raise AssertionError(f"no handler {handler_id} {reason}")


async def test_create_update_and_resume_wake_the_reconcilers() -> None:
    for reason in ("create", "update", None):
        fn, runtime = handler(False, "policy_changed", reason)
        runtime.controller = Recorded()  # type: ignore[assignment]
        await fn(name="p")
        assert runtime.controller.asked == [("changed",)]  # type: ignore[attr-defined]


async def test_deletion_returns_once_released_and_retries_while_nodes_are_held() -> None:
    fn, runtime = handler(False, "policy_deleted")
    runtime.controller = Recorded()  # type: ignore[assignment]
    assert await fn(name="p") is None  # Kopf removes its finalizer
    assert runtime.controller.asked == [("release", "p")]  # type: ignore[attr-defined]

    runtime.controller = Recorded([f"n{i}" for i in range(7)])  # type: ignore[assignment]
    with pytest.raises(kopf.TemporaryError, match=r"7 node\(s\) still to release: n0, .* 2 more"):
        await fn(name="p")


async def test_observe_deletion_waits_for_nothing() -> None:
    fn, runtime = handler(True, "policy_deleted")
    runtime.controller = Recorded(["n1"])  # type: ignore[assignment]
    assert await fn(name="p") is None
    assert runtime.controller.asked == [("changed",)]  # type: ignore[attr-defined]


async def test_only_the_deleted_event_forgets_the_policy() -> None:
    fn, runtime = handler(False, "policy_gone")
    runtime.controller = Recorded()  # type: ignore[assignment]
    for event in (None, "ADDED", "MODIFIED"):
        await fn(name="p", type=event)
    assert runtime.controller.asked == []  # type: ignore[attr-defined]
    await fn(name="p", type="DELETED")
    assert runtime.controller.asked == [("gone", "p")]  # type: ignore[attr-defined]


async def test_a_handler_before_start_up_is_retried() -> None:
    fn, _ = handler(False, "policy_changed", "create")
    with pytest.raises(kopf.TemporaryError):
        await fn(name="p")


def deleting_policy(name: str) -> Any:
    return policy_entry(
        {
            "metadata": {
                "name": name,
                "resourceVersion": "3",
                "deletionTimestamp": "2026-11-25T00:00:00Z",
                "finalizers": [contract.FINALIZER],
            },
            "spec": {"nodeSelector": {"matchLabels": {"pool": "a"}}, "mode": "whole-gpu"},
        }
    )


def labelled(name: str, policy: str | None) -> Any:
    labels = {contract.LABEL_POLICY: policy} if policy else {}
    return node_facts({"metadata": {"name": name, "resourceVersion": "1", "labels": labels}})


def status_writer(full: list[bool]) -> PolicyStatusWriter:
    """The policy reconciler's status writer, its requests for a full pass recorded."""
    no_api: Any = None  # releases make no request
    return PolicyStatusWriter(no_api, lambda *_: None, empty_cache(), lambda: full.append(True))


async def test_the_release_is_reported_by_the_pass_that_finds_no_node_held() -> None:
    full: list[bool] = []
    writer = status_writer(full)
    policies = {"p": deleting_policy("p")}
    waiting = asyncio.create_task(writer.wait_released("p", timeout=2))
    await asyncio.sleep(0)
    assert full  # the wait asks for a full pass
    writer.report_releases({"n1": labelled("n1", "p"), "n2": labelled("n2", None)}, policies)
    await asyncio.sleep(0.01)
    assert not waiting.done() and writer.still_held["p"] == ["n1"]
    writer.report_releases({"n1": labelled("n1", None)}, policies)
    assert await asyncio.wait_for(waiting, 1) == []


async def test_a_release_not_reported_in_time_names_the_nodes_still_held() -> None:
    writer = status_writer([])
    waiting = asyncio.create_task(writer.wait_released("p", timeout=0.2))
    await asyncio.sleep(0)
    writer.report_releases({"n1": labelled("n1", "p")}, {"p": deleting_policy("p")})
    assert await waiting == ["n1"]

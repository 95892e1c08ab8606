"""The rules in a worker process killed at a deadline: the same findings as in-process, a rule
past its deadline (or one that ends its process) becomes an error finding while the rules
after it still report, and the event loop keeps running meanwhile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from tests.kit.volcano_fixtures import healthy, seed002
from vgpu_operator.controller.rules_worker import MODULES, RulesWorker
from vgpu_operator.core.rules import RULES, run_rules
from vgpu_operator.core.rules.base import Finding
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot

SLOW = (*MODULES, "tests.kit.slow_rules")


def marked(snapshot: ClusterSnapshot, name: str) -> ClusterSnapshot:
    marker = {"metadata": {"name": name, "namespace": "default"}, "data": {}}
    return ClusterSnapshot(
        config=snapshot.config,
        configmaps=[*snapshot.configmaps, marker],
        deployments=snapshot.deployments,
        daemonsets=snapshot.daemonsets,
        nodes=snapshot.nodes,
        pods=snapshot.pods,
    )


@pytest.fixture
def worker() -> Iterator[RulesWorker]:
    w = RulesWorker(rule_deadline=1.0, pass_budget=20.0, modules=SLOW)
    yield w
    w.close()


def ids(findings: list[Finding]) -> list[str]:
    return [f.id for f in findings]


def test_the_worker_finds_what_the_rules_find_in_process() -> None:
    worker = RulesWorker()
    try:
        for snapshot in (healthy(), seed002(fixed=False)):
            here, there = run_rules(snapshot), worker.run(snapshot)
            assert there.findings == here.findings
            assert [r.id for r in there.rules] == [r.id for r in here.rules]
        only = worker.run(seed002(fixed=False), only=["node-registration"])
        assert [r.id for r in only.rules] == ["node-registration"]
        assert set(ids(only.findings)) <= {"node-registration"}
    finally:
        worker.close()


def test_a_worker_started_early_is_the_one_the_first_pass_uses() -> None:
    worker = RulesWorker()
    try:
        assert worker.pid is None
        worker.start()  # doctor: before it reads the cluster
        started = worker.pid
        assert started is not None
        worker.start()  # already running: the same process
        assert worker.pid == started
        assert worker.run(healthy()).findings == run_rules(healthy()).findings
        assert worker.pid == started and worker.kills == 0
    finally:
        worker.close()


def test_a_rule_past_its_deadline_is_an_error_and_the_others_still_run(
    worker: RulesWorker,
) -> None:
    snapshot = marked(seed002(fixed=False), "test-never-ends")
    expected = run_rules(snapshot).findings  # the registered rules, in this process
    first_pid = (worker.run(healthy()), worker.pid)[1]
    started = time.monotonic()
    results = worker.run(snapshot)
    took = time.monotonic() - started
    stopped = [f for f in results.findings if f.id == "test-never-ends"]
    assert len(stopped) == 1 and stopped[0].severity == "error"
    assert "did not finish within 1 s" in stopped[0].message
    assert [f for f in results.findings if f.id in RULES] == expected
    assert worker.kills == 1 and worker.pid != first_pid
    assert took < 10, took  # one deadline and a new worker's start, not the rule's forever
    # the next pass, without the marker, runs in the new worker as usual
    assert [f for f in worker.run(healthy()).findings if f.id not in RULES] == []


def test_a_rule_that_ends_its_process_is_an_error(worker: RulesWorker) -> None:
    results = worker.run(marked(healthy(), "test-crashes"))
    crashed = [f for f in results.findings if f.id == "test-crashes"]
    assert len(crashed) == 1 and "its worker process ended" in crashed[0].message
    assert len(results.rules) == len(RULES) + 2
    assert [f for f in results.findings if f.id != "test-crashes" and f.severity != "info"] == []


def test_the_pass_budget_bounds_all_rules_together() -> None:
    worker = RulesWorker(rule_deadline=1.0, pass_budget=0.5, modules=SLOW)
    try:
        worker.run(healthy())  # started
        results = worker.run(marked(healthy(), "test-never-ends"))
        stopped = {f.id for f in results.findings}
        assert "test-never-ends" in stopped
        assert all(f.severity == "error" for f in results.findings if f.severity != "info")
    finally:
        worker.close()


async def test_the_event_loop_runs_while_the_rules_do(worker: RulesWorker) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    await asyncio.to_thread(worker.run, marked(healthy(), "test-never-ends"))
    elapsed = time.monotonic() - started
    task.cancel()
    assert elapsed >= 1.0
    assert ticks >= elapsed / 0.05 * 0.5  # the loop was not held: at least half the ticks

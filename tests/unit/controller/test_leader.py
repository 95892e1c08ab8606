"""Leader election: the pure decisions with explicit times, and the elector's loop against an
in-memory Lease (short real durations; a clock offset stands in for time passing)."""

from __future__ import annotations

import asyncio
import copy
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

import kopf
import pytest
from prometheus_client import REGISTRY

from vgpu_operator import kubeapi
from vgpu_operator.controller import leader_core as core
from vgpu_operator.controller.app import Settings
from vgpu_operator.controller.leader import (
    LEADER,
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLost,
    default_identity,
)
from vgpu_operator.controller.leader_core import Action, Observation, Record
from vgpu_operator.controller.runner import run_operator
from vgpu_operator.controller.runtime import Runtime

WALL = "2026-01-02T03:04:05.000006Z"
LATER = "2026-01-02T03:04:20.000000Z"


def held(holder: str, *, duration: int = 15, renew: str = WALL, transitions: int = 3) -> Record:
    return Record(holder, duration, "2026-01-01T00:00:00.000000Z", renew, transitions)


def decide(current: Record | None, now: float, observed: Observation | None) -> core.Decision:
    return core.decide(current, "me", now=now, wall=LATER, observed=observed, lease_duration=15.0)


# -- the pure decisions -------------------------------------------------------------------


def test_no_lease_is_created_naming_this_elector() -> None:
    d = decide(None, 100.0, None)
    assert d.action is Action.CREATE
    assert d.write == Record("me", 15, LATER, LATER, 0)


def test_takeover_only_after_the_duration_on_the_observers_clock() -> None:
    other = held("other")
    first = decide(other, 100.0, None)
    assert first.action is Action.WAIT and first.write is None
    assert first.observed == Observation(other, 100.0)
    almost = decide(other, 114.9, first.observed)
    assert almost.action is Action.WAIT
    assert almost.observed == first.observed  # unchanged record: the clock keeps running
    lapsed = decide(other, 115.0, almost.observed)
    assert lapsed.action is Action.ACQUIRE
    assert lapsed.write == Record("me", 15, LATER, LATER, 4)  # acquireTime now, transitions+1


@pytest.mark.parametrize(
    "renew", ["2000-01-01T00:00:00.000000Z", "2100-01-01T00:00:00.000000Z", None]
)
def test_renew_time_in_the_object_is_never_compared_with_the_local_clock(
    renew: str | None,
) -> None:
    other = held("other", renew=renew or WALL)
    first = decide(other, 5.0, None)
    assert first.action is Action.WAIT  # an ancient renewTime does not make it lapsed
    assert decide(other, 19.9, first.observed).action is Action.WAIT
    assert decide(other, 20.0, first.observed).action is Action.ACQUIRE  # a future one: no longer


def test_a_changed_record_restarts_the_clock() -> None:
    seen = decide(held("other"), 100.0, None).observed
    renewed = held("other", renew=LATER)
    again = decide(renewed, 110.0, seen)
    assert again.observed == Observation(renewed, 110.0)
    assert decide(renewed, 116.0, again.observed).action is Action.WAIT
    assert decide(renewed, 125.0, again.observed).action is Action.ACQUIRE


def test_the_records_own_duration_counts_and_a_missing_one_is_the_configured_one() -> None:
    short = held("other", duration=1)
    seen = decide(short, 0.0, None).observed
    assert decide(short, 0.9, seen).action is Action.WAIT
    assert decide(short, 1.0, seen).action is Action.ACQUIRE
    none = held("other", duration=0)
    seen = decide(none, 0.0, None).observed
    assert decide(none, 14.0, seen).action is Action.WAIT
    assert decide(none, 15.0, seen).action is Action.ACQUIRE


def test_a_released_lease_is_taken_at_once_counting_a_transition() -> None:
    released = core.release(held("other", transitions=5), WALL)
    assert released == Record("", 1, WALL, WALL, 5)
    assert released.spec()["holderIdentity"] == ""
    d = decide(released, 0.0, None)
    assert d.action is Action.ACQUIRE
    assert d.write is not None and d.write.transitions == 6 and d.write.holder == "me"


def test_the_holder_renews_keeping_acquire_time_and_transitions() -> None:
    mine = held("me", transitions=7)
    d = decide(mine, 0.0, None)
    assert d.action is Action.RENEW
    assert d.write == Record("me", 15, mine.acquire_time, LATER, 7)


def test_fast_renewal_only_for_a_valid_own_observation() -> None:
    mine = Observation(held("me", duration=15), 100.0)
    kwargs: dict[str, Any] = {"wall": LATER, "lease_duration": 15.0}
    fast = core.fast_renewal(mine, "me", now=114.0, **kwargs)
    assert fast == Record("me", 15, mine.record.acquire_time, LATER, 3)
    assert core.fast_renewal(mine, "me", now=115.0, **kwargs) is None  # lapsed: read first
    assert core.fast_renewal(Observation(held("x"), 100.0), "me", now=101.0, **kwargs) is None
    assert core.fast_renewal(None, "me", now=101.0, **kwargs) is None


def test_lease_mapping_and_times() -> None:
    lease = {"spec": held("other").spec()}
    assert Record.from_lease(lease) == held("other")
    assert Record.from_lease({"spec": {}}) == Record()
    assert core.lease_seconds(15.0) == 15 and core.lease_seconds(0.3) == 1
    import datetime as dt

    when = dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC)
    assert core.microtime(when) == WALL


def test_config_is_checked_as_client_go_does() -> None:
    with pytest.raises(ValueError, match="lease_duration must be greater"):
        LeaderElectionConfig("ns", lease_duration=10, renew_deadline=10)
    with pytest.raises(ValueError, match="retry_period"):
        LeaderElectionConfig("ns", renew_deadline=2.4, retry_period=2)
    with pytest.raises(ValueError, match="namespace"):
        LeaderElectionConfig("")
    cfg = LeaderElectionConfig("ns")
    assert (cfg.lease_duration, cfg.renew_deadline, cfg.retry_period) == (15.0, 10.0, 2.0)
    assert cfg.identity.startswith(socket.gethostname() + "_")
    assert default_identity() != default_identity()


# -- the loop against an in-memory Lease ------------------------------------------------------


class FakeLock:
    """One Lease in memory with resourceVersions: a stale update or a second create is a 409."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.fail: Exception | None = None
        self.writes: list[dict[str, Any]] = []

    async def get(self) -> dict[str, Any]:
        await asyncio.sleep(0)
        self._check()
        if self.lease is None:
            raise kubeapi.NotFound(404, "NotFound")
        return copy.deepcopy(self.lease)

    async def create(self, spec: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        self._check()
        if self.lease is not None:
            raise kubeapi.Conflict(409, "AlreadyExists")
        return self.store(spec)

    async def update(self, lease: Mapping[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        self._check()
        assert self.lease is not None
        if lease["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise kubeapi.Conflict(409, "Conflict")
        return self.store(spec)

    def store(self, spec: dict[str, Any]) -> dict[str, Any]:
        version = len(self.writes) + 1
        self.writes.append(copy.deepcopy(spec))
        self.lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "lease", "namespace": "ns", "resourceVersion": str(version)},
            "spec": copy.deepcopy(spec),
        }
        return copy.deepcopy(self.lease)

    def _check(self) -> None:
        if self.fail is not None:
            raise self.fail

    @property
    def spec(self) -> dict[str, Any]:
        assert self.lease is not None
        return dict(self.lease["spec"])


class Lead:
    """A `lead` coroutine that runs until cancelled, recording what happened to it."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.runs = 0
        self.cancelled = False

    async def __call__(self) -> None:
        self.runs += 1
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


class Clock:
    """Monotonic time plus an offset the test moves forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def config(identity: str, **kwargs: Any) -> LeaderElectionConfig:
    fast: dict[str, Any] = {"lease_duration": 0.6, "renew_deadline": 0.3, "retry_period": 0.05}
    return LeaderElectionConfig("ns", "lease", identity, **{**fast, **kwargs})


def gauge() -> float | None:
    return REGISTRY.get_sample_value("vgpu_operator_leader")


async def finish(task: asyncio.Task[None]) -> BaseException | None:
    """Cancel the task (if still running) and return how it ended."""
    task.cancel()
    try:
        await asyncio.wait_for(task, 1)
    except BaseException as exc:
        return exc
    return None


async def test_leads_renews_and_releases_on_cancel() -> None:
    lock, lead = FakeLock(), Lead()
    elector = LeaderElector(None, config("a"), lock=lock)
    task = asyncio.create_task(elector.run(lead))
    await asyncio.wait_for(lead.started.wait(), 1)
    assert elector.is_leader and elector.leading.is_set() and gauge() == 1
    first = lock.spec
    assert first["holderIdentity"] == "a" and first["leaseTransitions"] == 0
    assert first["leaseDurationSeconds"] == 1  # 0.6 s, in whole seconds
    await asyncio.sleep(0.2)
    renewed = lock.spec
    assert renewed["renewTime"] > first["renewTime"]
    assert renewed["acquireTime"] == first["acquireTime"]
    assert elector.check() == ""
    assert isinstance(await finish(task), asyncio.CancelledError)
    assert lead.cancelled and not elector.is_leader and gauge() == 0
    released = lock.spec
    assert released["holderIdentity"] == "" and released["leaseDurationSeconds"] == 1
    assert released["leaseTransitions"] == 0


async def test_standby_waits_for_the_duration_on_its_own_clock_then_takes_over() -> None:
    lock, lead, clock = FakeLock(), Lead(), Clock()
    lock.store(held("other", duration=1, transitions=2).spec())
    elector = LeaderElector(None, config("b"), lock=lock, clock=clock)
    task = asyncio.create_task(elector.run(lead))
    await asyncio.sleep(0.4)  # "other" stopped renewing, but less than its 1 s has passed
    assert lead.runs == 0 and not elector.is_leader and elector.holder == "other"
    assert len(lock.writes) == 1  # a standby only reads
    clock.offset += 1.0  # now it has
    await asyncio.wait_for(lead.started.wait(), 1)
    assert lock.spec["holderIdentity"] == "b" and lock.spec["leaseTransitions"] == 3
    await finish(task)


async def test_a_renewing_holder_keeps_the_standby_out() -> None:
    lock, lead, clock = FakeLock(), Lead(), Clock()
    lock.store(held("other", duration=1).spec())
    elector = LeaderElector(None, config("b"), lock=lock, clock=clock)
    task = asyncio.create_task(elector.run(lead))
    for i in range(8):  # the holder renews; time on the standby's clock runs fast
        await asyncio.sleep(0.05)
        clock.offset += 0.5
        lock.store(held("other", duration=1, renew=f"2026-01-01T00:00:0{i}.000000Z").spec())
    assert lead.runs == 0 and not elector.is_leader
    assert all(w["holderIdentity"] == "other" for w in lock.writes)
    assert isinstance(await finish(task), asyncio.CancelledError)
    assert lock.spec["holderIdentity"] == "other"  # nothing to release


async def test_renewals_failing_for_the_deadline_cancel_the_lead() -> None:
    lock, lead = FakeLock(), Lead()
    elector = LeaderElector(None, config("a"), lock=lock)
    task = asyncio.create_task(elector.run(lead))
    await asyncio.wait_for(lead.started.wait(), 1)
    lock.fail = kubeapi.Unreachable("connection refused")
    began = time.monotonic()
    with pytest.raises(LeadershipLost, match=r"not renewed within 0\.3s"):
        await asyncio.wait_for(task, 1)
    assert time.monotonic() - began < 0.3 + 0.05 + 0.1  # deadline + one retry period
    assert lead.cancelled and not elector.is_leader and gauge() == 0


async def test_a_lease_taken_by_another_ends_leadership_at_once() -> None:
    lock, lead = FakeLock(), Lead()
    elector = LeaderElector(None, config("a"), lock=lock)
    task = asyncio.create_task(elector.run(lead))
    await asyncio.wait_for(lead.started.wait(), 1)
    lock.store(held("intruder").spec())
    began = time.monotonic()
    with pytest.raises(LeadershipLost, match="intruder"):
        await asyncio.wait_for(task, 1)
    assert time.monotonic() - began < 0.2  # the next renewal, not the renew deadline
    assert lead.cancelled and lock.spec["holderIdentity"] == "intruder"


async def test_without_release_on_cancel_the_lease_is_left_to_lapse() -> None:
    lock, lead = FakeLock(), Lead()
    elector = LeaderElector(None, config("a", release_on_cancel=False), lock=lock)
    task = asyncio.create_task(elector.run(lead))
    await asyncio.wait_for(lead.started.wait(), 1)
    assert isinstance(await finish(task), asyncio.CancelledError)
    assert lead.cancelled and lock.spec["holderIdentity"] == "a"


async def test_a_lead_that_ends_releases_and_passes_on_its_outcome() -> None:
    lock = FakeLock()

    async def fails() -> None:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        await asyncio.wait_for(LeaderElector(None, config("a"), lock=lock).run(fails), 1)
    assert lock.spec["holderIdentity"] == ""

    async def returns() -> None:
        return None

    elector = LeaderElector(None, config("b"), lock=lock)
    assert await asyncio.wait_for(elector.run(returns), 1) is None
    assert lock.spec["holderIdentity"] == "" and lock.spec["leaseTransitions"] == 1


async def test_two_electors_one_lease_exactly_one_leads() -> None:
    lock = FakeLock()
    leads = {name: Lead() for name in "ab"}
    electors = {name: LeaderElector(None, config(name), lock=lock) for name in "ab"}
    tasks = {n: asyncio.create_task(electors[n].run(leads[n])) for n in "ab"}
    for _ in range(10):
        await asyncio.sleep(0.03)
        assert sum(e.is_leader for e in electors.values()) <= 1
    [leader] = [n for n, e in electors.items() if e.is_leader]
    [standby] = [n for n in "ab" if n != leader]
    assert leads[leader].runs == 1 and leads[standby].runs == 0
    assert {w["holderIdentity"] for w in lock.writes} == {leader}
    await finish(tasks[leader])  # released: the standby takes over at its next retry
    await asyncio.wait_for(leads[standby].started.wait(), 0.5)
    assert lock.spec["holderIdentity"] == standby and lock.spec["leaseTransitions"] == 1
    await finish(tasks[standby])


async def test_check_reports_a_leader_that_stopped_renewing() -> None:
    lock, lead, clock = FakeLock(), Lead(), Clock()
    elector = LeaderElector(None, config("a"), lock=lock, clock=clock)
    task = asyncio.create_task(elector.run(lead))
    await asyncio.wait_for(lead.started.wait(), 1)
    assert elector.check(tolerance=1.0) == ""
    clock.offset += 5.0
    assert "last renewed 5s ago" in elector.check(tolerance=1.0)
    await finish(task)


def test_without_election_the_one_replica_exports_leader_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica run without leader election (`leaderElection.enabled: false`, one replica)
    writes at once, so it says it leads: the chart's VGPUOperatorNoLeader alert
    (`max(vgpu_operator_leader) < 1`) stays silent for it. Kopf is stood in for; the runner
    goes in a thread of its own, as OperatorThread runs it (its signal handlers stay there)."""
    seen: list[float | None] = []

    async def operator(**_: Any) -> None:
        seen.append(gauge())

    monkeypatch.setattr(kopf, "operator", operator)
    LEADER.set(0)
    runtime = Runtime(Settings(credentials=None))  # type: ignore[arg-type]  # Kopf never runs
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(asyncio.run(run_operator(runtime))))
    thread.start()
    thread.join(10)
    assert codes == [0] and seen == [1.0]

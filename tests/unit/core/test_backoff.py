"""Per-object backoff: exponential, jittered, capped, Retry-After as a floor, bounded memory."""

from __future__ import annotations

import math

import pytest

from vgpu_operator.core.backoff import Backoff

NODE = ("Node", "gpu-1")
OTHER = ("Node", "gpu-2")


def fixed(value: float) -> Backoff[tuple[str, str]]:
    """A backoff whose jitter draws `value` (0: none, 1: the most)."""
    return Backoff(initial=1.0, cap=300.0, factor=2.0, jitter=0.2, rand=lambda: value)


def test_waits_double_from_initial_until_the_cap() -> None:
    b = fixed(0.0)
    now, waits = 100.0, []
    for _ in range(12):
        at = b.failed(NODE, now, message="422 denied")
        waits.append(at - now)
        now = at
    assert waits == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]
    assert b.failing() == {NODE: (12, "422 denied", 100.0)}


def test_jitter_stretches_each_wait_by_at_most_its_fraction() -> None:
    low, high = fixed(0.0), fixed(0.999)
    for attempt in range(10):
        lo = low.failed(NODE, 0.0) - 0.0
        hi = high.failed(NODE, 0.0) - 0.0
        base = min(300.0, 2.0**attempt)
        assert lo == base
        assert base < hi < base * 1.2


def test_jitter_spreads_objects_that_failed_together() -> None:
    b: Backoff[str] = Backoff(initial=1.0, cap=300.0, factor=2.0, jitter=0.2)
    times = {b.failed(f"n{i}", 0.0) for i in range(50)}
    assert len(times) > 40
    assert all(1.0 <= t < 1.2 for t in times)


def test_not_ready_before_its_time_and_others_are_not_slowed() -> None:
    b = fixed(0.0)
    at = b.failed(NODE, 10.0)
    assert at == 11.0
    assert not b.ready(NODE, 10.0)
    assert not b.ready(NODE, 10.999)
    assert b.ready(NODE, 11.0)
    assert b.ready(OTHER, 10.0)  # never failed


def test_retry_after_is_a_floor_even_past_the_cap() -> None:
    b = fixed(0.999)
    assert b.failed(NODE, 0.0, retry_after=5.0) == 5.0  # 5 > 1.2: the apiserver's word
    assert not b.ready(NODE, 4.99)
    b2 = fixed(0.0)
    for _ in range(10):
        b2.failed(NODE, 0.0)
    assert b2.failed(NODE, 0.0, retry_after=900.0) == 900.0
    # A Retry-After shorter than the backoff does not shorten it.
    b3 = fixed(0.0)
    b3.failed(NODE, 0.0)
    assert b3.failed(NODE, 0.0, retry_after=0.5) == 2.0


def test_due_is_the_earliest_next_attempt_and_due_keys_those_ready() -> None:
    b = fixed(0.0)
    assert b.due() is None
    b.failed(NODE, 0.0)  # due at 1
    b.failed(OTHER, 0.0)
    b.failed(OTHER, 1.0)  # due at 3
    assert b.due() == 1.0
    assert b.due_keys(0.5) == []
    assert b.due_keys(1.0) == [NODE]
    assert sorted(b.due_keys(3.0)) == [NODE, OTHER]
    b.succeeded(NODE)
    assert b.due() == 3.0


def test_success_forgets_and_starts_again_from_initial() -> None:
    b = fixed(0.0)
    for t in (0.0, 1.0, 3.0):
        b.failed(NODE, t, message="503 busy")
    assert b.failing()[NODE] == (3, "503 busy", 0.0)
    assert b.succeeded(NODE) is True
    assert b.succeeded(NODE) is False
    assert NODE not in b and len(b) == 0 and b.failing() == {}
    assert b.failed(NODE, 50.0) == 51.0  # a new run: initial again, since now


def test_memory_is_bounded_by_the_failing_objects_that_still_exist() -> None:
    b: Backoff[tuple[str, str]] = fixed(0.0)
    for i in range(1000):
        b.failed(("Node", f"n{i}"), 0.0)
    assert len(b) == 1000
    b.retain(lambda key: int(key[1][1:]) < 10)  # 990 of them were deleted
    assert len(b) == 10
    b.forget(("Node", "n0"))
    assert len(b) == 9 and ("Node", "n0") not in b
    for i in range(1, 10):
        b.succeeded(("Node", f"n{i}"))
    assert len(b) == 0 and b.due() is None


def test_the_last_message_is_kept_and_the_first_failure_time() -> None:
    b = fixed(0.0)
    b.failed(NODE, 7.0, message="422 denied by policy a")
    b.failed(NODE, 8.0, message="429 slow down")
    failure = b.get(NODE)
    assert failure is not None
    assert (failure.attempts, failure.message, failure.since) == (2, "429 slow down", 7.0)


def test_a_long_run_of_failures_stays_at_the_cap() -> None:
    b = fixed(0.0)
    now = 0.0
    for _ in range(5000):  # no overflow of factor ** attempts
        now = b.failed(NODE, now)
    assert b.failed(NODE, now) - now == 300.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial": 0.0},
        {"initial": 10.0, "cap": 5.0},
        {"factor": 0.5},
        {"jitter": -0.1},
    ],
)
def test_nonsense_parameters_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="need 0 < initial"):
        Backoff(**kwargs)


@pytest.mark.parametrize("retry_after", [math.inf, math.nan, -math.inf])
def test_a_retry_after_that_is_no_number_of_seconds_is_ignored(retry_after: float) -> None:
    # an infinite one would park the object until restart (the review's misc01; kubeapi.errors
    # caps what it reads, and this guards whatever else passes one)
    assert fixed(0.0).failed(NODE, 100.0, retry_after=retry_after) == 101.0

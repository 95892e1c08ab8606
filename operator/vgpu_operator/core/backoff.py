"""Per-object retry backoff for writes the apiserver refused: exponential, jittered, capped, and
never sooner than the apiserver's `Retry-After`.

A write that fails for a reason a re-read cannot fix (422 from validation or an admission policy,
403, 429, 5xx, a timeout) is not retried at once: its object waits `initial` seconds, then
`factor` times longer after each further failure, up to `cap`; each wait is stretched by a
random fraction of up to `jitter` of itself, so objects that failed together do not come back in
step (the semantics of `wait.Backoff`, kubernetes/apimachinery@v0.35.4:pkg/util/wait/backoff.go:
the cap bounds the base duration and the jitter comes on top). A `Retry-After` the apiserver sent
(a 429 from priority and fairness or from a webhook, a 503) is a floor: the next attempt is never
earlier, even past the cap.

Keys are whatever names an object, e.g. `("Node", name)` or `("ConfigMap", namespace, name)`.
Only failing objects are remembered: `succeeded` and `forget` drop one, `retain` drops those that
no longer exist, so memory is bounded by the number of failing objects that still exist.

Pure: no I/O, no clock of its own; every call that needs the time takes `now` (seconds on any
monotonic scale the caller keeps to), and the randomness is injectable for tests.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Failure:
    """What is remembered about one failing object."""

    attempts: int  # failures in a row
    message: str  # the last failure's message (the apiserver's, for an API error)
    since: float  # when the first failure of the run happened
    next_at: float  # no attempt before this
    delay: float  # the base delay the next failure grows from (before jitter)


class Backoff(Generic[K]):
    """Exponential per-key backoff; see the module docstring."""

    def __init__(
        self,
        *,
        initial: float = 1.0,
        cap: float = 300.0,
        factor: float = 2.0,
        jitter: float = 0.2,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if initial <= 0 or cap < initial or factor < 1 or jitter < 0:
            raise ValueError("need 0 < initial <= cap, factor >= 1, jitter >= 0")
        self.initial = initial
        self.cap = cap
        self.factor = factor
        self.jitter = jitter
        self._rand = rand
        self._failures: dict[K, Failure] = {}

    def failed(
        self, key: K, now: float, retry_after: float | None = None, message: str = ""
    ) -> float:
        """Record a failure of `key` at `now`; returns the earliest time of its next attempt."""
        before = self._failures.get(key)
        if before is None:
            base, attempts, since = self.initial, 1, now
        else:
            base = min(self.cap, before.delay * self.factor)
            attempts, since = before.attempts + 1, before.since
        wait = base * (1.0 + self.jitter * self._rand())
        if retry_after is not None and math.isfinite(retry_after) and retry_after > wait:
            wait = retry_after  # (an infinite one would park the key for good: ignored)
        next_at = now + wait
        self._failures[key] = Failure(attempts, message, since, next_at, base)
        return next_at

    def succeeded(self, key: K) -> bool:
        """The object was written: forget its failures. True if it had any."""
        return self._failures.pop(key, None) is not None

    def forget(self, key: K) -> None:
        """The object is gone, or no longer needs a write."""
        self._failures.pop(key, None)

    def retain(self, keep: Callable[[K], bool]) -> None:
        """Forget every key for which `keep` is false (e.g. objects deleted since)."""
        for key in [k for k in self._failures if not keep(k)]:
            del self._failures[key]

    def ready(self, key: K, now: float) -> bool:
        """May `key` be attempted at `now`? (True for a key with no failures.)"""
        failure = self._failures.get(key)
        return failure is None or now >= failure.next_at

    def due(self) -> float | None:
        """The earliest time some failing key may be attempted again; None if none fails."""
        return min((f.next_at for f in self._failures.values()), default=None)

    def due_keys(self, now: float) -> list[K]:
        """The failing keys that may be attempted at `now`."""
        return [k for k, f in self._failures.items() if now >= f.next_at]

    def failing(self) -> dict[K, tuple[int, str, float]]:
        """{key: (failures in a row, last message, since)} of every failing key."""
        return {k: (f.attempts, f.message, f.since) for k, f in self._failures.items()}

    def get(self, key: K) -> Failure | None:
        return self._failures.get(key)

    def __len__(self) -> int:
        return len(self._failures)

    def __contains__(self, key: object) -> bool:
        return key in self._failures

"""Leader election on a `coordination.k8s.io/v1` Lease: the decisions, without I/O or a clock.

The algorithm is client-go's (kubernetes/client-go@v0.35.4:tools/leaderelection/leaderelection.go,
`tryAcquireOrRenew`, `isLeaseValid`, `release`; the record's mapping to the Lease spec is
kubernetes/client-go@v0.35.4:tools/leaderelection/resourcelock/leaselock.go):

- a candidate takes the Lease when it has no holder, or when the record in it has not changed for
  the record's `leaseDurationSeconds`, measured on the candidate's own monotonic clock from the
  moment the candidate first saw that record (client-go's `observedTime`). The `renewTime` in the
  object is never compared with the local clock, so skewed clocks between replicas do not matter;
  only their rates do;
- taking it over from someone else (or from nobody, after a release) increments
  `leaseTransitions` and sets `acquireTime`; the holder's renewals keep both and move `renewTime`;
- a release clears `holderIdentity` and sets `leaseDurationSeconds` to 1;
- every write carries the resourceVersion read (a PUT), so two candidates cannot both win: the
  second gets a 409 (`leader.py`).

One deliberate difference: a record without `leaseDurationSeconds` counts as lasting this
elector's configured duration (client-go would treat it as expired at once).
"""

from __future__ import annotations

import datetime as dt
import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any


def microtime(when: dt.datetime) -> str:
    """A Lease's MicroTime as the apiserver writes it (RFC 3339, microseconds, UTC)."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_seconds(duration: float) -> int:
    """`leaseDurationSeconds` for a configured duration: whole seconds, never below 1."""
    return max(1, math.ceil(duration))


@dataclass(frozen=True)
class Record:
    """client-go's LeaderElectionRecord: the part of a Lease's spec the election uses."""

    holder: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> Record:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def spec(self) -> dict[str, Any]:
        """The Lease spec to write (client-go's LeaderElectionRecordToLeaseSpec)."""
        spec: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


@dataclass(frozen=True)
class Observation:
    """The record this elector last saw, and when it first saw it (its own monotonic clock)."""

    record: Record
    at: float

    def expires(self, fallback: float) -> float:
        """When the record lapses on this elector's clock unless it changes first."""
        return self.at + (self.record.lease_duration_seconds or fallback)


def observe(current: Record, previous: Observation | None, now: float) -> Observation:
    """Keep the observation while the record is unchanged; a changed record restarts the clock."""
    if previous is not None and previous.record == current:
        return previous
    return Observation(current, now)


class Action(enum.Enum):
    CREATE = "create"  # no Lease yet: POST one naming this elector
    ACQUIRE = "acquire"  # free or lapsed: PUT this elector in as the holder
    RENEW = "renew"  # this elector holds it: PUT a new renewTime
    WAIT = "wait"  # someone else holds it and it has not lapsed


@dataclass(frozen=True)
class Decision:
    action: Action
    observed: Observation | None  # what to remember until the next read
    write: Record | None  # the record to write (CREATE, ACQUIRE, RENEW)
    reason: str


def decide(
    current: Record | None,
    identity: str,
    *,
    now: float,
    wall: str,
    observed: Observation | None,
    lease_duration: float,
) -> Decision:
    """client-go's tryAcquireOrRenew after its read: what to do with the Lease as read.

    `current` is the Lease's record (None: there is no Lease), `now` this elector's monotonic
    clock after the read, `wall` the MicroTime to write, `observed` what it remembered."""
    fresh = Record(identity, lease_seconds(lease_duration), wall, wall, 0)
    if current is None:
        return Decision(Action.CREATE, observed, fresh, "no Lease yet")
    seen = observe(current, observed, now)
    if current.holder == identity:
        renewal = replace(
            fresh, acquire_time=current.acquire_time or wall, transitions=current.transitions
        )
        return Decision(Action.RENEW, seen, renewal, "held by this elector")
    left = seen.expires(lease_duration) - now
    if current.holder and left > 0:
        return Decision(Action.WAIT, seen, None, f"held by {current.holder} ({left:.1f}s left)")
    why = "free" if not current.holder else f"{current.holder} stopped renewing"
    return Decision(Action.ACQUIRE, seen, replace(fresh, transitions=current.transitions + 1), why)


def fast_renewal(
    observed: Observation | None, identity: str, *, now: float, wall: str, lease_duration: float
) -> Record | None:
    """client-go's fast path: a holder whose own last write has not lapsed renews on the object
    it last wrote, without reading first (a 409 sends it down the slow path). None otherwise."""
    if observed is None or observed.record.holder != identity:
        return None
    if observed.expires(lease_duration) <= now:
        return None
    return replace(
        observed.record, lease_duration_seconds=lease_seconds(lease_duration), renew_time=wall
    )


def release(current: Record, wall: str) -> Record:
    """client-go's release: no holder, a one-second duration, the transitions kept."""
    return Record("", 1, wall, wall, current.transitions)

"""What the configuration reconciler's writes came to, and their backoff: the record of one pass's
writes (`WriteResult`: written, refused, deferred, conflicts) and `Writes`, which asks the
per-object backoff (`core.backoff`) whether an object may be written now and books each outcome.

A write refused with anything but 404/409 (422 from validation or an admission policy, 403, 429,
5xx, a timeout) does not fail the pass: the object backs off (exponential, per object, never
before the apiserver's Retry-After), the other writes and the rules go on, and no pass writes that
object again before its backoff allows; `retry_at` says when the reconciler should wake for it.
The backoff's clock is the reconciler's `now` (seconds since the epoch).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

from vgpu_operator import kubeapi
from vgpu_operator.controller.node_writes import failure_message
from vgpu_operator.core.backoff import Backoff
from vgpu_operator.core.volcano.writes import Restart

log = logging.getLogger("vgpu_operator.volcano")

ObjectKey = tuple[str, str, str]  # (kind, namespace, name)
WriteBackoff = Backoff[ObjectKey]


def write_backoff() -> WriteBackoff:
    """A refused write: again after about 2 s (a configuration pass's spacing), then twice as
    long each time, at most 5 minutes (+ up to 20% jitter), never before a Retry-After."""
    return Backoff(initial=2.0, cap=300.0, factor=2.0, jitter=0.2)


def retry_at(backoff: WriteBackoff) -> datetime | None:
    """When the earliest object backing off may be written again (None: none is)."""
    due = backoff.due()
    return None if due is None else datetime.fromtimestamp(due, UTC)


@dataclass(frozen=True)
class Written:
    """One write the reconciler made (for Events, logs and tests)."""

    kind: str
    namespace: str
    name: str
    what: str
    uid: str = ""


@dataclass(frozen=True)
class Refused:
    """A write the apiserver refused (anything but 404/409); the object backs off."""

    kind: str
    namespace: str
    name: str
    message: str  # the HTTP status and the apiserver's message
    next_at: datetime


@dataclass
class WriteResult:
    written: list[Written] = field(default_factory=list)
    conflicts: int = 0  # objects that changed under us: render again next pass
    plugin_args_patched: bool = False
    rolled: list[ObjectKey] = field(default_factory=list)  # DaemonSets whose pods now restart
    restarted: list[Restart] = field(default_factory=list)  # the plan's restarts carried out
    refused: list[Refused] = field(default_factory=list)
    deferred: list[ObjectKey] = field(default_factory=list)  # backing off: not attempted


class Writes:
    """The backoff of one pass's writes: may this object be written now, and the bookkeeping of
    each outcome."""

    def __init__(self, backoff: WriteBackoff | None, now: datetime, result: WriteResult) -> None:
        self.backoff = backoff if backoff is not None else write_backoff()
        self.now = now.timestamp()
        self.result = result

    def ready(self, key: ObjectKey) -> bool:
        if self.backoff.ready(key, self.now):
            return True
        self.result.deferred.append(key)
        return False

    def succeeded(self, key: ObjectKey) -> None:
        if self.backoff.succeeded(key):
            log.info("%s %s/%s: written again after failed attempts", *key)

    def gone(self, key: ObjectKey) -> None:
        self.backoff.forget(key)

    def failed(self, key: ObjectKey, exc: kubeapi.ApiError) -> None:
        retry_after = (
            exc.retry_after
            if isinstance(exc, kubeapi.TooManyRequests | kubeapi.ServerError)
            else None
        )
        message = failure_message(exc)
        at = self.backoff.failed(key, self.now, retry_after=retry_after, message=message)
        failure = self.backoff.get(key)
        attempts = failure.attempts if failure is not None else 1
        log.warning(
            "%s %s/%s: write refused (%s); next attempt in %.1fs (%d failures in a row)",
            *key,
            message,
            at - self.now,
            attempts,
        )
        self.result.refused.append(Refused(*key, message, datetime.fromtimestamp(at, UTC)))

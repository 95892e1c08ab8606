"""Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics.

    config = LeaderElectionConfig(namespace="vgpu-system", name="vgpu-operator")
    await LeaderElector(api, config).run(lead)  # `lead()` runs only while this replica leads

As client-go's LeaderElector.Run (kubernetes/client-go@v0.35.4:tools/leaderelection/
leaderelection.go): try to take the Lease every `retry_period` (jittered by a factor 1.2); once
held, start `lead()` as a task and renew every `retry_period`; a renewal that does not succeed
within `renew_deadline` ends the leadership. The decisions themselves are in `leader_core`.

How `run` ends:
- leadership lost (renewal failed, or the Lease names someone else): `lead()` is cancelled and
  `LeadershipLost` is raised; the process should exit, as client-go's OnStoppedLeading does;
- `run` cancelled (a clean shutdown): `lead()` is cancelled and awaited, then the Lease is
  released (no holder, `leaseDurationSeconds: 1`) if `release_on_cancel`, so a standby takes
  over at its next retry instead of after the lease duration; the CancelledError propagates;
- `lead()` returns or raises by itself: the Lease is released as on a cancel, and `run` returns
  or raises what `lead()` did. (client-go keeps renewing; nothing is led then, so this gives up.)

Two deliberate differences from client-go, both on the safe side: a leader that reads a Lease
naming someone else (or no Lease at all) stops at once rather than after the renew deadline; and
`release` leaves a Lease alone that no longer names this elector. The Lease is never released
while `lead()` is still running (it did not stop when cancelled).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes_asyncio import client
from prometheus_client import Gauge

from vgpu_operator import kubeapi
from vgpu_operator.controller import leader_core as core

log = logging.getLogger("vgpu_operator.leader")

JITTER_FACTOR = 1.2  # client-go's JitterFactor: retries wait [retry, 2.2 * retry)

LEADER = Gauge(
    "vgpu_operator_leader",
    "1 while this replica holds the leader Lease (or runs without leader election), 0 while on "
    "standby",
)


class LeadershipLost(RuntimeError):
    """This replica held the Lease and no longer does; the lead was cancelled."""


def default_identity() -> str:
    """The pod's name ($POD_NAME from the downward API, else the host name) and a unique
    suffix, so that two processes on one host are never both the holder
    (kubernetes/kubernetes@v1.35.4:cmd/kube-controller-manager/app/controllermanager.go:
    `id = id + "_" + string(uuid.NewUUID())`)."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Durations in seconds; the defaults are client-go's and kube-controller-manager's."""

    namespace: str
    name: str = "vgpu-operator"
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0  # how long a standby waits after the last change it saw
    renew_deadline: float = 10.0  # how long the leader tries to renew before giving up
    retry_period: float = 2.0  # between attempts (acquire: jittered; renew: fixed)
    release_on_cancel: bool = True

    def __post_init__(self) -> None:
        # client-go's NewLeaderElector checks: the leader gives up before a standby may take
        # over, and has at least one retry within its deadline.
        if not (self.namespace and self.name and self.identity):
            raise ValueError("leader election needs a namespace, a Lease name and an identity")
        if self.retry_period <= 0:
            raise ValueError("retry_period must be greater than zero")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError("renew_deadline must be greater than retry_period * 1.2")


class LeaseLock(Protocol):
    """client-go's resourcelock.Interface for one Lease; raises the `kubeapi` errors
    (NotFound from `get`, Conflict from `create` of an existing or `update` of a stale one)."""

    async def get(self) -> dict[str, Any]: ...
    async def create(self, spec: dict[str, Any]) -> dict[str, Any]: ...
    async def update(self, lease: Mapping[str, Any], spec: dict[str, Any]) -> dict[str, Any]: ...


class ApiLeaseLock:
    """The Lease through `kubeapi.request`; `update` is a PUT carrying the resourceVersion."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str, timeout: float) -> None:
        self._api, self._name, self._namespace, self._timeout = api, name, namespace, timeout
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    async def get(self) -> dict[str, Any]:
        path = f"{self._collection}/{self._name}"
        return await kubeapi.request(self._api, "GET", path, timeout=self._timeout)

    async def create(self, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._name, "namespace": self._namespace},
            "spec": spec,
        }
        return await kubeapi.request(
            self._api, "POST", self._collection, body=body, timeout=self._timeout
        )

    async def update(self, lease: Mapping[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        path = f"{self._collection}/{self._name}"
        body = {**lease, "spec": spec}  # metadata.resourceVersion as read: a 409 if stale
        return await kubeapi.request(self._api, "PUT", path, body=body, timeout=self._timeout)


class LeaderElector:
    """Runs `lead()` while this replica holds the Lease (see the module docstring).

    `is_leader` and the `leading` Event tell probes and callers; `holder` is the last holder seen.
    `lock`, `clock` (monotonic seconds) and `wall` (for the Lease's times) are for tests."""

    def __init__(
        self,
        api: client.ApiClient | None,
        config: LeaderElectionConfig,
        *,
        lock: LeaseLock | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        if lock is None:
            if api is None:
                raise ValueError("LeaderElector needs an ApiClient or a lock")
            lock = ApiLeaseLock(api, config.namespace, config.name, config.renew_deadline)
        self.config = config
        self.leading = asyncio.Event()
        self._lock, self._clock, self._wall = lock, clock, wall
        self._lease: dict[str, Any] | None = None  # the object last read or written
        self._observed: core.Observation | None = None
        self._reported = ""  # the holder last logged
        self._renewed_at: float | None = None
        self._maybe_ours = False  # a write was sent whose outcome is not known
        self._problem = ""

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    @property
    def holder(self) -> str:
        return self._observed.record.holder if self._observed else ""

    def check(self, tolerance: float = 20.0) -> str:
        """For a liveness probe, as client-go's HealthzAdaptor: a problem when this replica
        leads but has not renewed for `lease_duration + tolerance` seconds; "" otherwise."""
        if not self.is_leader or self._renewed_at is None:
            return ""
        late = self._clock() - self._renewed_at
        if late <= self.config.lease_duration + tolerance:
            return ""
        return f"leader but the Lease was last renewed {late:.0f}s ago ({self._problem})"

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        cfg = self.config
        LEADER.set(0)
        log.info("%s: trying to take the Lease %s/%s", cfg.identity, cfg.namespace, cfg.name)
        try:
            while True:
                if await self._try(leading=False):
                    break
                await asyncio.sleep(cfg.retry_period * (1 + JITTER_FACTOR * random.random()))
        except asyncio.CancelledError:
            if cfg.release_on_cancel and self._maybe_ours:
                await self._release()  # an acquiring write in flight when cancelled
            raise
        self._set_leading(True)
        work = asyncio.ensure_future(lead())
        renewer = asyncio.create_task(self._keep_renewing(), name="leader election: renew")
        try:
            await asyncio.wait({work, renewer}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await self._stop_leading(work, renewer, release=cfg.release_on_cancel)
            raise
        if renewer.done():
            self._set_leading(False)
            await self._stop_leading(work, renewer, release=False)
            error = renewer.exception()
            if isinstance(error, LeadershipLost):
                raise error
            raise LeadershipLost(f"renewing the Lease failed: {error!r}") from error
        await self._stop_leading(work, renewer, release=cfg.release_on_cancel)
        work.result()  # what lead() raised, if it did

    async def _keep_renewing(self) -> None:
        """client-go's renew: every retry_period, renew; retry until the renew deadline."""
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.retry_period)
            try:
                async with asyncio.timeout(cfg.renew_deadline):
                    while True:
                        if await self._try(leading=True):
                            break
                        await asyncio.sleep(cfg.retry_period)
            except TimeoutError:
                raise LeadershipLost(
                    f"the Lease was not renewed within {cfg.renew_deadline}s ({self._problem})"
                ) from None

    async def _stop_leading(
        self, work: asyncio.Future[None], renewer: asyncio.Task[None], *, release: bool
    ) -> None:
        renewer.cancel()
        work.cancel()
        await asyncio.gather(renewer, return_exceptions=True)
        await asyncio.wait({work}, timeout=self.config.renew_deadline)
        if not work.done():
            log.error("the lead did not stop when cancelled; the Lease is kept until it lapses")
            release = False
        elif not work.cancelled() and work.exception() is not None:
            log.error("the lead failed: %r", work.exception())
        self._set_leading(False)
        if release:
            await self._release()

    async def _try(self, *, leading: bool) -> bool:
        """client-go's tryAcquireOrRenew: True when this elector holds the Lease afterwards.
        While leading, a Lease that names someone else (or is gone) raises LeadershipLost."""
        cfg, wall = self.config, core.microtime(self._wall())
        fast = core.fast_renewal(
            self._observed,
            cfg.identity,
            now=self._clock(),
            wall=wall,
            lease_duration=cfg.lease_duration,
        )
        if fast is not None and self._lease is not None and await self._write(self._lease, fast):
            return True
        try:
            lease: dict[str, Any] | None = await self._lock.get()
        except kubeapi.NotFound:
            lease = None
        except kubeapi.ApiError as exc:
            self._failed(f"reading the Lease: {exc}")
            return False
        current = core.Record.from_lease(lease) if lease is not None else None
        decision = core.decide(
            current,
            cfg.identity,
            now=self._clock(),
            wall=wall,
            observed=self._observed,
            lease_duration=cfg.lease_duration,
        )
        self._observed = decision.observed
        if self.holder != self._reported:
            self._reported = self.holder
            log.info("Lease %s/%s: %s", cfg.namespace, cfg.name, decision.reason)
        if leading and decision.action is not core.Action.RENEW:
            raise LeadershipLost(f"the Lease is no longer this replica's: {decision.reason}")
        if decision.write is None:
            self._problem = decision.reason
            return False
        return await self._write(lease, decision.write)

    async def _write(self, lease: Mapping[str, Any] | None, record: core.Record) -> bool:
        self._maybe_ours = True
        try:
            if lease is None:
                self._lease = await self._lock.create(record.spec())
            else:
                self._lease = await self._lock.update(lease, record.spec())
        except kubeapi.ApiError as exc:  # a 409: another elector wrote first
            self._maybe_ours = False
            self._failed(f"writing the Lease: {exc}")
            return False
        self._observed = core.Observation(record, self._clock())
        self._renewed_at = self._observed.at
        return True

    async def _release(self) -> None:
        """client-go's release, within renew_deadline: read, and if the Lease still names this
        elector, write the released record (again on a 409: a renewal cancelled in flight may
        have landed after the read)."""
        cfg = self.config
        try:
            async with asyncio.timeout(cfg.renew_deadline):
                while True:
                    lease = await self._lock.get()
                    current = core.Record.from_lease(lease)
                    if current.holder != cfg.identity:
                        return
                    record = core.release(current, core.microtime(self._wall()))
                    try:
                        self._lease = await self._lock.update(lease, record.spec())
                    except kubeapi.Conflict:
                        continue
                    self._observed = core.Observation(record, self._clock())
                    log.info("%s: released the Lease %s/%s", cfg.identity, cfg.namespace, cfg.name)
                    return
        except (kubeapi.ApiError, TimeoutError) as exc:
            log.warning("could not release the Lease (it lapses by itself): %s", exc)

    def _failed(self, problem: str) -> None:
        self._problem = problem
        log.debug("%s: %s", self.config.identity, problem)

    def _set_leading(self, leading: bool) -> None:
        if leading == self.leading.is_set():
            return
        if leading:
            self.leading.set()
            log.info("%s: leading (Lease %s)", self.config.identity, self.config.name)
        else:
            self.leading.clear()
            log.warning("%s: stopped leading", self.config.identity)
        LEADER.set(1 if leading else 0)

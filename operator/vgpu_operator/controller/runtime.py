"""One process of the operator: its liveness endpoint from the start, the Lease (with leader
election), and Kopf with the controller only while this replica may write.

Kopf runs only where the operator may write: at once without leader election, else once this
replica holds the Lease (`Runtime.elect`, `controller.leader`); its start-up handler starts the
controller (`controller.app.start`) with Kopf's policy index. A standby serves its liveness
endpoint, exports `vgpu_operator_leader 0` and watches nothing. A leader that loses its lease
stops Kopf and the controller and then the process (`Runtime.lost`), as client-go's leader
election does.

Before the controller starts, the leader checks its admission policies
(`controller.admission_guard`), and keeps checking them: while they are not the chart's or not
enforced, the controller runs as in observe mode; when that changes, the controller is stopped
and started again in the other mode (Kopf and the Lease stay).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from vgpu_operator import health, kubeapi
from vgpu_operator.controller.admission_guard import AdmissionGuard
from vgpu_operator.controller.app import Controller, Settings, start
from vgpu_operator.controller.leader import LeaderElectionConfig, LeaderElector, LeadershipLost
from vgpu_operator.controller.policies import KopfIndex, PolicyCache
from vgpu_operator.core.admission.verdict import Verdict

log = logging.getLogger("vgpu_operator.handlers")


@dataclass
class Runtime:
    """One process of the operator: its liveness endpoint from the start, the Lease (with
    leader election), and Kopf with the controller only while this replica may write.

    Kopf runs only on the leader: it has no Lease election of its own, and a handler that
    returned early on a standby would still mark the object handled (Kopf keeps its state on
    the object). A standby serves `/healthz`, exports `vgpu_operator_leader 0` and holds no
    watch at all."""

    settings: Settings
    leader: LeaderElectionConfig | None = None  # None: no election (one replica, tests)
    liveness: str | None = None  # http://HOST:PORT/PATH
    controller: Controller | None = None  # None before start-up, and on a standby
    lost: bool = False  # this replica led and lost its lease: the process must exit non-zero
    stop_flag: asyncio.Event = field(default_factory=asyncio.Event)  # the process's
    kopf_stop: asyncio.Event | None = None  # the running Kopf's (the process's without election)
    elector: LeaderElector | None = None
    admission: AdmissionGuard | None = None  # the leader's check of its admission policies
    _index: KopfIndex | None = None  # Kopf's policy index, for each controller started
    _switching: asyncio.Lock = field(default_factory=asyncio.Lock)
    _writes: bool = False  # the running controller writes (False: started as in observe mode)
    _lease_api: kubeapi.Client | None = None
    _health: health.Server | None = None

    async def serve_health(self) -> None:
        """The one liveness endpoint of the process, a standby's too (Kopf's own probes start
        only with Kopf)."""
        if not self.liveness:
            return
        info = {
            "reconcilePasses": lambda: (
                self.controller.reconciler.passes if self.controller is not None else 0
            ),
            "leader": lambda: self.elector.is_leader if self.elector is not None else True,
            # The pod index: listed yet, and how many GPU pods it holds (the benchmark
            # reads these to tell when the listing has settled).
            "podIndexSynced": lambda: (
                self.controller is not None and self.controller.cache.pods.synced.is_set()
            ),
            "gpuPods": lambda: (
                len(self.controller.cache.pods) if self.controller is not None else 0
            ),
        }
        self._health = await health.serve(self.liveness, self.health_checks(), info)

    async def elect(self, lead: Callable[[], Awaitable[None]]) -> None:
        """`lead` while this replica holds the Lease; until stopped, or the Lease is lost
        (`lost`: the process exits 1, as client-go's OnStoppedLeading has it)."""
        assert self.leader is not None
        self._lease_api = await self.settings.credentials.client(
            pool_size=2, user_agent=self.settings.user_agent
        )
        self.elector = LeaderElector(self._lease_api, self.leader)
        election = asyncio.create_task(self.elector.run(lead), name="vgpu-leader-election")
        stopped = asyncio.create_task(self.stop_flag.wait(), name="vgpu-stop")
        try:
            await asyncio.wait({election, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not election.done() and self.kopf_stop is not None:
                self.kopf_stop.set()  # leading: Kopf stops, then the elector releases the Lease
                await asyncio.wait({election})
        finally:
            stopped.cancel()
            if not election.done():
                election.cancel()  # a standby stops trying (and releases a Lease it took)
            try:
                await election
            except asyncio.CancelledError:
                pass
            except LeadershipLost as exc:
                log.error("lost the leader lease: %s; stopping", exc)
                self.lost = True

    async def startup(self, policies: KopfIndex) -> None:
        """Kopf's start-up: the admission check's first verdict, then the controller in the
        mode it allows, reading the policies from Kopf's index (Kopf runs only where it may
        write)."""
        self._index = policies
        cache = PolicyCache(policies)
        self.admission = AdmissionGuard(
            self.settings.credentials,
            self.settings.config,
            lambda: {name: entry.uid for name, entry in cache.items.items()},
            self.admission_changed,
            user_agent=self.settings.user_agent,
        )
        await self.admission.start()
        async with self._switching:  # a verdict coming meanwhile waits for this start
            self._writes = self.admission.verdict.writes
            self.controller = await start(self.admission.settings_for(self.settings), cache)

    async def admission_changed(self, verdict: Verdict) -> None:
        """A new verdict on the admission policies: when it allows writing where the running
        controller was started not to (or the reverse), the controller is stopped and started
        again in the mode it allows (the observe path: `controller.observe`); otherwise the
        policies' condition is written again."""
        assert self.admission is not None
        async with self._switching:
            running = self.controller
            if running is None:
                return  # stopping
            if verdict.writes == self._writes:
                running.reconciler.request_full()
                return
            log.warning(
                "admission policies: %s; restarting the controller %s",
                verdict.reason,
                "in its configured mode" if verdict.writes else "as in observe mode",
            )
            await running.stop()
            self.controller = None
            self._writes = verdict.writes
            self.controller = await start(
                self.admission.settings_for(self.settings), PolicyCache(self._index)
            )

    async def cleanup(self) -> None:
        # Stopped by a signal, Kopf still waits for its stop-flag task: set the flag so it ends
        # at once instead of after Kopf's 5 s grace for hung tasks.
        if self.kopf_stop is not None:
            self.kopf_stop.set()
        if self.admission is not None:
            await self.admission.stop()  # no restart of the controller after this
            self.admission = None
        async with self._switching:
            if self.controller is not None:
                await self.controller.stop()
                self.controller = None

    async def close(self) -> None:
        if self._lease_api is not None:
            await self._lease_api.close()
        if self._health is not None:
            await self._health.cleanup()

    def health_checks(self) -> dict[str, health.Check]:
        def credentials() -> str:
            apis = [c.api for c in (self.controller,) if c is not None]
            apis += [self._lease_api] if self._lease_api is not None else []
            return "; ".join(p for p in (a.auth.problem() for a in apis) if p)

        def lease() -> str:
            return self.elector.check() if self.elector is not None else ""

        return {"credentials": credentials, "lease": lease}

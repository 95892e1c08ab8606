"""The controller's check of its own admission policies while it runs: this module reads, sends
the dry runs and reports; `core.admission.verdict` decides.

    the operator configuration's admissionPolicies (names, hash), requireAdmissionPolicies
      -> one watch per policy and per binding, by name (fieldSelector metadata.name=NAME, which
         RBAC checks against the ClusterRole's resourceNames)
      -> at start, on every change they show (and SETTLE_SECONDS after it), every
         PROBE_SECONDS while enforced and every RETRY_SECONDS while not: the dry runs
         (`core.admission.probes`), sent as the controller's own identity
      -> the verdict: `on_change(verdict)` (controller.runtime restarts the controller as in
         observe mode, or back in its configured mode), the gauge
         `vgpu_operator_admission_policies_enforced`, an Event on each policy when the
         verdict changes, the log; the status writer reads the `AdmissionPoliciesEnforced`
         condition off `condition()`.

It runs on the leader for as long as Kopf does, across the controller's restarts, and decides
before the controller first writes: until a first verdict says the policies are enforced, the
controller runs as in observe mode (it fails closed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller import metrics
from vgpu_operator.controller.app import USER_AGENT, Settings
from vgpu_operator.controller.informer import Change, Informer
from vgpu_operator.core.admission import verdict as core
from vgpu_operator.core.admission.probes import ProbeResult, probe_result, probes
from vgpu_operator.core.admission.verdict import Observation, Verdict
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.kubeapi.events import EventPoster
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.waiting import wait_set

log = logging.getLogger("vgpu_operator.admission")

PROBE_SECONDS = 60.0  # between dry runs while enforced (a change they show is checked at once)
RETRY_SECONDS = 5.0  # between checks while not enforced (a restored policy is seen soon)
SYNC_SECONDS = 10.0  # the first listing's wait at start; what is not listed by then is unread
PROBE_TRIES = 3  # a dry run without a usable answer is sent again, a second apart
DEBOUNCE = 0.2  # a burst of watch events (helm upgrade writes six objects) is one check
# After a change the watches show, the dry runs are sent again this soon: the apiserver's
# admission plugin reads policies and bindings from its own informer, so a change is enforced
# a moment after it is stored, and the first dry run may still see the old ones.
SETTLE_SECONDS = 3.0
NOT_ENFORCED = "AdmissionPoliciesNotEnforced"  # the Events' reasons
ENFORCED = "AdmissionPoliciesEnforced"

OnChange = Callable[[Verdict], Awaitable[None]]


class AdmissionGuard:
    """The check, from `start` to `stop`. `policies()`: the VGPUNodePolicies (name -> uid) the
    Events go on; `on_change(verdict)`: called on every new verdict (the runtime compares it
    with the mode the running controller was started in)."""

    def __init__(
        self,
        credentials: Credentials,
        config: OperatorConfig,
        policies: Callable[[], Mapping[str, str]],
        on_change: OnChange,
        *,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.credentials = credentials
        self.config = config
        self.policies = policies
        self.on_change = on_change
        self.user_agent = user_agent
        self.verdict = core.judge(config, None, None)  # NotRequired, NotConfigured, NotChecked
        self.checked = asyncio.Event()  # set once a first verdict is in
        self.api: kubeapi.Client | None = None
        self.events: EventPoster | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._told: set[str] = set()  # policies with an Event about this verdict's reason
        self._policies: dict[str, Informer[core.SeenPolicy]] = {}
        self._bindings: dict[str, Informer[core.SeenBinding]] = {}

    @property
    def checking(self) -> bool:
        """Whether there is anything to check: required, and named by the configuration."""
        return self.config.require_admission_policies and self.config.admission_policies is not None

    def condition(self) -> tuple[str, str, str]:
        """The `AdmissionPoliciesEnforced` condition of every policy."""
        return self.verdict.condition()

    def settings_for(self, settings: Settings) -> Settings:
        """`settings` (controller.app.Settings) as the controller runs them now: its configured
        mode while the verdict lets it write, observe mode otherwise; with this check's
        condition for the policies' status."""
        settings = replace(settings, admission=self.condition)
        if self.verdict.writes:
            return settings
        observing = settings.config.model_copy(update={"mode": "observe"})
        return replace(settings, config=observing, options=replace(settings.options, observe=True))

    # -- running ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start watching and decide once (at most about SYNC_SECONDS plus the dry runs); the
        verdict then stays `NotChecked` (no writes) until one comes."""
        metrics.export_admission(self.verdict.reason, self.verdict.enforced)
        expected = self.config.admission_policies
        if not self.checking or expected is None:  # NotRequired (a warning) or NotConfigured
            level = logging.WARNING if self.verdict.reason == "NotRequired" else logging.INFO
            log.log(level, "admission policies not checked: %s", self.verdict.message)
            return
        # a connection per watch (each holds one for minutes), and a few for the dry runs and
        # the Events
        pool = 2 * len(expected.names) + 4
        self.api = await self.credentials.client(pool_size=pool, user_agent=self.user_agent)
        self.events = EventPoster(
            self.api, component=USER_AGENT, instance=self.user_agent, field_manager=None
        )
        self._task = asyncio.create_task(self._run(), name="vgpu-admission-check")
        await wait_set(self.checked, SYNC_SECONDS + PROBE_TRIES * 12.0)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self.events is not None:
            await self.events.drain()
        if self.api is not None:
            await self.api.close()
            self.api = None

    async def _run(self) -> None:
        assert self.api is not None and self.config.admission_policies is not None
        for name in self.config.admission_policies.names:
            self._policies[name] = self._informer(core.POLICIES_PATH, name, core.seen_policy)
            self._bindings[name] = self._informer(core.BINDINGS_PATH, name, core.seen_binding)
        await asyncio.gather(self._loop(), *(i.run() for i in self._informers()))

    def _informer(self, path: str, name: str, parse: Callable[[Any], Any]) -> Informer[Any]:
        return Informer(
            self.api,
            path.rsplit("/", 1)[1],
            path,
            parse,
            self._changed,
            kubeapi.WatchOptions(field_selector=f"metadata.name={name}"),
        )

    def _informers(self) -> list[Informer[Any]]:
        return [*self._policies.values(), *self._bindings.values()]

    async def _changed(self, change: Change[Any]) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        await asyncio.gather(*(wait_set(i.synced, SYNC_SECONDS) for i in self._informers()))
        changed = False
        while True:
            self._wake.clear()
            await self._apply(await self.check())
            interval = PROBE_SECONDS if self.verdict.enforced else RETRY_SECONDS
            if changed:  # the apiserver's admission applies a stored change a moment later
                interval = min(interval, SETTLE_SECONDS)
            changed = await wait_set(self._wake, interval)
            if changed:
                await asyncio.sleep(DEBOUNCE)

    async def check(self) -> Verdict:
        """One verdict: the objects as the watches hold them; the dry runs when those are the
        chart's (otherwise they would add nothing)."""
        seen = self.observation()
        read = core.judge(self.config, seen, None)
        if not read.enforced:
            return read
        return core.judge(self.config, seen, await self.probe())

    def observation(self) -> Observation:
        unread: dict[str, str] = {}
        for name in self._policies:
            if not (self._policies[name].synced.is_set() and self._bindings[name].synced.is_set()):
                unread[name] = (
                    "not listed (the controller needs get, list and watch on it by name: the "
                    "chart's ClusterRole grants them)"
                )
        return Observation(
            policies={n: i.items.get(n) for n, i in self._policies.items()},
            bindings={n: i.items.get(n) for n, i in self._bindings.items()},
            unread=unread,
        )

    async def probe(self) -> list[ProbeResult]:
        assert self.api is not None and self.config.admission_policies is not None
        names = self.config.admission_policies.names
        out = []
        for p in probes(self.config):
            for attempt in range(PROBE_TRIES):
                status, message = await kubeapi.answer(
                    self.api,
                    p.method,
                    p.path,
                    body=p.body,
                    query={"dryRun": "All"},
                    content_type=p.content_type,
                )
                result = probe_result(p, status, message, names)
                if result.outcome != "failed" or attempt == PROBE_TRIES - 1:
                    break
                await asyncio.sleep(1.0)
            out.append(result)
        return out

    async def _apply(self, verdict: Verdict) -> None:
        old, self.verdict = self.verdict, verdict
        first = not self.checked.is_set()
        self.checked.set()
        metrics.export_admission(verdict.reason, verdict.enforced)
        if old.reason != verdict.reason:
            self._told.clear()
        if not verdict.enforced or not (first or old.reason == verdict.reason):
            self._post(verdict)  # (a policy listed later is told on a later check)
        if old.condition() == verdict.condition():
            return
        level = logging.INFO if verdict.writes else logging.ERROR
        log.log(level, "admission policies: %s %s", verdict.reason, verdict.condition()[2])
        await self.on_change(verdict)

    def _post(self, verdict: Verdict) -> None:
        """One Event on each policy not told of this verdict's reason yet: Warning while the
        controller does not write, Normal when it writes again."""
        if self.events is None:
            return
        kind, reason = ("Warning", NOT_ENFORCED) if not verdict.enforced else ("Normal", ENFORCED)
        message = f"{verdict.reason}: {verdict.condition()[2]}"
        for name, uid in self.policies().items():
            if name in self._told:
                continue
            self._told.add(name)
            ref = kubeapi.object_ref(contract.POLICY_KIND, name, uid=uid)
            self.events(ref, kind, reason, message)


async def read_admission(api: kubeapi.Client, config: OperatorConfig) -> Observation | None:
    """The policies and bindings `config` names, read once by name (`doctor`); None when there
    is nothing to judge them against (no `admissionPolicies`, and they are required)."""
    expected = config.admission_policies
    if expected is None or not config.require_admission_policies:
        return None if config.require_admission_policies else Observation({}, {})
    policies: dict[str, core.SeenPolicy | None] = {}
    bindings: dict[str, core.SeenBinding | None] = {}
    unread: dict[str, str] = {}
    for name in expected.names:
        try:
            policies[name] = await _get(api, core.POLICIES_PATH, name, core.seen_policy)
            bindings[name] = await _get(api, core.BINDINGS_PATH, name, core.seen_binding)
        except kubeapi.ApiError as exc:
            unread[name] = str(exc)
    return Observation(policies, bindings, unread)


async def _get(api: kubeapi.Client, path: str, name: str, parse: Callable[[Any], Any]) -> Any:
    try:
        return parse(await kubeapi.request(api, "GET", f"{path}/{name}"))
    except kubeapi.NotFound:
        return None

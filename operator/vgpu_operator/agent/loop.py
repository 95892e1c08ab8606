"""The node agent's loop: watch the own Node, apply its released configuration, report.

One task follows the Node (`NodeApi.changes`: kubeapi.list_watch with the field selector
`metadata.name=<node>`) and wakes the main task when the released configuration differs from the
one acted on. The main task acts at start, on such a change, and when the resync (or, after a
failure, the retry) is due:

    GET the Node -> previous = its inventory's `applied` -> plan; if the hardware will change,
    PATCH state=applying -> reconcile_gpus -> GET -> one PATCH with the terminal state and the
    inventory, only what differs (none when the Node already says it) -> an Event if decide says so.

Whatever escapes the action (an nvidia-smi output the parser does not know, a bug) ends it as
`failed` with the error, reported like any outcome. A killed agent leaves `applying` and its
partial work behind; the next start re-plans from what
the hardware has and finishes the job (the planner keeps what already matches). SIGTERM lets the
action under way finish and then stops; a second signal cancels it (agent.cli).

The decisions are pure functions in agent.decide; this module only sequences the I/O.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from vgpu_operator import kubeapi
from vgpu_operator.agent import decide, metrics
from vgpu_operator.agent.apply import Outcome, Reason, observe, reconcile_gpus
from vgpu_operator.agent.decide import Memory, NodeView, Released, Trigger, node_view
from vgpu_operator.agent.kubelet import PodResourcesGuard
from vgpu_operator.agent.nodeapi import NodeApi
from vgpu_operator.agent.smi import NvidiaSmi, SmiError
from vgpu_operator.core.mig.partition import plan_node
from vgpu_operator.kubeapi.events import event_body
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.waiting import wait_set

log = logging.getLogger("vgpu_operator.agent")

CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class AgentOptions:
    resync: float = 300.0  # seconds between unprompted actions (re-apply after a reboot)
    retry: float = 30.0  # seconds until a failed or blocked node is tried again
    max_backoff: float = 30.0  # cap of the back-off after API errors
    # asked before anything is destroyed or reset (agent.kubelet); None: processes only
    guard: PodResourcesGuard | None = None


class Agent:
    """The loop for one node. `run()` until `stop()`; `act()` once for `--once`."""

    def __init__(
        self,
        api: NodeApi,
        driver: NvidiaSmi,
        options: AgentOptions | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.driver = driver
        self.options = options or AgentOptions()
        self.clock = clock
        self.memory = Memory()
        self.latest: Mapping[str, Any] | None = None  # the Node as last seen
        self.due = 0.0  # clock time of the next resync or retry
        self.actions = 0
        self.writes = 0
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()

    # --- lifecycle --------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Stop after the action under way (if any) has finished."""
        self._stopping.set()
        self._wake.set()

    async def run(self) -> None:
        watcher = asyncio.create_task(self._watch(), name=f"watch-node-{self.api.node}")
        try:
            await self._main()
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            log.info("agent stopped after %d action(s), %d write(s)", self.actions, self.writes)

    async def _main(self) -> None:
        backoff = 1.0
        while not self.stopping:
            self._wake.clear()
            view = node_view(self.latest) if self.latest is not None else None
            why = decide.trigger(view, self.memory, due=self.clock() >= self.due)
            if why is not None:
                try:
                    await self.act(why)
                    backoff = 1.0
                except Exception as exc:  # the API, mostly: try again, never die
                    log.warning("action (%s) failed: %s: %s", why, type(exc).__name__, exc)
                    self.due = self.clock() + backoff
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, self.options.max_backoff)
                continue
            # Nothing to do: wait for the watch, a stop, or the resync.
            timeout = None if view is None else max(0.0, self.due - self.clock())
            await wait_set(self._wake, timeout)

    async def _sleep(self, seconds: float) -> None:
        await wait_set(self._stopping, seconds)

    # --- the watch --------------------------------------------------------------------------

    def _see(self, node: Mapping[str, Any] | None) -> None:
        self.latest = node
        if node is None:
            self.memory.acted = False  # deleted: a Node of that name later is a fresh start
            return
        view = node_view(node)
        if not self.memory.acted or view.config_text != self.memory.acted_config:
            self._wake.set()  # the loop asks decide.trigger; heartbeats do not get this far

    async def _watch(self) -> None:
        """Follow the own Node through `NodeApi.changes` (kubeapi.list_watch: resuming,
        listing again on 410 and backing off are its job, not the agent's)."""
        async for update in self.api.changes():
            if isinstance(update, kubeapi.Listing):
                self._see(dict(update.items[0]) if update.items else None)
            elif update.type == "DELETED":
                self._see(None)
            else:
                self._see(update.obj)

    # --- one action -------------------------------------------------------------------------

    async def act(self, why: Trigger = "start") -> Outcome | None:
        """Apply the released configuration once and report it. None when the Node is gone."""
        node = await self.api.get()
        self.latest = node
        if node is None:
            log.warning("node %s not found; nothing to act on", self.api.node)
            return None
        view = node_view(node)
        rel = decide.released(view)
        previous = decide.previous_applied(view)
        self.memory.acted = True
        self.memory.acted_config = view.config_text
        self.actions += 1
        mode = rel.config.mode if rel.config is not None else ("invalid" if rel.error else "none")
        log.info("acting (%s): released mode %s, state %s", why, mode, view.state or "-")
        started = time.monotonic()
        try:
            outcome = await self._apply(view, rel, previous)
        except kubeapi.ApiError:
            raise  # the API: the loop tries again after a back-off
        except Exception as exc:  # odd nvidia-smi output, a bug: the node still gets a final state
            log.exception("action (%s) failed inside the agent", why)
            outcome = Outcome("failed", Reason.INTERNAL, f"{type(exc).__name__}: {exc}")
        metrics.action_done(
            outcome.state, outcome.event_reason, time.monotonic() - started, outcome.inventory
        )
        self.memory.last_state = outcome.state
        delay = decide.next_delay(
            outcome.state, resync=self.options.resync, retry=self.options.retry
        )
        self.due = self.clock() + delay
        log.info("outcome: %s (%s): %s", outcome.state, outcome.reason, outcome.message)
        await self._report(view, rel, outcome)
        return outcome

    async def _apply(self, view: NodeView, rel: Released, previous: NodeConfig | None) -> Outcome:
        if rel.error is not None:
            seen = await reconcile_gpus(self.driver, None, previous)  # reads, changes nothing
            return replace(seen, state="failed", reason=Reason.INVALID, message=rel.error)
        if (why := decide.mig_manager_block(view, rel)) is not None:
            seen = await reconcile_gpus(self.driver, None, previous)  # reads, changes nothing
            return replace(seen, state="blocked", reason=Reason.MIG_MANAGER, message=why)
        patch = decide.applying_patch(view)  # None when a killed agent left `applying`
        if patch is not None and await self._changes_hardware(rel.config, previous):
            await self._patch(patch)
        return await reconcile_gpus(self.driver, rel.config, previous, guard=self.options.guard)

    async def _changes_hardware(
        self, desired: NodeConfig | None, previous: NodeConfig | None
    ) -> bool:
        """Whether the plan has steps (then the node says `applying` while they run)."""
        try:
            return bool(plan_node(await observe(self.driver), desired, previous).steps)
        except SmiError:
            return False  # reconcile_gpus reads again and reports the failure

    async def _patch(self, body: dict[str, Any]) -> None:
        self.latest = await self.api.patch(body)
        self.writes += 1

    async def _report(self, before: NodeView, rel: Released, outcome: Outcome) -> None:
        state = decide.state_label(outcome.state, rel)
        inventory = decide.inventory_text(outcome)
        for _ in range(CONFLICT_RETRIES):
            fresh = await self.api.get()
            self.latest = fresh
            if fresh is None:
                return
            current = node_view(fresh)
            if current.config_text != self.memory.acted_config:
                # Released again meanwhile: this result is for the old one; the next action
                # (already woken by the watch) reports for the new one.
                log.info("the released configuration changed during the action; not reporting")
                return
            patch = decide.terminal_patch(current, state, inventory)
            if patch is None:
                break
            try:
                await self._patch(patch)
                break
            except kubeapi.Conflict:
                continue  # the Node changed between GET and PATCH (a heartbeat): again
        spec = decide.event_for(outcome, before=before.state, released=rel, memory=self.memory)
        if spec is not None:
            try:
                ref = kubeapi.object_ref("Node", before.name, uid=before.uid)
                body = event_body(
                    ref,
                    spec.type,
                    spec.reason,
                    spec.message,
                    component=decide.COMPONENT,
                    instance=before.name,
                    host=before.name,
                )
                await self.api.post_event(body)
                self.memory.last_event = spec.key
                self.writes += 1
            except Exception as exc:  # an Event is best effort
                log.warning("could not post event %s: %s", spec.reason, exc)

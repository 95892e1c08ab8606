"""The node side of the policy reconciler's passes (`controller.reconciler`): one merge PATCH
per node that differs, by a fixed set of workers; a 409 reads the node again and plans it again;
any other failure backs that node off (exponential, never before Retry-After) while the others
go on, and one timer brings the earliest back when due. The writer owns that back-off and its
timer, and the writes the watch has not delivered yet (`overlay`, `is_own_write`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import kubeapi
from vgpu_operator.controller import metrics
from vgpu_operator.core.backoff import Backoff
from vgpu_operator.core.nodes.facts import NodeFacts, node_facts
from vgpu_operator.core.nodes.planner import ClusterPlan, NodePlan

log = logging.getLogger("vgpu_operator.reconciler")

BACKOFF_SLACK = 0.01  # the wake-up comes this much after the due time (never just before it)

# Plans nodes read again after a 409 (the reconciler's planning of its current pass).
Replan = Callable[[list[NodeFacts]], ClusterPlan]


def node_write_backoff() -> Backoff[str]:
    """A refused node write: retried after about 1 s, then twice as long each time, at most
    5 minutes (+ up to 20% jitter), never before the apiserver's Retry-After."""
    return Backoff(initial=1.0, cap=300.0, factor=2.0, jitter=0.2)


class NodeWriter:
    """Writes the nodes of a pass. `request_nodes` asks the reconciler for a pass over nodes (a
    node due again, a node that kept changing); `observe`: no node is written (mode observe,
    `controller.observe` reports them). `idle` is set while no node writes are under way (the
    configuration pass waits for it)."""

    def __init__(
        self,
        api: client.ApiClient,
        request_nodes: Callable[[Iterable[str]], None],
        *,
        concurrency: int = 32,
        conflict_retries: int = 3,
        observe: bool = False,
        backoff: Backoff[str] | None = None,
        clock: Callable[[], float] = time.monotonic,  # the backoff's (the event loop's clock)
    ) -> None:
        self.api = api
        self.request_nodes = request_nodes
        self.concurrency = concurrency
        self.conflict_retries = conflict_retries
        self.observe = observe
        # Nodes whose writes the apiserver refused (anything but 404/409): not written again
        # before their backoff allows; one timer wakes the reconciler for the earliest.
        self.backoff = backoff if backoff is not None else node_write_backoff()
        self.clock = clock
        self.idle = asyncio.Event()
        self.idle.set()
        # Writes this process made that the watch may not have delivered yet (node -> object).
        self._fresh: dict[str, NodeFacts] = {}
        self._backoff_timer: asyncio.TimerHandle | None = None
        self._backoff_timer_at = 0.0

    # -- what the watch has not delivered yet -----------------------------------------------
    def overlay(self, nodes: dict[str, NodeFacts]) -> None:
        """Our own writes the watch has not delivered yet replace what the informer holds."""
        for name, facts in list(self._fresh.items()):
            seen = nodes.get(name)
            if seen is not None and _newer_or_same(seen.resource_version, facts.resource_version):
                del self._fresh[name]  # the watch caught up with our own write
            elif seen is not None:
                nodes[name] = facts

    def is_own_write(self, name: str, facts: NodeFacts) -> bool:
        """True for the watch event of a write this process made (nothing to do for it)."""
        fresh = self._fresh.get(name)
        return fresh is not None and fresh.resource_version == facts.resource_version

    def failures(self) -> dict[str, str]:
        """The nodes backing off, each with its last failure's message (the policy status)."""
        return {node: f[1] for node, f in self.backoff.failing().items()}

    # -- the writes -------------------------------------------------------------------------
    async def write(
        self, plans: Iterator[NodePlan], replan: Replan, nodes: dict[str, NodeFacts]
    ) -> dict[str, NodePlan]:
        """PATCH every node whose plan has one, as `plans` yields them; returns the plans
        that were written (and puts what they wrote in `nodes`).

        A 409 reads the node again and plans it again (`conflict_retries` times). A write that
        fails otherwise (422 from validation or an admission policy, 403, 429, 5xx, a timeout)
        puts the node in `backoff`: no pass writes it again before its backoff allows
        (exponential per node, never before the apiserver's Retry-After), the other nodes go on,
        and one timer wakes the reconciler for the earliest node due. The policy status names
        the failing nodes with the apiserver's message (`failures`)."""
        if self.observe:
            return {}  # mode: observe writes no node (controller.observe reports them)
        written: dict[str, NodePlan] = {}
        backoff = self.backoff
        backoff.retain(lambda name: name in nodes)  # deleted nodes
        now = self.clock()

        async def write(plan: NodePlan) -> None:
            for _attempt in range(self.conflict_retries + 1):
                if plan.patch is None:
                    backoff.forget(plan.node)
                    return
                try:
                    obj = await kubeapi.request(
                        self.api,
                        "PATCH",
                        kubeapi.node_path(plan.node),
                        body=plan.patch,
                        content_type=kubeapi.MERGE_PATCH,
                        accept=kubeapi.METADATA_ONLY,
                    )
                except kubeapi.Conflict:
                    metrics.NODE_WRITES.labels(outcome="conflict").inc()
                    try:
                        fresh = await kubeapi.request(self.api, "GET", kubeapi.node_path(plan.node))
                    except kubeapi.NotFound:
                        self._node_gone(plan.node, nodes)
                        return
                    nodes[plan.node] = node_facts(fresh)
                    plan = replan([nodes[plan.node]]).plans[plan.node]
                    continue
                except kubeapi.NotFound:
                    self._node_gone(plan.node, nodes)
                    return
                metrics.NODE_WRITES.labels(outcome="ok").inc()
                facts = node_facts(_written(obj, plan.patch or {}, nodes.get(plan.node)))
                nodes[plan.node] = facts
                self._fresh[plan.node] = facts
                written[plan.node] = plan
                if backoff.succeeded(plan.node):
                    log.info("node %s: written again after failed attempts", plan.node)
                return
            log.warning("node %s kept changing under us; will retry", plan.node)
            self.request_nodes([plan.node])

        def writable() -> Iterator[NodePlan]:
            for plan in plans:
                if plan.patch is None:
                    backoff.forget(plan.node)  # nothing to write any more (or a problem)
                elif backoff.ready(plan.node, now):
                    yield plan

        # A fixed set of workers over one iterator: bounded concurrency without a thousand
        # tasks waiting on a semaphore (whose wake-ups cost more than the writes' own
        # bookkeeping). Nodes backing off are left out: their timer brings them back when due.
        todo = writable()

        async def worker() -> None:
            for plan in todo:
                try:
                    await write(plan)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._write_failed(plan.node, exc)

        self.idle.clear()  # writing (the configuration pass waits for the end)
        try:
            await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        finally:
            self.idle.set()
            self._schedule_backoff_wake()
        return written

    def _node_gone(self, name: str, nodes: dict[str, NodeFacts]) -> None:
        nodes.pop(name, None)
        self.backoff.forget(name)

    def _write_failed(self, name: str, exc: Exception) -> None:
        """A node write failed with anything but 404/409: back off that node."""
        metrics.NODE_WRITES.labels(outcome="error").inc()
        retry_after = (
            exc.retry_after
            if isinstance(exc, kubeapi.TooManyRequests | kubeapi.ServerError)
            else None
        )
        message = failure_message(exc)
        now = self.clock()
        at = self.backoff.failed(name, now, retry_after=retry_after, message=message)
        failure = self.backoff.get(name)
        attempts = failure.attempts if failure is not None else 1
        log.warning(
            "node %s: write failed (%s); next attempt in %.1fs (%d failures in a row)",
            name,
            message,
            at - now,
            attempts,
        )

    def _schedule_backoff_wake(self) -> None:
        """One timer, at the earliest time a backing-off node may be written again."""
        due = self.backoff.due()
        timer = self._backoff_timer
        if timer is not None and due is not None and self._backoff_timer_at <= due:
            return  # an earlier (or the same) wake-up is already set
        if timer is not None:
            timer.cancel()
            self._backoff_timer = None
        if due is None:
            return
        delay = max(0.0, due - self.clock()) + BACKOFF_SLACK
        self._backoff_timer_at = due
        self._backoff_timer = asyncio.get_running_loop().call_later(delay, self._backoff_due)

    def _backoff_due(self) -> None:
        """The timer: a pass for the nodes now due (it sets the next timer after its writes)."""
        self._backoff_timer = None
        due = self.backoff.due_keys(self.clock())
        if due:
            self.request_nodes(due)
        else:  # those nodes were forgotten meanwhile: wait for the next one
            self._schedule_backoff_wake()


def _newer_or_same(seen: str, ours: str) -> bool:
    """resourceVersions are opaque, but etcd's are integers; compare when both parse."""
    try:
        return int(seen) >= int(ours)
    except ValueError:
        return seen == ours


def failure_message(exc: BaseException) -> str:
    """A failed write as the status and the logs show it: the HTTP status and the apiserver's
    own message (what kubectl prints), or what went wrong when there was no answer."""
    if isinstance(exc, kubeapi.Unreachable):
        return f"no answer from the apiserver: {exc.message}"
    if isinstance(exc, kubeapi.ApiError):
        return f"{exc.status} {exc.message}"
    return f"{type(exc).__name__}: {exc}"


def _written(
    response: Mapping[str, Any], patch: Mapping[str, Any], before: NodeFacts | None
) -> dict[str, Any]:
    """The Node after a write, from a metadata-only response: its taints are the patch's when
    it set them, else the ones it had (the PATCH carried the resourceVersion they were read
    at, so nobody changed them in between), and its device capacity the one it had (a label
    write does not change it). A full Node response is taken as it is."""
    if "spec" in response:
        return dict(response)
    spec = patch.get("spec") or {}
    kept = [dict(t) for t in (before.taints if before else ())]
    taints = spec.get("taints", kept)
    capacity = dict(before.capacity) if before else {}
    cordon = spec.get("unschedulable", before.unschedulable if before else False)
    return {
        "metadata": response.get("metadata") or {},
        "spec": {"taints": taints, "unschedulable": cordon},
        "status": {"capacity": capacity},
    }

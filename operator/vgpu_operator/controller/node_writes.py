"""The node side of the reconciler's pass (`controller.reconciler`): one merge PATCH per node
that differs, by a fixed set of workers; a 409 reads the node again and plans it again; any other
failure backs that node off (exponential, never before Retry-After) while the others go on, and
one timer brings the earliest back when due."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import kubeapi
from vgpu_operator.controller import metrics
from vgpu_operator.controller.observe import Observer
from vgpu_operator.core.backoff import Backoff
from vgpu_operator.core.nodes.facts import NodeFacts, node_facts
from vgpu_operator.core.nodes.planner import ClusterPlan, NodePlan
from vgpu_operator.core.nodes.validate import ParsedPolicy

log = logging.getLogger("vgpu_operator.reconciler")

BACKOFF_SLACK = 0.01  # the wake-up comes this much after the due time (never just before it)


def node_write_backoff() -> Backoff[str]:
    """A refused node write: retried after about 1 s, then twice as long each time, at most
    5 minutes (+ up to 20% jitter), never before the apiserver's Retry-After."""
    return Backoff(initial=1.0, cap=300.0, factor=2.0, jitter=0.2)


class NodeWrites:
    """Node writes and their backoff; the base of `Reconciler`, whose fields these are."""

    api: client.ApiClient
    observer: Observer | None
    node_backoff: Backoff[str]
    clock: Callable[[], float]
    idle: asyncio.Event
    _fresh: dict[str, NodeFacts]
    _backoff_timer: asyncio.TimerHandle | None
    _backoff_timer_at: float

    @property
    def conflict_retries(self) -> int:
        raise NotImplementedError

    @property
    def concurrency(self) -> int:
        raise NotImplementedError

    def request_nodes(self, names: Iterable[str]) -> None:
        raise NotImplementedError

    def _plan(self, targets: Iterable[NodeFacts], parsed: list[ParsedPolicy]) -> ClusterPlan:
        raise NotImplementedError

    # -- nodes ------------------------------------------------------------------------------
    async def _write_nodes(
        self,
        plans: Iterator[NodePlan],
        parsed: list[ParsedPolicy],
        nodes: dict[str, NodeFacts],
    ) -> dict[str, NodePlan]:
        """PATCH every node whose plan has one, as `plans` yields them; returns the plans
        that were written.

        A 409 reads the node again and plans it again (`conflict_retries` times). A write that
        fails otherwise (422 from validation or an admission policy, 403, 429, 5xx, a timeout)
        puts the node in `node_backoff`: no pass writes it again before its backoff allows
        (exponential per node, never before the apiserver's Retry-After), the other nodes go on,
        and one timer wakes the reconciler for the earliest node due. The policy status names
        the failing nodes with the apiserver's message (`_write_statuses`)."""
        if self.observer is not None:
            return {}  # mode: observe writes no node (controller.observe reports them)
        written: dict[str, NodePlan] = {}
        backoff = self.node_backoff
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
                    plan = self._plan([nodes[plan.node]], parsed).plans[plan.node]
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
        self.node_backoff.forget(name)

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
        at = self.node_backoff.failed(name, now, retry_after=retry_after, message=message)
        failure = self.node_backoff.get(name)
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
        due = self.node_backoff.due()
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
        due = self.node_backoff.due_keys(self.clock())
        if due:
            self.request_nodes(due)
        else:  # those nodes were forgotten meanwhile: wait for the next one
            self._schedule_backoff_wake()


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

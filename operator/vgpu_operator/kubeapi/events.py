"""core/v1 Events: one builder and one poster, for the controller and the node agent.

Kopf's `kopf.event()` only works inside Kopf's handler context; the reconcilers and the agent run
as their own tasks, so they post Events themselves. Cluster-scoped objects (Nodes, policies) get
their Events in `default`, where `kubectl describe` looks for them; namespaced ones in their
namespace. Posting never blocks or fails the caller: errors are logged.

`event_body` and `events_path` import nothing but the standard library (the node agent posts
through `kubeapi.lite`); `EventPoster` posts through `kubeapi.request`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from kubernetes_asyncio import client

log = logging.getLogger("vgpu_operator.events")

EVENTS_NAMESPACE = "default"
MESSAGE_LIMIT = 1024  # the apiserver refuses longer Event messages

EventType = Literal["Normal", "Warning"]


def event_body(
    ref: Mapping[str, Any],
    type: str,
    reason: str,
    message: str,
    *,
    component: str,
    instance: str,
    host: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The Event about the object `ref` (`kubeapi.object_ref`)."""
    meta = ref.get("metadata") or {}
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    involved: dict[str, Any] = {
        "apiVersion": ref.get("apiVersion"),
        "kind": ref.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid") or None,
    }
    if meta.get("namespace"):
        involved["namespace"] = meta["namespace"]
    source: dict[str, Any] = {"component": component}
    if host:
        source["host"] = host
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:12]}",
            "namespace": meta.get("namespace") or EVENTS_NAMESPACE,
        },
        "involvedObject": involved,
        "type": type,
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "source": source,
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def events_path(body: Mapping[str, Any]) -> str:
    return f"/api/v1/namespaces/{body['metadata']['namespace']}/events"


class EventPoster:
    """Fire-and-forget posting with a bound on how many are in flight.
    `poster(ref, type, reason, message)`; `await poster.drain()` before the client closes."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        component: str,
        instance: str | None = None,
        field_manager: str | None = None,
        limit: int = 16,
    ) -> None:
        self.api = api
        self.component = component
        self.instance = instance or component
        self.field_manager = field_manager or component
        self._sem = asyncio.Semaphore(limit)
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, ref: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        body = event_body(
            ref, type, reason, message, component=self.component, instance=self.instance
        )
        task = asyncio.get_running_loop().create_task(self.post(body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def post(self, body: Mapping[str, Any]) -> None:
        from vgpu_operator.kubeapi.aio import request  # the controller's client (docstring)

        async with self._sem:
            try:
                await request(
                    self.api, "POST", events_path(body), body=body, field_manager=self.field_manager
                )
            except Exception as exc:  # an Event is best effort by nature
                name = (body.get("involvedObject") or {}).get("name")
                log.warning("could not post event %s on %s: %s", body.get("reason"), name, exc)

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

"""Posting Events through the operator's own client.

Kopf's `kopf.event()` only works inside Kopf's handler context; the reconciler runs as its own
task, so it posts core/v1 Events itself. Cluster-scoped objects get their Events in `default`,
as kubectl and Kopf expect; namespaced ones (ConfigMaps, Pods, DaemonSets) in their namespace.
Posting never blocks or fails a reconcile: errors are logged.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes_asyncio import client

from vgpu_operator import kubeapi

log = logging.getLogger("vgpu_operator.events")

SOURCE = "vgpu-operator"
EVENTS_NAMESPACE = "default"


class EventLike(Protocol):
    """What an Event says (core.events.EventSpec, or any object with these fields)."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...


def event_body(spec: EventLike, ref: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    meta = ref.get("metadata", {})
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    involved = {
        "apiVersion": ref.get("apiVersion"),
        "kind": ref.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid") or None,
    }
    if meta.get("namespace"):
        involved["namespace"] = meta["namespace"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:12]}",
            "namespace": meta.get("namespace") or EVENTS_NAMESPACE,
        },
        "involvedObject": involved,
        "type": spec.type,
        "reason": spec.reason,
        "message": spec.message[:1024],
        "source": {"component": SOURCE},
        "reportingComponent": SOURCE,
        "reportingInstance": SOURCE,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventPoster:
    """Fire-and-forget posting with a bound on how many are in flight."""

    def __init__(self, api: client.ApiClient, limit: int = 16) -> None:
        self.api = api
        self._sem = asyncio.Semaphore(limit)
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, spec: EventLike, ref: Mapping[str, Any]) -> None:
        task = asyncio.get_running_loop().create_task(self._post(spec, ref))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, spec: EventLike, ref: Mapping[str, Any]) -> None:
        body = event_body(spec, ref, datetime.now(UTC))
        async with self._sem:
            try:
                await kubeapi.request(
                    self.api,
                    "POST",
                    f"/api/v1/namespaces/{body['metadata']['namespace']}/events",
                    body=body,
                )
            except Exception as exc:  # an Event is best effort by nature
                log.warning("could not post event %s on %s: %s", spec.reason, spec.name, exc)

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

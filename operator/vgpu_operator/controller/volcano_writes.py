"""Enforce's interpreter of the write plan (`core.volcano.writes.plan_writes`): send what is due
now, in the plan's order, record what came of it, back off what was refused. It decides nothing:
what to write, with which body and when, is the plan's.

Every ConfigMap and DaemonSet write carries the resourceVersion it was computed from: a 409 means
someone edited the object meanwhile, and the next pass renders from the newer version. A write
refused otherwise backs off per object (`controller.write_results`) and does not fail the pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import kubeapi
from vgpu_operator.controller.snapshot import configmap_path, pod_path, workload_path
from vgpu_operator.controller.write_results import (
    WriteBackoff,
    WriteResult,
    Writes,
    Written,
)
from vgpu_operator.core.volcano.restarts import RestartSettings
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, meta
from vgpu_operator.core.volcano.writes import (
    ConfigMapWrite,
    Restart,
    WorkloadPatch,
    WritePlan,
    plan_writes,
)

log = logging.getLogger("vgpu_operator.volcano")


def path_of(write: ConfigMapWrite | WorkloadPatch | Restart) -> str:
    """The API path a planned write goes to."""
    if isinstance(write, ConfigMapWrite):
        return configmap_path(write.namespace, None if write.create else write.name)
    if write.kind == "Pod":
        return pod_path(write.namespace, write.name)
    return workload_path(write.kind, write.namespace, write.name)


async def _send(
    api: client.ApiClient,
    write: ConfigMapWrite | WorkloadPatch | Restart,
    body: Mapping[str, Any] | None,
    writes: Writes,
) -> dict[str, Any] | None:
    """One request; the object answered, or None when it was not written (backing off, gone,
    changed meanwhile, refused: each booked in `writes`)."""
    key = (write.kind, write.namespace, write.name)
    if not writes.ready(key):
        return None
    try:
        obj = await kubeapi.request(
            api,
            write.verb,
            path_of(write),
            body=dict(body) if body is not None else None,
            content_type=write.content_type,
        )
    except kubeapi.Conflict:
        writes.result.conflicts += 1
        return None
    except kubeapi.NotFound:
        if isinstance(write, ConfigMapWrite):
            log.warning("cannot write ConfigMap %s/%s: namespace not found", *key[1:])
        writes.gone(key)
        return None
    except kubeapi.ApiError as exc:
        writes.failed(key, exc)
        return None
    writes.succeeded(key)
    return obj if isinstance(obj, dict) else {}


async def _restart(api: client.ApiClient, r: Restart, writes: Writes) -> bool:
    if await _send(api, r, r.body, writes) is None:
        return False
    for name in r.pods:  # an OnDelete DaemonSet: its pods are replaced only when deleted
        pod = ("Pod", r.namespace, name)
        try:
            await kubeapi.request(api, "DELETE", pod_path(r.namespace, name))
        except kubeapi.NotFound:
            writes.gone(pod)
        except kubeapi.ApiError as exc:
            writes.failed(pod, exc)  # the rollout is recorded; the stale pod is found later
    writes.result.restarted.append(r)
    return True


async def execute(
    api: client.ApiClient,
    plan: WritePlan,
    now: datetime,
    backoff: WriteBackoff | None = None,
) -> WriteResult:
    """Send every write of `plan` due at `now`, in order: the ConfigMaps, the DaemonSet
    PATCHes, the restarts. Objects backing off in `backoff` (kept by the caller from pass to
    pass) are left for later."""
    result = WriteResult()
    writes = Writes(backoff, now, result)
    for cm in plan.configmaps:
        obj = await _send(api, cm, cm.body, writes)
        if obj is not None:
            uid = str(meta(obj).get("uid", ""))
            result.written.append(Written("ConfigMap", cm.namespace, cm.name, cm.what, uid))
    for w in plan.workloads:
        if w.due is not None and w.due > now:
            continue  # waits: plan.wake_at and plan.pending say so
        if await _send(api, w, w.body, writes) is not None:
            result.plugin_args_patched = result.plugin_args_patched or w.args
            result.rolled.append((w.kind, w.namespace, w.name))
            result.written.append(Written(w.kind, w.namespace, w.name, "; ".join(w.what), w.uid))
    for r in plan.restarts:
        if r.due is None or r.due <= now:
            await _restart(api, r, writes)
    return result


async def enforce_configuration(
    api: client.ApiClient,
    s: ClusterSnapshot,
    now: datetime,
    backoff: WriteBackoff | None = None,
    ledger: Mapping[str, datetime] | None = None,
    restarts: RestartSettings | None = None,
) -> tuple[WritePlan, WriteResult]:
    """A configuration pass's writes in enforce mode: the plan (computed in a thread: a large
    ConfigMap costs its round-trip YAML parse there, about 2 s for 80 KiB, while the event loop
    goes on with node writes), then sent. Nothing in report or observe mode."""
    if s.config.mode != "enforce":
        return WritePlan(after=s), WriteResult()
    plan = await asyncio.to_thread(plan_writes, s, now, ledger, restarts)
    for note in plan.notes:
        log.warning("%s", note)
    return plan, await execute(api, plan, now, backoff)

"""The configuration reconciler's writes to workloads, in `enforce` mode only: the plugin's args
(versions that take them) and the placement of HAMi's plugin DaemonSets (`core.volcano.placement`: a
nodeSelector on the node contract's `vgpu.volcano.sh/device-plugin` and tolerations for the
policies' taints), in one PATCH per DaemonSet, and the restarts the planner asks for.

A DaemonSet's PATCH restarts its pods: it waits until what the plugin reads has settled, a
placement change also for `core.volcano.restarts.rollout_due`, and it is recorded as a restart. The
same
PATCH records on the DaemonSet what the placement set (annotation `vgpu.volcano.sh/placement`,
`models.placement`): `vgpu-operator cleanup` takes off exactly that. Every PATCH carries the
resourceVersion it was computed from; refusals back off per object (`controller.write_results`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import pod_path, workload_path
from vgpu_operator.controller.write_results import (
    WriteBackoff,
    WriteResult,
    Writes,
    Written,
)
from vgpu_operator.core.nodes.status import change_stamp
from vgpu_operator.core.volcano.placement import Placement, placements
from vgpu_operator.core.volcano.plugin_identity import foreign_vgpu_plugin
from vgpu_operator.core.volcano.render import render_plugin_args
from vgpu_operator.core.volcano.restarts import (
    RESTARTED_AT,
    RestartAction,
    RestartSettings,
    daemonset_key,
    restart_inputs,
    restarted_at,
    rollout_due,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, known_after, meta, pod_done
from vgpu_operator.models.placement import PlacementRecord
from vgpu_operator.models.volcano_views import workload_view

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def _placement_what(p: Placement) -> str:
    parts = []
    if p.patch is not None and "nodeSelector" in p.patch["spec"]["template"]["spec"]:
        parts.append(f"nodeSelector {contract.LABEL_DEVICE_PLUGIN}={p.plugin}")
    for t in p.added_tolerations:
        value = f"={t['value']}" if t.get("value") else ""
        parts.append(f"toleration {t['key']}{value}:{t['effect']}")
    return "placement: " + ", ".join(parts)


@dataclass
class _DaemonSetPatch:
    raw: dict[str, Any]
    spec: dict[str, Any] = field(default_factory=dict)  # of the pod template
    what: list[str] = field(default_factory=list)
    args: bool = False
    due: datetime | None = None  # when it may go (None: now)
    record: PlacementRecord | None = None  # the placement record, with this PATCH's placement


async def patch_daemonsets(
    api: client.ApiClient,
    s: ClusterSnapshot,
    writes: Writes,
    ledger: Mapping[str, datetime],
    restarts: RestartSettings,
    now: datetime,
) -> None:
    """One PATCH per plugin DaemonSet: its args (vGPU plugin ≤ v1.11) and its placement. Both
    change the pod template, so its pods restart: the PATCH waits until what the plugin reads
    has settled (`_inputs_settled`), and a placement change also for the restart limits
    (`rollout_due`; when restarts are not allowed it is left to the rule that reports it)."""
    result = writes.result
    settled = _inputs_settled(s, result, restarts, now)
    patches: dict[tuple[str, str], _DaemonSetPatch] = {}
    ref = s.config.device_plugin
    foreign = foreign_vgpu_plugin(s)  # not HAMi's plugin: not patched (rule plugin-not-hami)
    ds = s.daemonset(ref.namespace, ref.name) if foreign is None else None
    args = render_plugin_args(ds, s.config) if ds is not None else None
    if ds is not None and args is not None:
        patches[(ref.namespace, ref.name)] = _DaemonSetPatch(
            ds,
            {"containers": [{"name": args.container, "args": args.args}]},
            ["args " + " ".join(args.args)],
            args=True,
            due=settled,
        )
    for p in placements(s):
        raw = s.daemonset(p.namespace, p.name)
        if p.patch is None or p.excluded or raw is None or p.adopted:
            continue  # (adopted: already runs exactly there, core.volcano.config_adoption)
        if p.plugin == "hami" and (p.namespace, p.name) == foreign:
            continue
        key = daemonset_key(p.namespace, p.name)
        due = rollout_due(ledger, key, restarted_at(raw), restarts, now)
        if due is None:
            continue  # restarts are not allowed: the rule reports the patch
        patch = patches.setdefault((p.namespace, p.name), _DaemonSetPatch(raw))
        placed = p.patch["spec"]["template"]["spec"]
        patch.spec.update(placed)
        patch.what.append(_placement_what(p))
        # what this placement sets, recorded on the DaemonSet for `cleanup` to take off exactly
        patch.record = PlacementRecord.of(raw).adding(
            placed.get("nodeSelector") or {}, p.added_tolerations
        )
        patch.due = max(due, settled, patch.due or now)
    for (namespace, name), patch in patches.items():
        if patch.due is not None and patch.due > now:
            if result.rollout_wait is None or patch.due < result.rollout_wait:
                result.rollout_wait = patch.due
            result.pending.add((namespace, name))
            continue
        body: dict[str, Any] = {"spec": {"template": {"spec": patch.spec}}}
        if patch.record is not None:
            record = {contract.ANN_PLACEMENT: patch.record.to_annotation()}
            body["metadata"] = {"annotations": record}
        if await _patch_daemonset(api, patch.raw, body, writes):
            result.plugin_args_patched = result.plugin_args_patched or patch.args
            result.rolled.append(("DaemonSet", namespace, name))
            uid = str(meta(patch.raw).get("uid", ""))
            result.written.append(Written("DaemonSet", namespace, name, "; ".join(patch.what), uid))


def _inputs_settled(
    s: ClusterSnapshot, result: WriteResult, restarts: RestartSettings, now: datetime
) -> datetime:
    """When the plugin pods a rollout starts now are sure to read the current configuration: a
    `settle` after the last change of what the plugin reads (this pass's ConfigMap writes
    included), and never in the second of that change (pod start times are whole seconds:
    `core.volcano.restarts`). The placement rollout waits for it, as the planner's restarts do."""
    inputs = restart_inputs(s)
    changed = [t for t in (inputs.plugin_reads_changed, *inputs.node_entries_changed.values()) if t]
    scheduler_conf = s.config.scheduler.config_map.ref()
    if any(
        w.kind == "ConfigMap" and (w.namespace, w.name) != scheduler_conf for w in result.written
    ):
        changed.append(now)  # a ConfigMap a plugin reads (the scheduler conf is not one)
    return max(now, known_after(max(changed)) + restarts.settle) if changed else now


async def _patch_daemonset(
    api: client.ApiClient, ds: Mapping[str, Any], body: dict[str, Any], writes: Writes
) -> bool:
    """A strategic merge PATCH carrying the resourceVersion it was computed from."""
    result = writes.result
    namespace, name = str(meta(ds).get("namespace")), str(meta(ds).get("name"))
    key = ("DaemonSet", namespace, name)
    if not writes.ready(key):
        return False
    metadata = {**(body.get("metadata") or {}), "resourceVersion": meta(ds).get("resourceVersion")}
    body = {**body, "metadata": metadata}
    try:
        await kubeapi.request(
            api,
            "PATCH",
            workload_path("DaemonSet", namespace, name),
            body=body,
            content_type=STRATEGIC_MERGE_PATCH,
        )
    except kubeapi.Conflict:
        result.conflicts += 1
        return False
    except kubeapi.NotFound:
        writes.gone(key)
        return False
    except kubeapi.ApiError as exc:
        writes.failed(key, exc)
        return False
    writes.succeeded(key)
    return True


# --- restarts ------------------------------------------------------------------------------


def on_delete_pods(s: ClusterSnapshot, action: RestartAction) -> list[str]:
    """The live pods of a DaemonSet with `updateStrategy: OnDelete` (a template change does not
    replace them: they have to be deleted); empty for any other workload."""
    if action.kind != "rollout-daemonset":
        return []
    raw = s.daemonset(action.namespace, action.name)
    strategy = (((raw or {}).get("spec") or {}).get("updateStrategy") or {}).get("type")
    if raw is None or strategy != "OnDelete":
        return []
    view = workload_view(raw)
    return [str(meta(p).get("name")) for p in s.pods_of(view) if not pod_done(p)]


async def restart(
    api: client.ApiClient,
    action: RestartAction,
    now: datetime,
    s: ClusterSnapshot,
    backoff: WriteBackoff | None = None,
    result: WriteResult | None = None,
) -> bool:
    """Carry out one restart: a rollout restart (the pod template's restartedAt, as kubectl
    does; for an OnDelete DaemonSet its pods are deleted too) or the deletion of one plugin pod
    (its DaemonSet recreates it). False: it is gone, or refused (the object then backs off in
    `backoff`, and the refusal is added to `result`), or still backing off."""
    writes = Writes(backoff, now, result if result is not None else WriteResult())
    if s.config.mode != "enforce":
        return False  # report, observe: no restart (controller.observe reports it)
    kind = {"delete-pod": "Pod", "rollout-deployment": "Deployment"}.get(action.kind, "DaemonSet")
    key = (kind, action.namespace, action.name)
    if not writes.ready(key):
        return False
    try:
        if action.kind == "delete-pod":
            await kubeapi.request(api, "DELETE", pod_path(action.namespace, action.name))
        else:
            restarted = {RESTARTED_AT: change_stamp(now)}
            body = {"spec": {"template": {"metadata": {"annotations": restarted}}}}
            await kubeapi.request(
                api,
                "PATCH",
                workload_path(kind, action.namespace, action.name),
                body=body,
                content_type=kubeapi.MERGE_PATCH,
            )
    except kubeapi.NotFound:
        writes.gone(key)
        return False
    except kubeapi.Conflict:
        return False  # planned again by the next pass
    except kubeapi.ApiError as exc:
        writes.failed(key, exc)
        return False
    writes.succeeded(key)
    for name in on_delete_pods(s, action):
        pod = ("Pod", action.namespace, name)
        try:
            await kubeapi.request(api, "DELETE", pod_path(action.namespace, name))
        except kubeapi.NotFound:
            writes.gone(pod)
        except kubeapi.ApiError as exc:
            writes.failed(pod, exc)  # the rollout is recorded; the stale pod is found later
    return True

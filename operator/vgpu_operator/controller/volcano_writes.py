"""The writes of the configuration reconciler, in `enforce` mode only: the ConfigMaps it renders,
the scheduler's deviceshare arguments, the plugin's args (versions that take them), the placement
of HAMi's plugin DaemonSets (`core.rules.placement`: a nodeSelector on the node contract's
`vgpu.volcano.sh/device-plugin` and tolerations for the policies' taints), and the restarts the
planner asks for. A DaemonSet's args and placement go in one PATCH, which restarts its pods: it
waits until what the plugin reads has settled, a placement change also for
`core.restarts.rollout_due`, and it is recorded as a restart. The same PATCH records on the
DaemonSet what the placement set (annotation `vgpu.volcano.sh/placement`, `models.placement`):
`vgpu-operator cleanup` takes off exactly that.

Every write carries the resourceVersion it was computed from: a 409 means someone edited the
object meanwhile, and the next pass renders from the newer version. Nothing is written when a
renderer says unchanged; a renderer that cannot read the current object (RenderError) writes
nothing (the rules report it).

A write refused otherwise (422 from validation or an admission policy, 403, 429, 5xx, a timeout)
does not fail the pass: the object backs off (`core.backoff`, per object, exponential, never
before the apiserver's Retry-After), the other writes and the rules go on, and no pass writes that
object again before its backoff allows; `retry_at` says when the reconciler should wake for it.
The backoff's clock is the reconciler's `now` (seconds since the epoch).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.node_writes import failure_message
from vgpu_operator.controller.snapshot import configmap_path, pod_path, workload_path
from vgpu_operator.core.backoff import Backoff
from vgpu_operator.core.render import (
    Rendered,
    RenderError,
    render_ascend_node_config,
    render_device_config,
    render_node_config,
    render_plugin_args,
    render_scheduler_conf,
    vnpus_section,
)
from vgpu_operator.core.restarts import (
    RESTARTED_AT,
    RestartAction,
    RestartSettings,
    daemonset_key,
    restart_inputs,
    restarted_at,
    rollout_due,
)
from vgpu_operator.core.rules import ClusterSnapshot
from vgpu_operator.core.rules.placement import Placement, placements
from vgpu_operator.core.rules.plugin_identity import foreign_vgpu_plugin
from vgpu_operator.core.rules.snapshot import (
    annotations_of,
    known_after,
    meta,
    pod_done,
)
from vgpu_operator.core.status import change_stamp
from vgpu_operator.models.config_refs import ConfigMapRef
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.placement import PlacementRecord
from vgpu_operator.models.volcano_views import workload_view

log = logging.getLogger("vgpu_operator.volcano")

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MANAGED_BY = {"app.kubernetes.io/managed-by": "vgpu-operator"}

ObjectKey = tuple[str, str, str]  # (kind, namespace, name)
WriteBackoff = Backoff[ObjectKey]


def write_backoff() -> WriteBackoff:
    """A refused write: again after about 2 s (a configuration pass's spacing), then twice as
    long each time, at most 5 minutes (+ up to 20% jitter), never before a Retry-After."""
    return Backoff(initial=2.0, cap=300.0, factor=2.0, jitter=0.2)


def retry_at(backoff: WriteBackoff) -> datetime | None:
    """When the earliest object backing off may be written again (None: none is)."""
    due = backoff.due()
    return None if due is None else datetime.fromtimestamp(due, UTC)


@dataclass(frozen=True)
class Written:
    """One write the reconciler made (for Events, logs and tests)."""

    kind: str
    namespace: str
    name: str
    what: str
    uid: str = ""


@dataclass(frozen=True)
class Refused:
    """A write the apiserver refused (anything but 404/409); the object backs off."""

    kind: str
    namespace: str
    name: str
    message: str  # the HTTP status and the apiserver's message
    next_at: datetime


@dataclass
class WriteResult:
    written: list[Written] = field(default_factory=list)
    conflicts: int = 0  # objects that changed under us: render again next pass
    plugin_args_patched: bool = False
    rolled: list[ObjectKey] = field(default_factory=list)  # DaemonSets whose pods now restart
    rollout_wait: datetime | None = None  # a placement patch waits for the restart limits
    # DaemonSets whose pod template change waits: it restarts their pods when it goes, so no
    # other restart of them is planned meanwhile
    pending: set[tuple[str, str]] = field(default_factory=set)
    refused: list[Refused] = field(default_factory=list)
    deferred: list[ObjectKey] = field(default_factory=list)  # backing off: not attempted


class _Writes:
    """The backoff of one pass's writes: may this object be written now, and the bookkeeping of
    each outcome."""

    def __init__(self, backoff: WriteBackoff | None, now: datetime, result: WriteResult) -> None:
        self.backoff = backoff if backoff is not None else write_backoff()
        self.now = now.timestamp()
        self.result = result

    def ready(self, key: ObjectKey) -> bool:
        if self.backoff.ready(key, self.now):
            return True
        self.result.deferred.append(key)
        return False

    def succeeded(self, key: ObjectKey) -> None:
        if self.backoff.succeeded(key):
            log.info("%s %s/%s: written again after failed attempts", *key)

    def gone(self, key: ObjectKey) -> None:
        self.backoff.forget(key)

    def failed(self, key: ObjectKey, exc: kubeapi.ApiError) -> None:
        retry_after = (
            exc.retry_after
            if isinstance(exc, kubeapi.TooManyRequests | kubeapi.ServerError)
            else None
        )
        message = failure_message(exc)
        at = self.backoff.failed(key, self.now, retry_after=retry_after, message=message)
        failure = self.backoff.get(key)
        attempts = failure.attempts if failure is not None else 1
        log.warning(
            "%s %s/%s: write refused (%s); next attempt in %.1fs (%d failures in a row)",
            *key,
            message,
            at - self.now,
            attempts,
        )
        self.result.refused.append(Refused(*key, message, datetime.fromtimestamp(at, UTC)))


def installed(s: ClusterSnapshot) -> bool:
    """Volcano or the HAMi plugin is there: otherwise nobody reads what the operator renders,
    and it creates nothing."""
    return s.scheduler_cm is not None or s.plugin is not None or s.ascend_plugin is not None


def released_configs(s: ClusterSnapshot) -> dict[str, NodeConfig | None]:
    """{node: released configuration} of every node the operator manages."""
    out: dict[str, NodeConfig | None] = {}
    for node in s.nodes:
        if contract.ANN_CONFIG in annotations_of(node):
            out[str(meta(node).get("name"))] = s.released(node)
    return out


async def _write_configmap(
    api: client.ApiClient,
    ref: ConfigMapRef,
    cm: Mapping[str, Any] | None,
    rendered: Rendered,
    what: str,
    writes: _Writes,
) -> None:
    result = writes.result
    key = ("ConfigMap", ref.namespace, ref.name)
    if not writes.ready(key):
        return
    try:
        if cm is None:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": ref.name,
                    "namespace": ref.namespace,
                    "labels": dict(MANAGED_BY),
                    "annotations": dict(rendered.annotations),
                },
                "data": dict(rendered.data),
            }
            obj = await kubeapi.request(api, "POST", configmap_path(ref.namespace), body=body)
        else:
            patch = {
                "metadata": {
                    "resourceVersion": meta(cm).get("resourceVersion"),
                    "annotations": dict(rendered.annotations),
                },
                "data": dict(rendered.data),
            }
            obj = await kubeapi.request(
                api,
                "PATCH",
                configmap_path(ref.namespace, ref.name),
                body=patch,
                content_type=kubeapi.MERGE_PATCH,
            )
    except kubeapi.Conflict:
        result.conflicts += 1
        return
    except kubeapi.NotFound:
        log.warning("cannot write ConfigMap %s/%s: namespace not found", ref.namespace, ref.name)
        writes.gone(key)
        return
    except kubeapi.ApiError as exc:
        writes.failed(key, exc)
        return
    writes.succeeded(key)
    uid = str(meta(obj).get("uid", ""))
    result.written.append(Written("ConfigMap", ref.namespace, ref.name, what, uid))


def _render(label: str, render: Any, *args: Any, **kwargs: Any) -> Rendered | None:
    """The rendered ConfigMap when it changed; None (nothing written) when it did not, or when
    the renderer could not read the current one: the `payload-readable` and `*-rendered`
    rules report that with the object and the key. Nothing a ConfigMap holds may fail a pass."""
    try:
        rendered: Rendered = render(*args, **kwargs)
    except RenderError as exc:
        log.warning("not rendering %s: %r", label, str(exc))
        return None
    except Exception as exc:  # a renderer's bug must not stop the other writes and the rules
        log.error("not rendering %s: %s: %r", label, type(exc).__name__, str(exc))
        return None
    return rendered if rendered.changed else None


async def _render_off_loop(label: str, render: Any, *args: Any, **kwargs: Any) -> Rendered | None:
    """`_render` in a thread: a large ConfigMap costs its round-trip YAML parse (ruamel, pure
    Python: about 2 s for 80 KiB) there, while the event loop goes on with node writes."""
    return await asyncio.to_thread(partial(_render, label, render, *args, **kwargs))


async def enforce_configuration(
    api: client.ApiClient,
    s: ClusterSnapshot,
    now: datetime,
    backoff: WriteBackoff | None = None,
    ledger: Mapping[str, datetime] | None = None,
    restarts: RestartSettings | None = None,
) -> WriteResult:
    """Write what the operator owns where it differs from what it renders; objects backing off
    in `backoff` (kept by the caller from pass to pass) are left for later. `ledger` and
    `restarts`: the restarts so far and their limits, which a placement patch waits for (None:
    no limit)."""
    result = WriteResult()
    writes = _Writes(backoff, now, result)
    if not installed(s) or s.config.mode != "enforce":  # report, observe: nothing written
        return result
    cfg = s.config
    stamp = change_stamp(now)
    released = released_configs(s)

    ref = cfg.device_config
    cm = s.configmap(*ref.ref())
    src = cfg.ascend_vnpu.scheduler_device
    vnpus = vnpus_section(s.configmap(*src.ref()), src.key) if cfg.ascend_vnpu.enabled else None
    rendered = await _render_off_loop(
        ref.name,
        render_device_config,
        cm,
        cfg,
        stamp,
        mig_models=s.mig_gpu_names,
        reported=s.reported_models,
        vnpus=vnpus,
    )
    if rendered is not None:
        await _write_configmap(api, ref, cm, rendered, "device config", writes)

    for ref, render in (
        (cfg.node_config, partial(render_node_config, gpus=s.gpus_by_node)),
        (
            cfg.ascend_node_config,
            partial(render_ascend_node_config, hami_vnpu_core=s.hami_vnpu_core),
        ),
    ):
        cm = s.configmap(*ref.ref())
        rendered = await _render_off_loop(ref.name, render, cm, released, cfg, stamp)
        if rendered is not None:
            entries = ", ".join(sorted(rendered.changed_entries)) or "ownership"
            await _write_configmap(api, ref, cm, rendered, f"entries {entries}", writes)

    ref = cfg.scheduler.config_map
    cm = s.scheduler_cm
    if cm is not None:
        rendered = await _render_off_loop(ref.name, render_scheduler_conf, cm, cfg, stamp)
        if rendered is not None:
            await _write_configmap(api, ref, cm, rendered, "deviceshare arguments", writes)

    await _patch_daemonsets(api, s, writes, ledger or {}, restarts or RestartSettings(), now)
    return result


def _daemonset(s: ClusterSnapshot, namespace: str, name: str) -> dict[str, Any] | None:
    return next(
        (
            d
            for d in s.daemonsets
            if meta(d).get("namespace") == namespace and meta(d).get("name") == name
        ),
        None,
    )


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


async def _patch_daemonsets(
    api: client.ApiClient,
    s: ClusterSnapshot,
    writes: _Writes,
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
    ds = _daemonset(s, ref.namespace, ref.name) if foreign is None else None
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
        raw = _daemonset(s, p.namespace, p.name)
        if p.patch is None or p.excluded or raw is None or p.adopted:
            continue  # (adopted: already runs exactly there, core.adoption_config)
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
    `core.restarts`). The placement rollout waits for it, as the planner's restarts do."""
    inputs = restart_inputs(s)
    changed = [t for t in (inputs.plugin_reads_changed, *inputs.node_entries_changed.values()) if t]
    scheduler_conf = s.config.scheduler.config_map.ref()
    if any(
        w.kind == "ConfigMap" and (w.namespace, w.name) != scheduler_conf for w in result.written
    ):
        changed.append(now)  # a ConfigMap a plugin reads (the scheduler conf is not one)
    return max(now, known_after(max(changed)) + restarts.settle) if changed else now


async def _patch_daemonset(
    api: client.ApiClient, ds: Mapping[str, Any], body: dict[str, Any], writes: _Writes
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
    raw = next(
        (
            d
            for d in s.daemonsets
            if meta(d).get("namespace") == action.namespace and meta(d).get("name") == action.name
        ),
        None,
    )
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
    writes = _Writes(backoff, now, result if result is not None else WriteResult())
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

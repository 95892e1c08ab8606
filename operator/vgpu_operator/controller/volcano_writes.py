"""The writes of the configuration reconciler, in `enforce` mode only: the ConfigMaps it renders,
the scheduler's deviceshare arguments, the plugin's args (versions that take them), and the
restarts the planner asks for.

Every write carries the resourceVersion it was computed from: a 409 means someone edited the
object meanwhile, and the next pass renders from the newer version. Nothing is written when a
renderer says unchanged; a renderer that cannot read the current object (RenderError) writes
nothing (the rules report it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path, pod_path, workload_path
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
    PluginPod,
    RestartAction,
    RestartInputs,
    Workload,
)
from vgpu_operator.core.rules import ClusterSnapshot
from vgpu_operator.core.rules.snapshot import (
    annotations_of,
    data_changed_at,
    meta,
    parse_time,
    pod_done,
    pod_started,
)
from vgpu_operator.core.status import change_stamp
from vgpu_operator.models.config import ConfigMapRef
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.volcano_views import WorkloadView, workload_view

log = logging.getLogger("vgpu_operator.volcano")

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MANAGED_BY = {"app.kubernetes.io/managed-by": "vgpu-operator"}


@dataclass(frozen=True)
class Written:
    """One write the reconciler made (for Events, logs and tests)."""

    kind: str
    namespace: str
    name: str
    what: str
    uid: str = ""


@dataclass
class WriteResult:
    written: list[Written] = field(default_factory=list)
    conflicts: int = 0  # objects that changed under us: render again next pass
    plugin_args_patched: bool = False


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
    result: WriteResult,
) -> None:
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
        return
    uid = str(meta(obj).get("uid", ""))
    result.written.append(Written("ConfigMap", ref.namespace, ref.name, what, uid))


def _render(label: str, render: Any, *args: Any, **kwargs: Any) -> Rendered | None:
    try:
        rendered: Rendered = render(*args, **kwargs)
    except RenderError as exc:
        log.warning("not rendering %s: %s", label, exc)
        return None
    return rendered if rendered.changed else None


async def enforce_configuration(
    api: client.ApiClient, s: ClusterSnapshot, now: datetime
) -> WriteResult:
    """Write what the operator owns where it differs from what it renders."""
    result = WriteResult()
    if not installed(s):
        return result
    cfg = s.config
    stamp = change_stamp(now)
    released = released_configs(s)

    ref = cfg.device_config
    cm = s.configmap(*ref.ref())
    src = cfg.ascend_vnpu.scheduler_device
    vnpus = vnpus_section(s.configmap(*src.ref()), src.key) if cfg.ascend_vnpu.enabled else None
    rendered = _render(
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
        await _write_configmap(api, ref, cm, rendered, "device config", result)

    for ref, render in (
        (cfg.node_config, render_node_config),
        (cfg.ascend_node_config, render_ascend_node_config),
    ):
        cm = s.configmap(*ref.ref())
        rendered = _render(ref.name, render, cm, released, cfg, stamp)
        if rendered is not None:
            entries = ", ".join(sorted(rendered.changed_entries)) or "ownership"
            await _write_configmap(api, ref, cm, rendered, f"entries {entries}", result)

    ref = cfg.scheduler.config_map
    cm = s.scheduler_cm
    if cm is not None:
        rendered = _render(ref.name, render_scheduler_conf, cm, cfg, stamp)
        if rendered is not None:
            await _write_configmap(api, ref, cm, rendered, "deviceshare arguments", result)

    await _patch_plugin_args(api, s, result)
    return result


async def _patch_plugin_args(
    api: client.ApiClient, s: ClusterSnapshot, result: WriteResult
) -> None:
    ref = s.config.device_plugin
    ds = next(
        (
            d
            for d in s.daemonsets
            if meta(d).get("namespace") == ref.namespace and meta(d).get("name") == ref.name
        ),
        None,
    )
    if ds is None:
        return
    patch = render_plugin_args(ds, s.config)
    if patch is None:
        return
    body = {
        "metadata": {"resourceVersion": meta(ds).get("resourceVersion")},
        "spec": {
            "template": {"spec": {"containers": [{"name": patch.container, "args": patch.args}]}}
        },
    }
    try:
        await kubeapi.request(
            api,
            "PATCH",
            workload_path("DaemonSet", ref.namespace, ref.name),
            body=body,
            content_type=STRATEGIC_MERGE_PATCH,
        )
    except kubeapi.Conflict:
        result.conflicts += 1
        return
    except kubeapi.NotFound:
        return
    result.plugin_args_patched = True
    what = "args " + " ".join(patch.args)
    result.written.append(
        Written("DaemonSet", ref.namespace, ref.name, what, str(meta(ds).get("uid", "")))
    )


# --- restarts ------------------------------------------------------------------------------


def _restarted_at(obj: Mapping[str, Any] | None) -> datetime | None:
    template = ((obj or {}).get("spec") or {}).get("template") or {}
    return parse_time(((template.get("metadata") or {}).get("annotations") or {}).get(RESTARTED_AT))


def _raw(items: list[dict[str, Any]], view: WorkloadView | None) -> dict[str, Any] | None:
    if view is None:
        return None
    return next(
        (
            o
            for o in items
            if meta(o).get("namespace") == view.namespace and meta(o).get("name") == view.name
        ),
        None,
    )


def _live_starts(s: ClusterSnapshot, view: WorkloadView) -> tuple[datetime, ...]:
    starts = [pod_started(p) for p in s.pods_of(view) if not pod_done(p)]
    return tuple(t for t in starts if t is not None)


def restart_inputs(s: ClusterSnapshot) -> RestartInputs:
    """What the planner needs, read off the snapshot."""
    sched_cm = s.scheduler_device_config.cm
    conf_stamp = parse_time(annotations_of(s.scheduler_cm or {}).get(contract.ANN_DATA_CHANGED_AT))
    sched_changed = [t for t in (data_changed_at(sched_cm) if sched_cm else None, conf_stamp) if t]
    plugin_cm = s.plugin_device_config.cm
    entries = {
        node: t for node, raw in s.owned_node_entries.items() if (t := parse_time(raw)) is not None
    }
    scheduler = plugin = None
    pods: list[PluginPod] = []
    if s.scheduler is not None:
        v = s.scheduler
        raw = _raw(s.deployments, v)
        scheduler = Workload(v.namespace, v.name, _restarted_at(raw), _live_starts(s, v))
    if s.plugin is not None:
        v = s.plugin
        raw = _raw(s.daemonsets, v)
        plugin = Workload(v.namespace, v.name, _restarted_at(raw), _live_starts(s, v))
        for p in s.pods_of(v):
            started, node = pod_started(p), (p.get("spec") or {}).get("nodeName")
            if started is not None and node and not pod_done(p):
                pods.append(PluginPod(v.namespace, str(meta(p).get("name")), str(node), started))
    return RestartInputs(
        scheduler_reads_changed=max(sched_changed) if sched_changed else None,
        plugin_reads_changed=data_changed_at(plugin_cm) if plugin_cm else None,
        node_entries_changed=entries,
        scheduler=scheduler,
        plugin=plugin,
        plugin_pods=tuple(pods),
    )


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
    api: client.ApiClient, action: RestartAction, now: datetime, s: ClusterSnapshot
) -> bool:
    """Carry out one restart: a rollout restart (the pod template's restartedAt, as kubectl
    does; for an OnDelete DaemonSet its pods are deleted too) or the deletion of one plugin pod
    (its DaemonSet recreates it). False: it is gone."""
    try:
        if action.kind == "delete-pod":
            await kubeapi.request(api, "DELETE", pod_path(action.namespace, action.name))
            return True
        kind = "Deployment" if action.kind == "rollout-deployment" else "DaemonSet"
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
        return False
    for name in on_delete_pods(s, action):
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(api, "DELETE", pod_path(action.namespace, name))
    return True

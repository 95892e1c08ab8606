"""The configuration reconciler's ConfigMap writes, in `enforce` mode only: the device config, the
node configs (vGPU and Ascend) and the scheduler's deviceshare arguments as the core renders them,
then the plugin DaemonSets' PATCHes (`controller.workload_writes`).

Every write carries the resourceVersion it was computed from: a 409 means someone edited the
object meanwhile, and the next pass renders from the newer version. Nothing is written when a
renderer says unchanged; a renderer that cannot read the current object (RenderError) writes
nothing (the rules report it). A write refused otherwise backs off per object
(`controller.write_results`) and does not fail the pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path
from vgpu_operator.controller.workload_writes import patch_daemonsets
from vgpu_operator.controller.write_results import (
    WriteBackoff,
    WriteResult,
    Writes,
    Written,
)
from vgpu_operator.core.nodes.status import change_stamp
from vgpu_operator.core.volcano.render import (
    Rendered,
    RenderError,
    render_ascend_node_config,
    render_device_config,
    render_node_config,
    render_scheduler_conf,
    vnpus_section,
)
from vgpu_operator.core.volcano.restarts import RestartSettings
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, annotations_of, meta
from vgpu_operator.models.config_refs import ConfigMapRef
from vgpu_operator.models.node import NodeConfig

log = logging.getLogger("vgpu_operator.volcano")

MANAGED_BY = {"app.kubernetes.io/managed-by": "vgpu-operator"}


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
    writes: Writes,
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
    writes = Writes(backoff, now, result)
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

    await patch_daemonsets(api, s, writes, ledger or {}, restarts or RestartSettings(), now)
    return result

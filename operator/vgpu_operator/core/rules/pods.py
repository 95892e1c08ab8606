"""Rules on pods: components that must re-read their config (both read the device config once per
process: volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/config.go `sync.Once`,
Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:cmd/vgpu/main.go) and vGPU pods bound without device
annotations, which kubelet rejects with UnexpectedAdmissionError (the plugin's `Allocate` cannot
find them: Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/plugin/server.go `GetPendingPod`)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from vgpu_operator.core.rules.base import Issue, ObjectRef, error, rule, warning
from vgpu_operator.core.rules.plugin import plugin_names
from vgpu_operator.core.volcano.snapshot import (
    ClusterSnapshot,
    Obj,
    annotations_of,
    meta,
    name_of,
    pod_done,
    requested,
)
from vgpu_operator.core.volcano.times import (
    data_changed_at,
    parse_time,
    pod_started,
    started_before,
)
from vgpu_operator.models.volcano import POD_VGPU_IDS

UAE = "UnexpectedAdmissionError"


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _stale(pods: list[Obj], since: datetime) -> list[Obj]:
    out = []
    for pod in pods:
        started = pod_started(pod)
        if not pod_done(pod) and started is not None and started_before(started, since):
            out.append(pod)
    return out


@rule("restart-needed", "scheduler and plugin pods started after the config they read once")
def check_restarts(s: ClusterSnapshot) -> Iterator[Issue]:
    fixable = s.config.restarts.allowed
    sched, src = s.scheduler, s.scheduler_device_config
    since = data_changed_at(src.cm) if src.cm else None
    if sched is not None and since is not None:
        stale = _stale(s.pods_of(sched), since)
        if stale:
            yield warning(
                (
                    ObjectRef(kind="Deployment", name=sched.name, namespace=sched.namespace),
                    *(ObjectRef.of("Pod", p) for p in stale),
                ),
                f"{len(stale)} scheduler pod(s) started before {src.namespace}/{src.name} "
                f"changed at {_stamp(since)}; the scheduler reads it once per process and still "
                "works with the old content",
                fix=f"kubectl -n {sched.namespace} rollout restart deployment/{sched.name} (then "
                "look for stranded-pods: pending vGPU pods can be bound without devices right "
                "after a restart)",
                fixable=fixable,
            )
    plugin = s.plugin
    if plugin is None:
        return
    psrc = s.plugin_device_config
    device_since = data_changed_at(psrc.cm) if psrc.cm else None
    node_cm_since = data_changed_at(s.node_config_cm) if s.node_config_cm else None
    with_entry = set(s.node_config.names())
    for pod in s.pods_of(plugin):
        started = pod_started(pod)
        if started is None or pod_done(pod):
            continue
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        reasons = []
        if device_since is not None and started_before(started, device_since):
            reasons.append(f"{psrc.namespace}/{psrc.name} changed at {_stamp(device_since)}")
        owned_time = parse_time(s.owned_node_entries.get(node))
        entry_since = owned_time or (node_cm_since if node in with_entry else None)
        if entry_since is not None and started_before(started, entry_since):
            what = "its node-config entry" if owned_time else "the node-config ConfigMap"
            reasons.append(f"{what} changed at {_stamp(entry_since)}")
        if reasons:
            yield warning(
                (
                    ObjectRef(kind="DaemonSet", name=plugin.name, namespace=plugin.namespace),
                    ObjectRef.of("Pod", pod),
                    ObjectRef(kind="Node", name=node),
                ),
                f"device plugin pod {name_of(pod)} on {node} started at {_stamp(started)}, "
                f"before {' and '.join(reasons)}; it reads its configuration only at start",
                fix=f"kubectl -n {plugin.namespace} delete pod {name_of(pod)} (the DaemonSet "
                "recreates it)",
                fixable=fixable,
            )


def _scheduler_name(s: ClusterSnapshot) -> str:
    c = s.scheduler_container
    flag = c.flags.get("scheduler-name") if c else None
    return flag.value if flag is not None and flag.value else "volcano"


@rule("stranded-pods", "no vGPU pod is bound without device annotations")
def check_stranded(s: ClusterSnapshot) -> Iterator[Issue]:
    sched_count = s.scheduler_nvidia.resource_count_name or ""
    names = {sched_count, s.config.resource_names.count}
    pnames = plugin_names(s)
    if pnames is not None:
        names.add(pnames.count)
    names.discard("")
    volcano = _scheduler_name(s)
    src = s.scheduler_device_config
    source = f"{src.namespace}/{src.name}" if src.parsed else "its built-in default"
    conf = s.scheduler_conf
    conf_problem = ""
    if conf is not None and not conf.deviceshare.vgpu_enable:
        conf_problem = "deviceshare.VGPUEnable is off (see scheduler-vgpu-enabled)"
    elif conf is not None and conf.plugin("predicates") is None:
        conf_problem = "the scheduler conf has no predicates plugin (see scheduler-predicates)"
    for pod in s.pods:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or pod_done(pod):
            continue
        hits = sorted(set(requested(pod)) & names)
        if not hits or POD_VGPU_IDS in annotations_of(pod):
            continue
        status = pod.get("status") or {}
        rejected = status.get("reason") == UAE
        scheduled_by = spec.get("schedulerName") or "default-scheduler"
        if scheduled_by != volcano:
            cause = (
                f"it was scheduled by {scheduled_by}, not {volcano}: nothing wrote its device "
                "annotations"
            )
            fix = f"set schedulerName: {volcano} and recreate the pod"
        elif sched_count not in hits:
            cause = (
                f"it requests {', '.join(hits)}, but the scheduler counts vGPU pods by "
                f"{sched_count or '(no name)'} ({source}), so deviceshare never treated it as a "
                "vGPU pod"
            )
            fix = (
                "make the resource names agree (see plugin-resource-name-flags and "
                "device-config-location), then recreate the pod"
            )
        elif conf_problem:
            cause = f"the scheduler bound it without allocating devices: {conf_problem}"
            fix = "fix the scheduler conf first, then delete the pod so its owner recreates it"
        else:
            cause = (
                "the scheduler bound it without allocating devices: this happens to vGPU pods "
                "that were pending while vc-scheduler restarted"
            )
            fix = "delete the pod so its owner recreates it; it is then scheduled with devices"
        outcome = (
            f"kubelet rejected it with {UAE}"
            if rejected
            else f"kubelet will reject it with {UAE} (the plugin finds no devices for it)"
        )
        yield error(
            (ObjectRef.of("Pod", pod), ObjectRef(kind="Node", name=str(node))),
            f"pod {meta(pod).get('namespace')}/{name_of(pod)} is bound to {node} without "
            f"{POD_VGPU_IDS}; {outcome}. Cause: {cause}",
            fix=fix,
        )

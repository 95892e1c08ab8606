"""Which pods the controller keeps, and how a workload's pods are asked for.

The controller indexes only the pods that hold GPU resources (`holds_gpu`): the API cannot
select pods by what they request, so every pod passes through the watch and this predicate
decides, before anything is kept. The index keeps every pod holding a ResourceClaim: which
driver allocated it is decided when the pods are read (the drain, `plan`), against the claims
as they are then, never against a claim watch that may lag the pod watch. `compact_pod` keeps
of a pod only what the rules, the fit checks (`core.volcano.unschedulable`) and the drain read;
`gpu_pod_of` is such a pod as the drain sees it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from vgpu_operator.core.nodes.textcache import shared
from vgpu_operator.core.rollout.arrive import GpuPod
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import NvidiaDevicePluginMatch, OperatorConfig
from vgpu_operator.models.gpu_resources import (
    DEFAULT_DRA_DRIVERS,
    ClaimDrivers,
    gpu_backed,
    gpu_consumer,
)
from vgpu_operator.models.nvidia_plugin_config import PluginConfigNames, configmap_names
from vgpu_operator.models.volcano import HARDCODED_ALLOCATABLE, LEGACY_GPU_MEMORY, LEGACY_GPU_NUMBER
from vgpu_operator.models.volcano_views import WorkloadView

Obj = dict[str, Any]

NVIDIA_GPU = "nvidia.com/gpu"
# What the pod index selects on: pods that finished hold nothing (a pod that finishes leaves
# the selection, and the watch delivers it as DELETED).
RUNNING_OR_PENDING = "status.phase!=Succeeded,status.phase!=Failed"

_META_KEYS = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "creationTimestamp",
    "deletionTimestamp",
    "ownerReferences",
)
_CONTAINER_KEYS = ("name", "image", "resources", "command", "args")


@dataclass(frozen=True)
class GpuResources:
    """The resource names that make a pod a GPU pod (`models.gpu_resources`, the one
    definition), with the operator config's own names and those NVIDIA's device plugin's
    configs may advertise, and the DRA drivers whose ResourceClaims count."""

    names: frozenset[str]
    drivers: frozenset[str] = frozenset(DEFAULT_DRA_DRIVERS)

    def match(self, resource: str) -> bool:
        return gpu_backed(resource, self.names)

    def with_names(self, names: Iterable[str]) -> GpuResources:
        return replace(self, names=self.names | frozenset(names))

    def widens(self, other: GpuResources) -> bool:
        """Whether `other` matches a resource name this does not (a pod this left out may be
        a GPU pod under `other`)."""
        return any(not self.match(n) for n in other.names - self.names)


def gpu_resources(config: OperatorConfig, plugin_names: Iterable[str] = ()) -> GpuResources:
    """The configured vGPU names, Volcano's own (newer schedulers hard-code them), NVIDIA's
    whole GPUs and MIG devices, Ascend chips, legacy GPU sharing, and `plugin_names` (what
    NVIDIA's device plugin's configs may advertise, `snapshot_gpu_resources`)."""
    names = config.resource_names
    return GpuResources(
        frozenset(
            {
                names.count,
                names.memory,
                names.memory_percentage,
                names.cores,
                *HARDCODED_ALLOCATABLE,
                NVIDIA_GPU,
                LEGACY_GPU_MEMORY,
                LEGACY_GPU_NUMBER,
                *plugin_names,
            }
        ),
        frozenset(config.gpu_dra_drivers),
    )


def plugin_config_names(snapshot: ClusterSnapshot) -> PluginConfigNames:
    """What NVIDIA's device plugin's configs (the ConfigMap the operator config names) may
    advertise, as the snapshot read them; nothing when none is named."""
    return plugin_names_in(snapshot.config, snapshot.configmaps)


def plugin_names_in(config: OperatorConfig, configmaps: Iterable[Obj]) -> PluginConfigNames:
    """`plugin_config_names` with the ConfigMaps as read (before the snapshot is whole)."""
    ref = config.nvidia_device_plugin_config
    if ref is None:
        return PluginConfigNames()
    named = (
        c
        for c in configmaps
        if (c.get("metadata") or {}).get("namespace") == ref.namespace
        and (c.get("metadata") or {}).get("name") == ref.name
    )
    return configmap_names(next(named, None), ref.key)


def snapshot_gpu_resources(snapshot: ClusterSnapshot) -> GpuResources:
    """`gpu_resources` with the names NVIDIA's device plugin's configs in the snapshot name."""
    return gpu_resources(snapshot.config, plugin_config_names(snapshot).names)


def holds_gpu(
    pod: Mapping[str, Any], resources: GpuResources, claims: ClaimDrivers | None = None
) -> bool:
    """Whether the pod consumes a GPU: a GPU resource requested or limited (non-zero) by any
    (init) container, or a ResourceClaim that counts (`models.gpu_resources.gpu_consumer`;
    `claims` None: every claim counts)."""
    return gpu_consumer(pod, resources.names, resources.drivers, claims)


def interned(obj: Any) -> Any:
    """A copy of a JSON value whose strings are interned: thousands of pods and nodes kept by
    the watches repeat the same keys and most values (label keys, images, resource names, the
    node contract's annotations), each decoded anew from its event; shared, they cost about half
    (measured: 4.7 -> 2.6 KiB per compact node)."""
    if isinstance(obj, dict):
        return {sys.intern(k) if isinstance(k, str) else k: interned(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [interned(v) for v in obj]
    if isinstance(obj, str):
        return sys.intern(obj)
    return obj


def compact_meta(obj: Mapping[str, Any]) -> Obj:
    """The metadata the operator reads of a pod or a node (no managedFields)."""
    meta = obj.get("metadata") or {}
    return {k: meta[k] for k in _META_KEYS if k in meta}


def _compact_containers(items: Iterable[Mapping[str, Any]] | None) -> list[Obj]:
    return [{k: c[k] for k in _CONTAINER_KEYS if k in c} for c in items or []]


def compact_pod(pod: Mapping[str, Any]) -> Obj:
    """What of a pod is kept: its identity, labels and annotations (device allocations, the
    requested vGPU mode), owner, node, scheduler, containers' images and resources, phase and
    Ready condition."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    out: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": compact_meta(pod),
        "spec": {
            "nodeName": spec.get("nodeName"),
            "schedulerName": spec.get("schedulerName"),
            "containers": _compact_containers(spec.get("containers")),
            "initContainers": _compact_containers(spec.get("initContainers")),
            **({"resourceClaims": spec["resourceClaims"]} if spec.get("resourceClaims") else {}),
        },
        "status": {
            k: status[k]
            for k in ("phase", "reason", "startTime", "resourceClaimStatuses")
            if k in status
        },
    }
    # the Ready condition alone (whether a plugin pod serves: core.dra.prerequisites)
    ready = [
        {"type": "Ready", "status": c.get("status")}
        for c in status.get("conditions") or []
        if isinstance(c, Mapping) and c.get("type") == "Ready"
    ]
    if ready:
        out["status"]["conditions"] = ready
    # emptyDir volumes only, where there are any (their data is lost on eviction: the drain of
    # safe transitions evicts such a pod only with deleteEmptyDirData)
    empty: list[Obj] = [
        {"name": v.get("name"), "emptyDir": {}}
        for v in spec.get("volumes") or []
        if isinstance(v, Mapping) and "emptyDir" in v
    ]
    if empty:
        out["spec"]["volumes"] = empty
    return out


def shared_parts(pod: Obj) -> Obj:
    """`pod` (compact, interned) with the parts a Deployment's replicas repeat (containers,
    labels, owner, the Ready condition) replaced by equal ones already kept
    (`core.nodes.textcache.shared`)."""
    meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
    for key in ("labels", "ownerReferences"):
        if key in meta:
            meta[key] = shared(meta[key])
    for key in ("containers", "initContainers"):
        spec[key] = shared(spec[key])
    if "conditions" in status:
        status["conditions"] = shared(status["conditions"])
    return pod


def gpu_pod(resources: GpuResources) -> Callable[[Mapping[str, Any]], Obj | None]:
    """The pod index's parse: the compact pod if it holds GPU resources, else None (not kept)."""

    def parse(pod: Mapping[str, Any]) -> Obj | None:
        if not holds_gpu(pod, resources):
            return None
        kept: Obj = shared_parts(interned(compact_pod(pod)))
        return kept

    return parse


def plugin_refs(config: OperatorConfig) -> list[tuple[str, str]]:
    """The DaemonSets the operator configures (and may write): HAMi's plugins, and the DRA
    driver's kubelet plugin when the config has a `dra` section."""
    refs = [(r.namespace, r.name) for r in (config.device_plugin, config.ascend_device_plugin)]
    if config.dra is not None:
        dra = config.dra.kubelet_plugin_daemon_set
        refs.append((dra.namespace, dra.name))
    return list(dict.fromkeys(refs))


def snapshot_pod(
    config: OperatorConfig, resources: GpuResources
) -> Callable[[Mapping[str, Any]], Obj | None]:
    """The parse of a pod listed across the cluster (`doctor`, `plan`'s snapshot): the compact
    pod if a rule or the plan reads it, else None (decoded and dropped). They read the pods
    holding GPU resources or a ResourceClaim (as the controller's pod index keeps them), a
    DaemonSet's pods (the device plugins and DRA kubelet plugins, recognised by their
    DaemonSet: `core.volcano.placement.reached`, `core.dra.prerequisites`), the pods of the
    namespaces of the scheduler and the configured plugins (their workloads' `pods_of`) and
    NVIDIA's device plugin's wherever it runs (`nvidia-device-plugin-conflict`). The rest,
    nine in ten of bench/doctor_scale.py's 50,000 pods, cost `doctor` their compaction, their
    pickling to the rules' worker and every rule's loop over them, for no finding."""
    namespaces = {config.scheduler.deployment.namespace, *(ns for ns, _ in plugin_refs(config))}
    match = config.nvidia_device_plugin

    def parse(pod: Mapping[str, Any]) -> Obj | None:
        meta = pod.get("metadata") or {}
        containers = (pod.get("spec") or {}).get("containers") or []
        if (
            holds_gpu(pod, resources)
            or meta.get("namespace") in namespaces
            or any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or [])
            or match.recognises(meta.get("labels") or {}, [c.get("image", "") for c in containers])
        ):
            return compact_pod(pod)
        return None

    return parse


def gpu_pod_of(pod: Mapping[str, Any]) -> GpuPod | None:
    """A pod of the index as the drain sees it; None for a pod the drain leaves alone: one a
    DaemonSet owns (it would come back at once; `kubectl drain --ignore-daemonsets`)."""
    meta = pod.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    if any(o.get("kind") == "DaemonSet" and o.get("controller") for o in owners):
        return None
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return GpuPod(
        key=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        terminating=bool(meta.get("deletionTimestamp")),
        empty_dir=any("emptyDir" in v for v in volumes),
    )


def pod_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def label_selector(match_labels: Mapping[str, str]) -> str:
    """A `labelSelector` query for exactly the pods `WorkloadView.selects` (matchLabels)."""
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


def nvidia_plugin_workload(view: WorkloadView, match: NvidiaDevicePluginMatch) -> bool:
    """Whether a DaemonSet runs NVIDIA's device plugin (its pods are what the rule
    `nvidia-device-plugin-conflict` recognises by the same labels and images)."""
    return match.recognises(view.pod_labels, [c.image for c in view.containers])

"""Read a `ClusterSnapshot` from the apiserver: the few named ConfigMaps, Deployments and
DaemonSets the rules look at, and every Node and Pod, listed in pages.

Reads only, plain JSON through `kubeapi.request`. Named objects are fetched with one GET each
(404: absent); Nodes and Pods are listed (no per-node GET), 500 per page, finished Pods left out
by a field selector, and each item cut down to the fields the rules read (no managedFields, no
status conditions), so a 5,000-node cluster stays a few megabytes in memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import kubeapi
from vgpu_operator.core.rules import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.volcano import (
    DEFAULT_DEVICE_CONFIG_NAME,
    PLUGIN_CM_NAMESPACES,
    PayloadError,
)
from vgpu_operator.models.volcano_views import parse_scheduler_conf

Obj = dict[str, Any]
PAGE = 500

# What of a Node and of a Pod the rules read (everything else is dropped after listing).
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


def configmap_path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    return f"{base}/{name}" if name else base


def workload_path(kind: str, namespace: str, name: str | None = None) -> str:
    plural = {"Deployment": "deployments", "DaemonSet": "daemonsets"}[kind]
    base = f"/apis/apps/v1/namespaces/{namespace}/{plural}"
    return f"{base}/{name}" if name else base


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


async def get_or_none(api: client.ApiClient, path: str) -> Obj | None:
    try:
        return await kubeapi.request(api, "GET", path)
    except kubeapi.NotFound:
        return None


async def list_all(
    api: client.ApiClient, path: str, query: Mapping[str, str] | None = None
) -> list[Obj]:
    """Every item of a list, page by page (`limit`/`continue`)."""
    items: list[Obj] = []
    params = {"limit": str(PAGE), **(query or {})}
    while True:
        body = await kubeapi.request(api, "GET", path, query=params)
        items.extend(body.get("items") or [])
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return items
        params = {**params, "continue": token}


def _meta(obj: Mapping[str, Any]) -> Obj:
    meta = obj.get("metadata") or {}
    return {k: meta[k] for k in _META_KEYS if k in meta}


def compact_node(node: Mapping[str, Any]) -> Obj:
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(node),
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {k: status[k] for k in ("capacity", "allocatable") if k in status},
    }


def _containers(items: Iterable[Mapping[str, Any]] | None) -> list[Obj]:
    return [{k: c[k] for k in _CONTAINER_KEYS if k in c} for c in items or []]


def compact_pod(pod: Mapping[str, Any]) -> Obj:
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(pod),
        "spec": {
            "nodeName": spec.get("nodeName"),
            "schedulerName": spec.get("schedulerName"),
            "containers": _containers(spec.get("containers")),
            "initContainers": _containers(spec.get("initContainers")),
        },
        "status": {k: status[k] for k in ("phase", "reason", "startTime") if k in status},
    }


def _with_kind(obj: Obj, kind: str, api_version: str) -> Obj:
    """List items carry no kind; workloads lose their managedFields (ConfigMaps keep them: the
    time of their last data change is read from there)."""
    obj.setdefault("kind", kind)
    obj.setdefault("apiVersion", api_version)
    if kind != "ConfigMap":
        (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def configmap_refs(config: OperatorConfig) -> list[tuple[str, str]]:
    """The ConfigMaps the rules read, as far as known before the scheduler conf is read."""
    refs = [
        config.scheduler.config_map.ref(),
        config.device_config.ref(),
        config.node_config.ref(),
        config.ascend_node_config.ref(),
        config.ascend_vnpu.scheduler_device.ref(),
        *((ns, DEFAULT_DEVICE_CONFIG_NAME) for ns in PLUGIN_CM_NAMESPACES),
    ]
    return list(dict.fromkeys(refs))


def scheduler_device_ref(
    config: OperatorConfig, scheduler_cm: Mapping[str, Any] | None
) -> tuple[str, str] | None:
    """The device ConfigMap the scheduler conf points at (KnownGeometriesCMName/Namespace)."""
    text = ((scheduler_cm or {}).get("data") or {}).get(config.scheduler.config_map.key)
    if text is None:
        return None
    try:
        return parse_scheduler_conf(text).deviceshare.known_geometries_cm
    except PayloadError:
        return None


async def read_configmaps(api: client.ApiClient, config: OperatorConfig) -> list[Obj]:
    refs = configmap_refs(config)
    found = await asyncio.gather(*(get_or_none(api, configmap_path(ns, n)) for ns, n in refs))
    by_ref = {ref: cm for ref, cm in zip(refs, found, strict=True) if cm is not None}
    extra = scheduler_device_ref(config, by_ref.get(config.scheduler.config_map.ref()))
    if extra is not None and extra not in refs:
        cm = await get_or_none(api, configmap_path(*extra))
        if cm is not None:
            by_ref[extra] = cm
    return [_with_kind(cm, "ConfigMap", "v1") for cm in by_ref.values()]


async def read_workloads(
    api: client.ApiClient, config: OperatorConfig
) -> tuple[list[Obj], list[Obj]]:
    """(Deployments, DaemonSets): the scheduler Deployment, and every DaemonSet (there are few;
    the rules look for Ascend MindCluster plugins among them by their flags)."""
    sched = config.scheduler.deployment
    deployment = await get_or_none(api, workload_path("Deployment", sched.namespace, sched.name))
    daemonsets = await list_all(api, "/apis/apps/v1/daemonsets")
    return (
        [_with_kind(deployment, "Deployment", "apps/v1")] if deployment else [],
        [_with_kind(ds, "DaemonSet", "apps/v1") for ds in daemonsets],
    )


async def read_nodes(api: client.ApiClient) -> list[Obj]:
    return [compact_node(n) for n in await list_all(api, kubeapi.node_path())]


async def read_pods(api: client.ApiClient) -> list[Obj]:
    pods = await list_all(api, "/api/v1/pods", {"fieldSelector": "status.phase!=Succeeded"})
    return [compact_pod(p) for p in pods]


async def read_snapshot(
    api: client.ApiClient, config: OperatorConfig, nodes: list[Obj] | None = None
) -> ClusterSnapshot:
    """Everything the rules read, in a handful of requests (plus one per 500 Nodes/Pods).
    `nodes`: the compact Nodes when the caller already has them (the controller keeps them
    from its watch); None: list them."""

    async def given() -> list[Obj]:
        assert nodes is not None
        return nodes

    configmaps, (deployments, daemonsets), node_list, pods = await asyncio.gather(
        read_configmaps(api, config),
        read_workloads(api, config),
        read_nodes(api) if nodes is None else given(),
        read_pods(api),
    )
    return ClusterSnapshot(
        config=config,
        configmaps=configmaps,
        deployments=deployments,
        daemonsets=daemonsets,
        nodes=node_list,
        pods=pods,
    )

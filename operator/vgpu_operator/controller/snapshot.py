"""Read a `ClusterSnapshot` from the apiserver: the few named ConfigMaps, Deployments and
DaemonSets the rules look at, the Nodes, the DaemonSets and the Pods the rules read.

Reads only, plain JSON through `kubeapi.request`. Named objects are fetched with one GET each
(404: absent). The controller hands in what its watches hold: the Nodes, every DaemonSet
(compact) and the pods holding GPU resources (its pod index); a pass then lists only the pods of
the components (the scheduler Deployment, the device plugin DaemonSets, NVIDIA's device
plugin), each with its namespace and its own label selector, and never lists Pods or
DaemonSets across the cluster. Without them (`doctor`), Nodes, DaemonSets and Pods are listed,
500 per page, finished Pods left out by a field selector. Every item is cut down to the fields
the rules read (no managedFields, no status conditions).

So in the controller's snapshot `pods` holds the GPU pods and the component pods, not every
pod: a rule that looks for other pods sees them only through `doctor`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import kubeapi
from vgpu_operator.core.dra.driver import RESOURCE_API as DRA_API
from vgpu_operator.core.dra.observed import DraApi
from vgpu_operator.core.dra.unschedulable import claim_ask
from vgpu_operator.core.rollout.gpu_pods import (
    compact_meta,
    compact_pod,
    gpu_resources,
    label_selector,
    nvidia_plugin_workload,
    plugin_names_in,
    plugin_refs,
    pod_key,
    snapshot_pod,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.gpu_resources import ClaimDrivers, claim_drivers
from vgpu_operator.models.volcano import (
    DEFAULT_DEVICE_CONFIG_NAME,
    PLUGIN_CM_NAMESPACES,
    PayloadError,
)
from vgpu_operator.models.volcano_views import WorkloadView, parse_scheduler_conf, workload_view

Obj = dict[str, Any]
PAGE = 500
# ResourceClaims (kubernetes/api@v0.34.0:resource/v1/types.go, GA in Kubernetes 1.34).
CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


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
    api: client.ApiClient,
    path: str,
    query: Mapping[str, str] | None = None,
    keep: Callable[[Obj], Obj | None] | None = None,
) -> list[Obj]:
    """Every item of a list, page by page (`limit`/`continue`), each passed through `keep`
    (e.g. `compact_node`; an item it returns None for is dropped; None: as listed). The next
    page is asked for before this one is decoded, and the decoding runs in a thread meanwhile:
    the apiserver encodes one page while this process decodes the last (`doctor` over 50,000
    pods, bench/doctor_scale.py)."""
    params = {"limit": str(PAGE), **(query or {})}
    items: list[Obj] = []
    raw = await kubeapi.request_bytes(api, path, query=params)
    while True:
        token = continue_token(raw)
        following = (
            asyncio.ensure_future(
                kubeapi.request_bytes(api, path, query={**params, "continue": token})
            )
            if token
            else None
        )
        try:
            page, token = await asyncio.to_thread(_page, raw, keep)
        except BaseException:
            if following is not None:
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
            raise
        items.extend(page)
        if following is not None:
            raw = await following
        elif token:  # the head did not say (not the apiserver's order): one page after another
            raw = await kubeapi.request_bytes(api, path, query={**params, "continue": token})
        else:
            return items


def continue_token(raw: bytes) -> str | None:
    """The `continue` token of a list's JSON, read off its head: the apiserver writes a list's
    `metadata` before its `items` (the Go struct's field order, k8s.io/apimachinery@v0.35.4:
    pkg/apis/meta/v1/types.go `List`/`ListMeta`; the typed lists' the same). None when there is
    none or the head is not in that form (the caller then takes it from the decoded page)."""
    at = raw.find(b',"items":')
    if at < 0:
        return None
    try:
        head = json.loads(raw[:at] + b"}")
    except ValueError:
        return None
    meta = head.get("metadata") if isinstance(head, dict) else None
    token = meta.get("continue") if isinstance(meta, dict) else None
    return token if isinstance(token, str) and token else None


def _page(raw: bytes, keep: Callable[[Obj], Obj | None] | None) -> tuple[list[Obj], str | None]:
    """A list page's items (through `keep`, which drops an item by returning None) and its
    `continue` token."""
    body = json.loads(raw) if raw else {}
    items = body.get("items") or []
    token = (body.get("metadata") or {}).get("continue") or None
    if keep is None:
        return items, token
    return [k for k in map(keep, items) if k is not None], token


def compact_node(node: Mapping[str, Any]) -> Obj:
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": compact_meta(node),
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {k: status[k] for k in ("capacity", "allocatable") if k in status},
    }


def compact_daemonset(ds: Mapping[str, Any]) -> Obj:
    """What the rules read of a DaemonSet: its metadata (no managedFields, no copy of the last
    applied manifest) and spec; not its status."""
    meta = {k: v for k, v in (ds.get("metadata") or {}).items() if k != "managedFields"}
    annotations = meta.get("annotations")
    if annotations and LAST_APPLIED in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta,
        "spec": ds.get("spec") or {},
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


def read_only_configmap_refs(config: OperatorConfig) -> list[tuple[str, str]]:
    """ConfigMaps the operator reads and never writes: NVIDIA's device plugin configs
    (`nvidiaDevicePluginConfig`, the resource names they rename to are GPU consumers)."""
    ref = config.nvidia_device_plugin_config
    return [] if ref is None or ref.ref() in configmap_refs(config) else [ref.ref()]


def watched_objects(config: OperatorConfig) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of each object the controller watches by name: the ConfigMaps
    the rules read and the scheduler Deployment. Each is one list/watch of its namespace with
    the field selector metadata.name=<name>, which RBAC authorizes against `resourceNames`
    (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources):
    the chart's Roles grant exactly these names (the read-only ones without update or patch),
    and no ConfigMap or Deployment is read across the cluster."""
    dep = config.scheduler.deployment
    return [
        *(("ConfigMap", ns, name) for ns, name in configmap_refs(config)),
        *(("ConfigMap", ns, name) for ns, name in read_only_configmap_refs(config)),
        ("Deployment", dep.namespace, dep.name),
    ]


def collection_path(kind: str, namespace: str) -> str:
    if kind == "ConfigMap":
        return configmap_path(namespace)
    return workload_path(kind, namespace)


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
    refs = [*configmap_refs(config), *read_only_configmap_refs(config)]
    found = await asyncio.gather(*(get_or_none(api, configmap_path(ns, n)) for ns, n in refs))
    by_ref = {ref: cm for ref, cm in zip(refs, found, strict=True) if cm is not None}
    extra = scheduler_device_ref(config, by_ref.get(config.scheduler.config_map.ref()))
    if extra is not None and extra not in refs:
        cm = await get_or_none(api, configmap_path(*extra))
        if cm is not None:
            by_ref[extra] = cm
    return [_with_kind(cm, "ConfigMap", "v1") for cm in by_ref.values()]


async def read_workloads(
    api: client.ApiClient, config: OperatorConfig, daemonsets: list[Obj] | None = None
) -> tuple[list[Obj], list[Obj]]:
    """(Deployments, DaemonSets): the scheduler Deployment, and every DaemonSet (there are few;
    the rules look for Ascend MindCluster plugins among them by their flags). `daemonsets`:
    every DaemonSet, compact, from the caller's watch: the configured plugins are then read
    by name all the same (a pass reads them again after writing them); None: list them."""
    sched = config.scheduler.deployment
    dep_path = workload_path("Deployment", sched.namespace, sched.name)
    if daemonsets is None:
        deployment, listed = await asyncio.gather(
            get_or_none(api, dep_path), list_all(api, "/apis/apps/v1/daemonsets")
        )
        found = [_with_kind(ds, "DaemonSet", "apps/v1") for ds in listed]
    else:
        refs = plugin_refs(config)
        deployment, *named = await asyncio.gather(
            get_or_none(api, dep_path),
            *(get_or_none(api, workload_path("DaemonSet", ns, name)) for ns, name in refs),
        )
        fresh = [compact_daemonset(ds) for ds in named if ds is not None]
        found = [*fresh, *(d for d in daemonsets if _ref_of(d) not in refs)]
    return ([_with_kind(deployment, "Deployment", "apps/v1")] if deployment else [], found)


def _ref_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


async def read_nodes(api: client.ApiClient) -> list[Obj]:
    return await list_all(api, kubeapi.node_path(), keep=compact_node)


async def read_pods(
    api: client.ApiClient, config: OperatorConfig, configmaps: Awaitable[list[Obj]]
) -> list[Obj]:
    """The pods of the cluster a rule or the plan reads (`snapshot_pod`), compact. The GPU
    resource names include those NVIDIA's device plugin's configs advertise: the ConfigMaps
    (`configmaps`, a handful of GETs) are read before the first page is asked for."""
    resources = gpu_resources(config, plugin_names_in(config, await configmaps).names)
    query = {"fieldSelector": "status.phase!=Succeeded"}
    return await list_all(api, "/api/v1/pods", query, keep=snapshot_pod(config, resources))


RESOURCE_GROUP_PATH = "/apis/resource.k8s.io"


async def read_dra_api(api: client.ApiClient, config: OperatorConfig) -> DraApi | None:
    """What the apiserver shows of DRA for the rules (`core.rules.dra`): the served versions of
    resource.k8s.io (its discovery document), and where v1 is served the DeviceClasses and the
    ResourceSlices of the configured driver (a field selector on `spec.driver`). Only with the
    operator config's `dra` section; None when it has none, or a read is refused (the DRA rules
    then say nothing)."""
    if config.dra is None:
        return None
    try:
        group = await get_or_none(api, RESOURCE_GROUP_PATH)
        served = tuple(
            str(v.get("groupVersion"))
            for v in (group or {}).get("versions") or []
            if isinstance(v, Mapping) and v.get("groupVersion")
        )
        if DRA_API not in served:
            return DraApi(served=served)
        classes, slices = await asyncio.gather(
            list_all(api, f"/apis/{DRA_API}/deviceclasses"),
            list_all(
                api,
                f"/apis/{DRA_API}/resourceslices",
                {"fieldSelector": f"spec.driver={config.dra.driver}"},
            ),
        )
    except kubeapi.ApiError:
        return None
    return DraApi(
        served=served,
        device_classes=tuple(_with_kind(c, "DeviceClass", DRA_API) for c in classes),
        resource_slices=tuple(_with_kind(s, "ResourceSlice", DRA_API) for s in slices),
    )


def compact_claim(claim: Mapping[str, Any]) -> Obj:
    """What is read of a ResourceClaim: its identity and its allocation's drivers, and while it
    is not allocated its requests (`core.dra.unschedulable.claim_ask`: the never-fit checks)."""
    meta = claim.get("metadata") or {}
    drivers = sorted(claim_drivers(claim))
    out: Obj = {
        "metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta},
        "status": {"allocation": {"devices": {"results": [{"driver": d} for d in drivers]}}},
    }
    ask = claim_ask(claim)
    if ask is not None:
        out["spec"] = ask
    return out


async def read_claims(api: client.ApiClient) -> ClaimDrivers | None:
    """Every ResourceClaim's allocated drivers (`doctor`, `plan`); None when they cannot be
    listed (no resource.k8s.io/v1 on the cluster, no right to list them): every claim then
    counts."""
    try:
        claims = await list_all(api, CLAIMS_PATH)
    except kubeapi.ApiError:
        return None
    return {_key(c): claim_drivers(c) for c in claims}


def _key(obj: Mapping[str, Any]) -> str:
    namespace, name = _ref_of(obj)
    return f"{namespace}/{name}"


def component_workloads(
    config: OperatorConfig, deployments: list[Obj], daemonsets: list[Obj]
) -> list[WorkloadView]:
    """The workloads whose pods the rules read: the scheduler, the configured device plugins
    and NVIDIA's device plugin wherever it runs."""
    views = [workload_view(d) for d in deployments]
    refs = plugin_refs(config)
    for ds in daemonsets:
        view = workload_view(ds)
        if (view.namespace, view.name) in refs or nvidia_plugin_workload(
            view, config.nvidia_device_plugin
        ):
            views.append(view)
    return views


async def read_component_pods(api: client.ApiClient, views: list[WorkloadView]) -> list[Obj]:
    """The live pods of each workload: one namespaced list per workload, by its selector (a
    workload without matchLabels selects no pod, as `WorkloadView.selects` has it)."""
    lists = await asyncio.gather(
        *(
            list_all(
                api,
                f"/api/v1/namespaces/{v.namespace}/pods",
                {
                    "labelSelector": label_selector(v.match_labels),
                    "fieldSelector": "status.phase!=Succeeded",
                },
            )
            for v in views
            if v.match_labels
        )
    )
    return [compact_pod(p) for items in lists for p in items]


async def read_snapshot(
    api: client.ApiClient,
    config: OperatorConfig,
    nodes: list[Obj] | None = None,
    *,
    gpu_pods: list[Obj] | None = None,
    daemonsets: list[Obj] | None = None,
) -> ClusterSnapshot:
    """Everything the rules read, in a handful of requests (plus one per 500 listed objects).
    What the caller already has from its watches, it hands in: `nodes` (compact), `daemonsets`
    (compact, every one) and `gpu_pods` (the pods holding GPU resources; the components' pods
    are then listed per workload). None: listed across the cluster (`doctor`), and the
    ResourceClaims with them (the controller keeps its own, `controller.claims`)."""

    async def given(items: list[Obj] | None) -> list[Obj]:
        assert items is not None
        return items

    async def no_claims() -> ClaimDrivers | None:
        return None

    read = asyncio.ensure_future(read_configmaps(api, config))
    configmaps, (deployments, found), node_list, pods, claims, dra = await asyncio.gather(
        read,
        read_workloads(api, config, daemonsets),
        read_nodes(api) if nodes is None else given(nodes),
        read_pods(api, config, read) if gpu_pods is None else given(gpu_pods),
        read_claims(api) if gpu_pods is None else no_claims(),
        read_dra_api(api, config),
    )
    if gpu_pods is not None:
        views = component_workloads(config, deployments, found)
        components = await read_component_pods(api, views)
        pods = list({pod_key(p): p for p in (*gpu_pods, *components)}.values())
    return ClusterSnapshot(
        config=config,
        configmaps=configmaps,
        deployments=deployments,
        daemonsets=found,
        nodes=node_list,
        pods=pods,
        claims=claims,
        dra_api=dra,
    )

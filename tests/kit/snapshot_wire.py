"""A cluster served on the wire (`tests.kit.wire`) from a `ClusterSnapshot`'s objects, the
VGPUNodePolicies and ResourceClaims, answering the GETs and LISTs `doctor` and `plan` send:
each named ConfigMap, Deployment and DaemonSet by its path (404 when absent), and the lists of
DaemonSets, Nodes, Pods, ResourceClaims and policies. `kubeconfig` points a client at it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.kit.wire import Wire
from vgpu_operator import kubeapi
from vgpu_operator.controller.snapshot import CLAIMS_PATH, configmap_path, workload_path
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, meta, name_of

Obj = dict[str, Any]


def _answer(body: Obj) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(_: web.Request) -> web.Response:
        return web.json_response(body)

    return handler


def _listing(items: list[Obj]) -> Callable[[web.Request], Awaitable[web.Response]]:
    return _answer({"metadata": {"resourceVersion": "7"}, "items": items})


def serve_cluster(
    wire: Wire,
    s: ClusterSnapshot,
    *,
    policies: list[Obj] | None = None,
    claims: list[Obj] | None = None,
) -> None:
    """Route `wire` to answer as a cluster holding `s`'s objects. `policies` None: no
    VGPUNodePolicy CRD (its list is a 404); `claims` None: no resource.k8s.io/v1 (404)."""
    for cm in s.configmaps:
        path = configmap_path(str(meta(cm).get("namespace")), name_of(cm))
        wire.on("GET", path, _answer(cm))
    for kind, items in (("Deployment", s.deployments), ("DaemonSet", s.daemonsets)):
        for obj in items:
            path = workload_path(kind, str(meta(obj).get("namespace")), name_of(obj))
            wire.on("GET", path, _answer(obj))
    wire.on("GET", "/apis/apps/v1/daemonsets", _listing(s.daemonsets))
    wire.on("GET", kubeapi.node_path(), _listing(s.nodes))
    wire.on("GET", "/api/v1/pods", _listing(s.pods))
    if claims is not None:
        wire.on("GET", CLAIMS_PATH, _listing(claims))
    if policies is not None:
        wire.on("GET", kubeapi.policy_path(), _listing(policies))


def kubeconfig(wire: Wire, directory: Path) -> str:
    """A kubeconfig file for the served cluster (a bearer token; the server speaks HTTP)."""
    path = directory / "wire-kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "w", "cluster": {"server": wire.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "w", "context": {"cluster": "w", "user": "u"}}],
                "current-context": "w",
            }
        )
    )
    return str(path)

"""Where the operator's objects live in the API, and the content types it speaks: shared by the
controller's client (`kubeapi.request`) and the node agent's (`kubeapi.lite`), standard library
only."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from vgpu_operator import contract

MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
# The response as metadata only (the apiserver converts any object to PartialObjectMetadata):
# a fraction of a Node's size to serialize, send and decode.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


def node_path(name: str | None = None) -> str:
    return "/api/v1/nodes" + (f"/{quote(name)}" if name else "")


def policy_path(name: str | None = None, *, status: bool = False) -> str:
    base = f"/apis/{contract.GROUP}/{contract.VERSION}/{contract.POLICY_PLURAL}"
    if name is None:
        return base
    return f"{base}/{quote(name)}" + ("/status" if status else "")


def object_ref(
    kind: str, name: str, *, namespace: str | None = None, uid: str | None = None
) -> dict[str, Any]:
    """The reference an Event's involvedObject is built from (see `kubeapi.events`)."""
    api_version = _API_VERSIONS.get(kind, "v1")
    meta: dict[str, Any] = {"name": name, "uid": uid or None}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


_API_VERSIONS = {
    "Deployment": "apps/v1",
    "DaemonSet": "apps/v1",
    contract.POLICY_KIND: contract.API_VERSION,
    "Lease": "coordination.k8s.io/v1",
}


def verb(method: str, query: list[tuple[str, str]]) -> str:
    """The verb a request is counted under (`vgpu_operator_api_errors_total`)."""
    if method == "GET":
        return "watch" if ("watch", "true") in query else "get"
    return method.lower()

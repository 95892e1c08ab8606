"""Plain-JSON requests through a kubernetes-asyncio ApiClient.

The generated typed models are slow to build for thousands of Nodes and their stubs reject plain
dict bodies, so the operator reads and writes JSON dicts through this one helper. It reuses the
client's connection pool, authentication and TLS settings.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from vgpu_operator import contract

MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
# The response as metadata only (the apiserver converts any object to PartialObjectMetadata):
# a fraction of a Node's size to serialize, send and decode.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

__all__ = [
    "JSON",
    "MERGE_PATCH",
    "METADATA_ONLY",
    "ApiException",
    "Conflict",
    "NotFound",
    "request",
]


class Conflict(Exception):
    """HTTP 409: the object changed since it was read. Read again and recompute."""


class NotFound(Exception):
    """HTTP 404."""


async def request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    body: Any = None,
    query: dict[str, str] | None = None,
    content_type: str = JSON,
    field_manager: str | None = contract.FIELD_MANAGER,
    timeout: float = 30.0,
    accept: str = JSON,
) -> dict[str, Any]:
    """One API request; returns the decoded JSON body. 404 -> NotFound, 409 -> Conflict."""
    params = dict(query or {})
    if field_manager and method in ("POST", "PUT", "PATCH"):
        params["fieldManager"] = field_manager
    raw: Any = api
    try:
        resp = await raw.call_api(
            path,
            method,
            query_params=list(params.items()),
            header_params={"Content-Type": content_type, "Accept": accept},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=timeout,
        )
    except ApiException as exc:
        _raise_for(exc, path)
        raise
    data = await resp.read()
    # Without _preload_content the client checks no status: do it here.
    if not 200 <= resp.status <= 299:
        err = ApiException(status=resp.status, reason=resp.reason)
        err.body = data.decode(errors="replace")
        _raise_for(err, path)
        raise err
    result: dict[str, Any] = json.loads(data) if data else {}
    return result


def _raise_for(exc: ApiException, path: str) -> None:
    if exc.status == 404:
        raise NotFound(path) from exc
    if exc.status == 409:
        raise Conflict(path) from exc


def node_path(name: str | None = None) -> str:
    return "/api/v1/nodes" + (f"/{quote(name)}" if name else "")


def policy_path(name: str | None = None, *, status: bool = False) -> str:
    base = f"/apis/{contract.GROUP}/{contract.VERSION}/{contract.POLICY_PLURAL}"
    if name is None:
        return base
    return f"{base}/{quote(name)}" + ("/status" if status else "")

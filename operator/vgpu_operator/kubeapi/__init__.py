"""The one seam between the operator and the Kubernetes API.

- `request`: one JSON request (reads, merge PATCHes, POSTs), on a client's pool, TLS and auth;
  `answer`: one whose refusal is expected (a dry run the admission policies must refuse);
- `list_watch`: list-then-watch as one async iterator (`kubeapi.watch`, with the semantics of
  `kubeapi.reflector`);
- the error tree (`kubeapi.errors`): `ApiError` and `NotFound`, `Conflict`, `Gone`,
  `Unauthorized`, `Forbidden`, `Invalid`, `TooManyRequests` (with `retry_after`), `ServerError`,
  `Unreachable`, mapped from the HTTP status in one table;
- credentials (`kubeapi.credentials`): every kubeconfig kubectl accepts or the in-cluster
  ServiceAccount, renewed periodically and on a 401.

Nothing else in the package calls kubernetes-asyncio's request machinery directly. The node agent
talks to the API through `kubeapi.lite` (asyncio streams and ssl, no aiohttp, kubernetes-asyncio
or prometheus_client: it runs on every GPU node), which shares the standard-library parts: the
error tree, `reflector`, `resources`, `auth` and `source`. So that importing those, or
`kubeapi.lite`, does not load the controller's client, `request`, `answer`, `open_stream`,
`Client`, `list_all` and `list_watch` are imported on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from vgpu_operator.kubeapi.auth import AuthHealth
from vgpu_operator.kubeapi.errors import (
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    Unreachable,
    error_for,
)
from vgpu_operator.kubeapi.reflector import Listing, WatchEvent, WatchFailed, WatchOptions
from vgpu_operator.kubeapi.resources import (
    JSON,
    MERGE_PATCH,
    METADATA_ONLY,
    node_path,
    object_ref,
    policy_path,
)

if TYPE_CHECKING:
    from vgpu_operator.kubeapi.aio import Client, answer, open_stream, request, request_bytes
    from vgpu_operator.kubeapi.watch import list_all, list_watch

# name -> the module that defines it, imported on first use (it imports kubernetes-asyncio)
_ON_USE = {
    "Client": "aio",
    "answer": "aio",
    "open_stream": "aio",
    "request": "aio",
    "request_bytes": "aio",
    "list_all": "watch",
    "list_watch": "watch",
}


def __getattr__(name: str) -> Any:
    module = _ON_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "JSON",
    "MERGE_PATCH",
    "METADATA_ONLY",
    "ApiError",
    "AuthHealth",
    "Client",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "Listing",
    "NotFound",
    "ServerError",
    "TooManyRequests",
    "Unauthorized",
    "Unreachable",
    "WatchEvent",
    "WatchFailed",
    "WatchOptions",
    "answer",
    "error_for",
    "list_all",
    "list_watch",
    "node_path",
    "object_ref",
    "open_stream",
    "policy_path",
    "request",
    "request_bytes",
]

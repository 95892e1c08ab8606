"""The one seam between the operator and the Kubernetes API.

- `request`: one JSON request (reads, merge PATCHes, POSTs), on a client's pool, TLS and auth;
  `answer`: one whose refusal is expected (a dry run the admission policies must refuse);
- `list_watch`: list-then-watch as one async iterator (`kubeapi.watch`);
- the error tree (`kubeapi.errors`): `ApiError` and `NotFound`, `Conflict`, `Gone`,
  `Unauthorized`, `Forbidden`, `Invalid`, `TooManyRequests` (with `retry_after`), `ServerError`,
  `Unreachable`, mapped from the HTTP status in one table;
- credentials (`kubeapi.credentials`): every kubeconfig kubectl accepts or the in-cluster
  ServiceAccount, renewed periodically and on a 401.

Nothing else in the package calls kubernetes-asyncio's request machinery directly.
"""

from vgpu_operator.kubeapi.errors import (
    ApiError,
    ApiException,
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
from vgpu_operator.kubeapi.request import (
    JSON,
    MERGE_PATCH,
    METADATA_ONLY,
    AuthHealth,
    Client,
    answer,
    node_path,
    object_ref,
    open_stream,
    policy_path,
    request,
)
from vgpu_operator.kubeapi.watch import (
    Listing,
    WatchEvent,
    WatchFailed,
    WatchOptions,
    list_all,
    list_watch,
)

__all__ = [
    "JSON",
    "MERGE_PATCH",
    "METADATA_ONLY",
    "ApiError",
    "ApiException",
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
]

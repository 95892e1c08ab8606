"""The API's errors as one tree, mapped from the HTTP status in one table.

    ApiError (status, reason, message, path, body, response_headers)
      NotFound 404  Conflict 409  Gone 410  Unauthorized 401  Forbidden 403
      Invalid 422 (and 400)  TooManyRequests 429 (retry_after)  ServerError 5xx
      Unreachable (no HTTP answer: refused, reset, timed out; status 0)

Every call through `kubeapi` (and the node agent's `kubeapi.lite` client) raises these and
nothing else from the API side, so callers catch by meaning (`except kubeapi.Conflict`) instead of
comparing status codes. The tree imports nothing but the standard library, so both clients share
it; kubernetes-asyncio's own `ApiException` comes only from its typed API classes, never from
`kubeapi`. `message` is the apiserver's own `Status.message` when the body has one (what
`kubectl` prints).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "API_ERRORS_HELP",
    "API_ERRORS_NAME",
    "RETRY_AFTER_CAP",
    "ApiError",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "NotFound",
    "ServerError",
    "TooManyRequests",
    "Unauthorized",
    "Unreachable",
    "error_for",
    "retry_after_seconds",
]

MESSAGE_LIMIT = 1024  # of the apiserver's message, as kept for logs and status
# The longest wait a `Retry-After` may impose. The apiserver asks for a second or so (priority
# and fairness, max-in-flight); `inf`, `1e309` or a day could only come from a proxy or a bug,
# and would park the object until the controller restarts. Ten minutes is twice the backoff's
# own cap (core.backoff), so an honest long Retry-After still counts.
RETRY_AFTER_CAP = 600.0

# Each client counts its failed requests under this name (kubeapi.request, kubeapi.lite).
API_ERRORS_NAME = "vgpu_operator_api_errors_total"
API_ERRORS_HELP = "Kubernetes API requests that failed, by HTTP status (0: no answer) and verb"


class ApiError(Exception):
    """An answer from the apiserver that is not a success, or no answer at all."""

    def __init__(
        self,
        status: int,
        reason: str = "",
        *,
        path: str = "",
        body: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(status, reason)
        self.status = status
        self.reason = reason
        # The decoded text (a metav1.Status as JSON, usually): what callers search for the
        # field an apiserver refused.
        self.body = body
        self.response_headers: dict[str, str] = dict(headers or {})
        self.path = path
        self.message = status_message(body) or reason or f"HTTP {status}"

    def __str__(self) -> str:
        where = f" {self.path}" if self.path else ""
        return f"{self.status} {type(self).__name__}{where}: {self.message}"


class NotFound(ApiError):
    """404: no such object (or collection)."""


class Conflict(ApiError):
    """409: the object changed since it was read (or already exists). Read again, recompute."""


class Gone(ApiError):
    """410: the resourceVersion asked for was compacted away; list again."""


class Unauthorized(ApiError):
    """401: the credentials were not accepted (expired or rotated token, revoked certificate)."""


class Forbidden(ApiError):
    """403: authenticated, but RBAC (or an admission plugin) refuses the verb."""


class Invalid(ApiError):
    """422 (or 400): the request was refused as it is (validation, admission policy)."""


class TooManyRequests(ApiError):
    """429: the apiserver (priority and fairness, a webhook) asks the client to slow down."""

    @property
    def retry_after(self) -> float | None:
        return retry_after_seconds(self.response_headers)


class ServerError(ApiError):
    """5xx: the apiserver (or a webhook behind it) failed; the request may succeed later."""

    @property
    def retry_after(self) -> float | None:
        return retry_after_seconds(self.response_headers)


class Unreachable(ApiError):
    """No HTTP answer: connection refused or reset, TLS failure, or the request timed out."""

    def __init__(self, reason: str, *, path: str = "") -> None:
        super().__init__(0, reason, path=path)


_BY_STATUS: dict[int, type[ApiError]] = {
    400: Invalid,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_for(
    status: int,
    reason: str = "",
    *,
    path: str = "",
    body: str = "",
    headers: Mapping[str, str] | None = None,
) -> ApiError:
    """The error for an HTTP status (the one table of the tree)."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return cls(status, reason, path=path, body=body, headers=headers)


def status_message(body: str) -> str:
    """`message` of a metav1.Status body; '' when the body is not one."""
    try:
        data: Any = json.loads(body) if body else None
    except ValueError:
        return body.strip()[:MESSAGE_LIMIT]
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])[:MESSAGE_LIMIT]
    return ""


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The `Retry-After` header in seconds, at most `RETRY_AFTER_CAP`; None when absent or not
    delta-seconds (RFC 9110 section 10.2.3: a non-negative number; an HTTP-date, `nan` or a
    negative number is ignored, and the caller's own backoff applies)."""
    for key, value in headers.items():
        if key.lower() == "retry-after":
            try:
                seconds = float(str(value).strip())
            except ValueError:
                return None
            if math.isnan(seconds) or seconds < 0:
                return None
            return min(seconds, RETRY_AFTER_CAP)
    return None

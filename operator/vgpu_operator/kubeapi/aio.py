"""The controller's client: plain-JSON requests through a kubernetes-asyncio ApiClient (aiohttp
under it). `kubeapi.request` and the other names of the package's seam come from here; the node
agent's client is `kubeapi.lite`, which shares the error tree, `resources` and `auth`.

The generated typed models are slow to build for thousands of Nodes and their stubs reject plain
dict bodies, so the operator reads and writes JSON dicts through `request` (and streams watches
through `kubeapi.watch`, which shares `open_stream` below). Both reuse the client's connection
pool, authentication and TLS settings, and both:

- raise the `kubeapi.errors` tree, mapped from the HTTP status in one table;
- on a 401, renew the credentials (`Client.renew`: token file, exec plugin, in-cluster token)
  and retry once; a 401 or 403 that persists is recorded in `Client.auth` (`AuthHealth`), which
  logs it once a minute, exports it as a metric and fails the liveness probe after a bound.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException
from prometheus_client import Counter, Gauge

from vgpu_operator import contract
from vgpu_operator.kubeapi.auth import AUTH_FAILING_HELP, AUTH_FAILING_NAME, AuthHealth
from vgpu_operator.kubeapi.errors import (
    API_ERRORS_HELP,
    API_ERRORS_NAME,
    MESSAGE_LIMIT,
    ApiError,
    Forbidden,
    Unauthorized,
    Unreachable,
    error_for,
    status_message,
)
from vgpu_operator.kubeapi.resources import (
    JSON,
    MERGE_PATCH,
    METADATA_ONLY,
    node_path,
    object_ref,
    policy_path,
)
from vgpu_operator.kubeapi.resources import (
    verb as request_verb,
)

__all__ = [
    "JSON",
    "MERGE_PATCH",
    "METADATA_ONLY",
    "AuthHealth",
    "Client",
    "answer",
    "node_path",
    "object_ref",
    "open_stream",
    "policy_path",
    "request",
]

log = logging.getLogger("vgpu_operator.kubeapi")

API_ERRORS = Counter(API_ERRORS_NAME, API_ERRORS_HELP, ["status", "verb"])
AUTH_FAILING = Gauge(AUTH_FAILING_NAME, AUTH_FAILING_HELP)

Renew = Callable[[client.Configuration], Awaitable[bool]]


class Client(client.ApiClient):
    """An ApiClient that can renew its credentials and keeps the auth health of its requests.

    `Credentials.client()` makes one; a bare `kubernetes_asyncio` ApiClient works with
    `request` too (it then has no renewal and no health record)."""

    def __init__(
        self,
        configuration: client.Configuration,
        *,
        renew: Renew | None = None,
        auth: AuthHealth | None = None,
        user_agent: str | None = None,
    ) -> None:
        super().__init__(configuration=configuration)
        self.renew_credentials = renew
        self.auth = auth if auth is not None else AuthHealth()
        if self.auth.export is None:
            self.auth.export = AUTH_FAILING.set
        self._renewing: asyncio.Task[bool] | None = None
        if user_agent:
            self.user_agent = user_agent

    async def renew(self) -> bool:
        """Load the credentials again (one reload at a time; concurrent callers share it).
        True when the token or certificate changed."""
        if self.renew_credentials is None:
            return False
        if self._renewing is None or self._renewing.done():
            self._renewing = asyncio.ensure_future(self.renew_credentials(self.configuration))
        try:
            return await asyncio.shield(self._renewing)
        except Exception as exc:  # an exec plugin that fails, a token file not written yet
            log.warning("could not renew the credentials: %s", exc)
            return False


async def open_stream(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]],
    headers: dict[str, str],
    body: Any = None,
    timeout: float | aiohttp.ClientTimeout | tuple[float, float] = 30.0,
) -> Any:
    """Send one request and return the open aiohttp response with a 2xx status (the caller
    reads and releases it). Errors are the `kubeapi.errors` tree; a 401 renews the credentials
    and is retried once."""
    raw: Any = api
    verb = request_verb(method, query)
    for attempt in (0, 1):
        try:
            resp = await raw.call_api(
                path,
                method,
                query_params=query,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=timeout,
            )
        except ApiError:
            raise
        except ApiException as exc:
            error = error_for(
                exc.status or 0,
                exc.reason or "",
                path=path,
                body=_text(exc.body),
                headers=dict(exc.headers or {}),
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            API_ERRORS.labels(status="0", verb=verb).inc()
            raise Unreachable(f"{type(exc).__name__}: {exc}", path=path) from exc
        else:
            # Without _preload_content the client checks no status: do it here.
            if 200 <= resp.status <= 299:
                auth = getattr(api, "auth", None)
                if auth is not None:
                    auth.accepted()
                return resp
            try:
                data = await resp.read()
            finally:
                resp.release()
            error = error_for(
                resp.status,
                resp.reason or "",
                path=path,
                body=data.decode(errors="replace"),
                headers=dict(resp.headers),
            )
        API_ERRORS.labels(status=str(error.status), verb=verb).inc()
        renewable = isinstance(api, Client) and isinstance(error, Unauthorized) and attempt == 0
        if renewable and await cast(Client, api).renew():
            continue  # the new credentials, once
        if isinstance(error, Unauthorized | Forbidden) and isinstance(api, Client):
            api.auth.refused(error, verb)
        raise error
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


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
    """One API request; returns the decoded JSON body. Errors: `kubeapi.errors`."""
    params = dict(query or {})
    if field_manager and method in ("POST", "PUT", "PATCH"):
        params["fieldManager"] = field_manager
    headers = {"Content-Type": content_type, "Accept": accept}
    data = await _body(api, method, path, params, headers, body, timeout)
    result: dict[str, Any] = json.loads(data) if data else {}
    return result


async def request_bytes(
    api: client.ApiClient, path: str, *, query: dict[str, str] | None = None, timeout: float = 30.0
) -> bytes:
    """A JSON GET's body undecoded (for a caller that decodes it elsewhere, e.g. in a thread)."""
    headers = {"Content-Type": JSON, "Accept": JSON}
    return await _body(api, "GET", path, dict(query or {}), headers, None, timeout)


async def _body(
    api: client.ApiClient,
    method: str,
    path: str,
    params: dict[str, str],
    headers: dict[str, str],
    body: Any,
    timeout: float,
) -> bytes:
    resp = await open_stream(
        api,
        method,
        path,
        query=list(params.items()),
        headers=headers,
        body=body,
        timeout=timeout,
    )
    try:
        data: bytes = await resp.read()
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise Unreachable(f"{type(exc).__name__}: {exc}", path=path) from exc
    finally:
        resp.release()
    return data


async def answer(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    body: Any = None,
    query: dict[str, str] | None = None,
    content_type: str = JSON,
    timeout: float = 10.0,
) -> tuple[int, str]:
    """A request whose refusal is the expected answer (the admission check's dry runs,
    controller.admission_guard): its HTTP status and the apiserver's message, returned rather
    than raised (status 0: no answer, the message says why). Not counted in
    `vgpu_operator_api_errors_total` nor in the client's `AuthHealth`: a refusal here is the
    answer asked for, not a failure of the process."""
    raw: Any = api
    try:
        resp = await raw.call_api(
            path,
            method,
            query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": JSON},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=timeout,
        )
        try:
            data = await resp.read()
        finally:
            resp.release()
    except ApiException as exc:  # what the library raises itself (not for a status)
        return exc.status or 0, status_message(_text(exc.body)) or str(exc.reason or "")
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return 0, f"no answer: {type(exc).__name__}: {exc}"
    text = data.decode(errors="replace")
    return int(resp.status), status_message(text) or text[:MESSAGE_LIMIT]


def _text(body: Any) -> str:
    if isinstance(body, bytes):
        return body.decode(errors="replace")
    return str(body or "")

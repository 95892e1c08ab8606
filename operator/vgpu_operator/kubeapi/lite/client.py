"""The node agent's Kubernetes client: plain-JSON requests and list-then-watch on asyncio streams
and ssl (`kubeapi.lite.http`), with what the controller's client (`kubeapi.request`) does around
each request:

- the `kubeapi.errors` tree from the HTTP status (one table, `error_for`), the apiserver's own
  message; no answer (refused, reset, timed out, a broken response) is `Unreachable`;
- on a 401 the token is loaded again (`kubeapi.lite.config.Token`) and the request retried
  once; a 401 or 403 that persists is recorded in `auth` (`kubeapi.auth.AuthHealth`: logged,
  exported, failing the liveness probe after its bound);
- failed requests counted in `vgpu_operator_api_errors_total`, refused credentials in
  `vgpu_operator_api_auth_failing_seconds`, watch restarts in
  `vgpu_operator_watch_restarts_total` (`vgpu_operator.exposition`);
- list-then-watch with `kubeapi.reflector`'s semantics, the one the controller's client has.

Connections are kept alive and reused (at most `pool_size` idle, none idle for longer than
IDLE_SECONDS: below the apiserver's own idle timeout, so a reused connection is rarely one the
server has just closed); a GET that finds its reused connection closed before any answer is
sent again once on a fresh one. A watch holds its own connection for its duration.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import urlencode

from vgpu_operator.exposition import Counter, Gauge
from vgpu_operator.kubeapi import reflector
from vgpu_operator.kubeapi.auth import AUTH_FAILING_HELP, AUTH_FAILING_NAME, AuthHealth
from vgpu_operator.kubeapi.errors import (
    API_ERRORS_HELP,
    API_ERRORS_NAME,
    Forbidden,
    Unauthorized,
    Unreachable,
    error_for,
)
from vgpu_operator.kubeapi.lite.config import Settings
from vgpu_operator.kubeapi.lite.http import Connection, ProtocolError, Response
from vgpu_operator.kubeapi.reflector import Listing, WatchEvent, WatchOptions
from vgpu_operator.kubeapi.resources import JSON
from vgpu_operator.kubeapi.resources import verb as request_verb

API_ERRORS = Counter(API_ERRORS_NAME, API_ERRORS_HELP, ["status", "verb"])
AUTH_FAILING = Gauge(AUTH_FAILING_NAME, AUTH_FAILING_HELP)
WATCH_RESTARTS = Counter(
    reflector.WATCH_RESTARTS_NAME, reflector.WATCH_RESTARTS_HELP, ["kind", "reason"]
)

IDLE_SECONDS = 30.0  # a kept-alive connection idle longer is closed, not reused
CONNECT_TIMEOUT = 30.0  # seconds to connect (TLS included) for a watch
# What a lost connection or a broken answer raises (mapped to Unreachable).
TRANSPORT_ERRORS = (
    OSError,
    TimeoutError,
    ProtocolError,
    asyncio.IncompleteReadError,
    asyncio.LimitOverrunError,
)


class LiteClient:
    """`async with LiteClient(settings, user_agent=...) as api:` then `request` and
    `list_watch`; closing closes its connections."""

    failures: tuple[type[BaseException], ...] = ()  # reflector.Transport: all are Unreachable

    def __init__(
        self,
        settings: Settings,
        *,
        user_agent: str,
        auth: AuthHealth | None = None,
        pool_size: int = 4,
    ) -> None:
        self.settings = settings
        self.user_agent = user_agent
        self.auth = auth if auth is not None else AuthHealth()
        if self.auth.export is None:
            self.auth.export = AUTH_FAILING.set
        self.pool_size = pool_size
        self._idle: list[Connection] = []

    async def __aenter__(self) -> LiteClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # --- requests ---------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = JSON,
        field_manager: str | None = None,
        timeout: float = 30.0,
        accept: str = JSON,
    ) -> dict[str, Any]:
        """One API request; the decoded JSON body. Errors: `kubeapi.errors`."""
        params = dict(query or {})
        if field_manager and method in ("POST", "PUT", "PATCH"):
            params["fieldManager"] = field_manager
        data = json.dumps(body).encode() if body is not None else None
        try:
            async with asyncio.timeout(timeout):
                conn, resp = await self._open(
                    method, path, list(params.items()), data, content_type, accept, timeout, None
                )
                try:
                    raw = await resp.read()
                except BaseException:
                    conn.close()
                    raise
                self._release(conn, resp)
        except TimeoutError as exc:
            API_ERRORS.labels(status="0", verb=request_verb(method, list(params.items()))).inc()
            raise Unreachable(f"no answer in {timeout:g}s", path=path) from exc
        except TRANSPORT_ERRORS as exc:
            raise Unreachable(f"{type(exc).__name__}: {exc}", path=path) from exc
        result: dict[str, Any] = json.loads(raw) if raw else {}
        return result

    async def _open(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: bytes | None,
        content_type: str,
        accept: str,
        connect_timeout: float,
        read_timeout: float | None,
    ) -> tuple[Connection, Response]:
        """Send the request and read its answer's head: a 2xx answer with its connection (the
        caller reads the body, then releases or closes); any other status raised as its error
        (a 401 first renews the token and retries once)."""
        verb = request_verb(method, query)
        target = path + (f"?{urlencode(query)}" if query else "")
        for attempt in (0, 1):
            try:
                conn, resp = await self._exchange(
                    method, target, body, content_type, accept, connect_timeout, read_timeout
                )
            except TRANSPORT_ERRORS as exc:
                if isinstance(exc, TimeoutError):
                    raise  # counted by the caller that set the bound
                API_ERRORS.labels(status="0", verb=verb).inc()
                raise Unreachable(f"{type(exc).__name__}: {exc}", path=path) from exc
            if 200 <= resp.status <= 299:
                self.auth.accepted()
                return conn, resp
            try:
                text = (await resp.read(1024 * 1024)).decode(errors="replace")
                self._release(conn, resp)
            except TRANSPORT_ERRORS:
                conn.close()
                text = ""
            error = error_for(resp.status, resp.reason, path=path, body=text, headers=resp.headers)
            API_ERRORS.labels(status=str(error.status), verb=verb).inc()
            if isinstance(error, Unauthorized) and attempt == 0 and self.settings.token.renew():
                continue  # the new token, once
            if isinstance(error, Unauthorized | Forbidden):
                self.auth.refused(error, verb)
            raise error
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _exchange(
        self,
        method: str,
        target: str,
        body: bytes | None,
        content_type: str,
        accept: str,
        connect_timeout: float,
        read_timeout: float | None,
    ) -> tuple[Connection, Response]:
        headers = [("User-Agent", self.user_agent), ("Accept", accept)]
        if body is not None:
            headers.append(("Content-Type", content_type))
        token = self.settings.token.current()
        if token:
            headers.append(("Authorization", f"Bearer {token}"))
        endpoint = self.settings.endpoint
        while True:
            conn = self._reuse()
            fresh = conn is None
            if conn is None:
                conn = await Connection.open(endpoint, connect_timeout)
            try:
                await conn.send(method, target, endpoint.authority, headers, body)
                return conn, await conn.response(method, read_timeout)
            except BaseException as exc:
                conn.close()
                closed_early = isinstance(exc, ConnectionError | asyncio.IncompleteReadError)
                if fresh or method != "GET" or not closed_early:
                    raise
                # a kept-alive connection the server had closed: a GET is sent again, fresh

    def _reuse(self) -> Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.close()
        return None

    def _release(self, conn: Connection, resp: Response) -> None:
        if (
            resp.complete
            and resp.keep_alive
            and not conn.closed
            and len(self._idle) < self.pool_size
        ):
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()

    # --- list-then-watch (reflector.Transport) -----------------------------------------------

    async def get_json(self, path: str, query: dict[str, str], timeout: float) -> dict[str, Any]:
        return await self.request("GET", path, query=query, timeout=timeout)

    async def watch_lines(
        self, path: str, query: list[tuple[str, str]], seconds: int
    ) -> AsyncIterator[bytes]:
        # No total bound: a watch is meant to last. A silent connection is a dead one.
        read_timeout = seconds + 30.0
        try:
            conn, resp = await self._open(
                "GET", path, query, None, JSON, JSON, CONNECT_TIMEOUT, read_timeout
            )
        except TimeoutError as exc:
            API_ERRORS.labels(status="0", verb="watch").inc()
            raise Unreachable(f"no answer in {read_timeout:g}s", path=path) from exc
        try:
            async for line in resp.lines(reflector.MAX_LINE):
                yield line
        except TRANSPORT_ERRORS as exc:
            conn.close()
            raise Unreachable(f"watch ended: {type(exc).__name__}: {exc}", path=path) from exc
        except BaseException:
            conn.close()  # cancelled or failed mid-stream: the connection is not reused
            raise
        self._release(conn, resp)

    def list_watch(
        self,
        path: str,
        options: WatchOptions = reflector.DEFAULT_OPTIONS,
        *,
        since: str | None = None,
    ) -> AsyncIterator[Listing | WatchEvent]:
        """List, then watch from the listing's version, forever (`kubeapi.reflector`)."""
        return reflector.list_watch(self, path, options, since=since, restarted=_restarted)


def _restarted(kind: str, reason: str) -> None:
    WATCH_RESTARTS.labels(kind=kind, reason=reason).inc()

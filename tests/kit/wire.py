"""A scripted HTTP server on 127.0.0.1 that answers as the apiserver does on the wire: JSON
bodies, metav1.Status errors, and watch streams of JSON lines. The seam (`kubeapi`) is tested
against it at the HTTP level; its behaviour with a real apiserver is in tests/cluster."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client

from vgpu_operator.kubeapi import Client

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def status(code: int, message: str, reason: str = "") -> dict[str, Any]:
    """A metav1.Status body, as the apiserver sends with an error."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def error(code: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(status(code, message), status=code, headers=headers)


async def stream(request: web.Request, events: list[dict[str, Any]]) -> web.StreamResponse:
    """A watch response: one JSON line per event, then the end of the stream."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    for event in events:
        await resp.write(json.dumps(event).encode() + b"\n")
    await resp.write_eof()
    return resp


@dataclass
class Wire:
    """Routes `METHOD path` to a handler; every request is recorded."""

    routes: dict[str, Handler] = field(default_factory=dict)
    requests: list[web.Request] = field(default_factory=list)
    url: str = ""

    def on(self, method: str, path: str, handler: Handler) -> None:
        self.routes[f"{method} {path}"] = handler

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request)
        handler = self.routes.get(f"{request.method} {request.path}")
        if handler is None:
            return error(404, f"no route {request.method} {request.path}")
        return await handler(request)

    def client(self, **kwargs: Any) -> Client:
        cfg = client.Configuration()
        cfg.host = self.url
        cfg.api_key = {"BearerToken": "Bearer first"}
        return Client(cfg, **kwargs)


async def serve() -> AsyncIterator[Wire]:
    wire = Wire()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", wire._dispatch)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    wire.url = f"http://127.0.0.1:{port}"
    try:
        yield wire
    finally:
        await runner.cleanup()

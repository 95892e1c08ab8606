"""An intermediary between a client and the real apiserver, for the cluster tests of what a load
balancer or an API gateway may answer: a reverse proxy (aiohttp, in the test's event loop) that
forwards every request to the apiserver as it is, watches streamed as they come, and answers
the requests a `Refusal` matches itself, a few times, with the status, headers and message the
test chose. The client is given a kubeconfig that points at the proxy (plain HTTP on
127.0.0.1, the same bearer token), and the proxy reaches the apiserver over TLS with its CA."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from vgpu_devcluster.cluster import free_port
from vgpu_devcluster.kubeconfigs import cluster_entry, write

# Hop-by-hop headers (RFC 9110 section 7.6.1) and the ones aiohttp sets for the body it sends.
HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "host", "content-length"}
)


@dataclass
class Refusal:
    """Answer `times` requests of `method` on `path` with `status`, `headers` and a Kubernetes
    Status carrying `message`; `answered` counts them."""

    method: str
    path: str
    status: int
    headers: dict[str, str]
    message: str
    times: int = 1
    answered: int = 0

    def matches(self, request: web.Request) -> bool:
        return (
            self.answered < self.times
            and request.method == self.method
            and request.path == self.path
        )

    def response(self) -> web.Response:
        self.answered += 1
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": "TooManyRequests" if self.status == 429 else "InternalError",
            "code": self.status,
        }
        return web.Response(
            status=self.status,
            headers=self.headers,
            text=json.dumps(body),
            content_type="application/json",
        )


@dataclass
class ApiProxy:
    """The proxy in front of the apiserver a kubeconfig names (`start`, `stop`)."""

    upstream: str
    tls: ssl.SSLContext | bool
    refusals: list[Refusal] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None

    @classmethod
    def for_kubeconfig(cls, kubeconfig: Path, refusals: list[Refusal]) -> ApiProxy:
        cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
        ca = cluster.get("certificate-authority")
        tls: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if ca else False
        return cls(upstream=str(cluster["server"]).rstrip("/"), tls=tls, refusals=refusals)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, original: Path, path: Path) -> Path:
        """`original` (its user and context) with the cluster's server the proxy."""
        content: dict[str, Any] = yaml.safe_load(original.read_text())
        for entry in content["clusters"]:
            entry["cluster"] = cluster_entry(self.url, None)
        return write(path, content)

    async def start(self) -> ApiProxy:
        # No timeout: a watch stays open for as long as the client keeps it; the body is passed
        # through as the apiserver sent it (compressed or not).
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        for refusal in self.refusals:
            if refusal.matches(request):
                return refusal.response()
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        body = await request.read()
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=body or None,
            ssl=self.tls,
            skip_auto_headers=("Accept-Encoding",),  # only what the client asked for
        ) as upstream:
            out = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP},
            )
            await out.prepare(request)
            async for chunk in upstream.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

"""A process's HTTP endpoints (liveness, metrics) on asyncio's own server: GET of a few fixed
paths, one answer per connection, standard library only.

The node agent runs on every GPU node, so its liveness probe and its metrics cost it no web
framework (aiohttp is about 23 MiB of resident memory, prometheus_client's server thread pulls in
http.server and more: bench/agent_cost.py). What the clients send is small and fixed: the
kubelet's probe and Prometheus' scrape, each a GET without a body; every answer closes its
connection (`Connection: close`), as prometheus_client's own server does (HTTP/1.0 handler). A
client that sends nothing, or more than a request head of MAX_HEAD bytes, is dropped after
READ_TIMEOUT seconds or at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass

log = logging.getLogger("vgpu_operator.endpoints")

READ_TIMEOUT = 10.0  # seconds for a client to send its request head
MAX_HEAD = 16 * 1024  # bytes of request line and headers


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes


Route = Callable[[], Answer]  # what GET of a path answers, computed per request

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
}


class Server:
    """The running server; `await server.cleanup()` stops it."""

    def __init__(self, server: asyncio.Server) -> None:
        self._server = server

    @property
    def port(self) -> int:
        return int(self._server.sockets[0].getsockname()[1])

    async def cleanup(self) -> None:
        self._server.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await self._server.wait_closed()


async def serve(host: str, port: int, routes: Mapping[str, Route]) -> Server:
    """Serve GET of each path in `routes` on host:port (port 0: any free one)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            answer = _route(head, routes)
            writer.write(_response(answer))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            pass  # the client went away, sent too much, or too slowly: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, host, port, limit=MAX_HEAD)
    return Server(server)


def _route(head: bytes, routes: Mapping[str, Route]) -> Answer:
    request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return Answer(400, "text/plain; charset=utf-8", b"bad request\n")
    method, target = parts[0], parts[1]
    path = urllib.parse.urlsplit(target).path
    route = routes.get(path)
    if route is None:
        return Answer(404, "text/plain; charset=utf-8", f"no {path} here\n".encode())
    if method != "GET":
        return Answer(405, "text/plain; charset=utf-8", b"GET only\n")
    try:
        return route()
    except Exception as exc:  # a failing route is the route's problem, not the server's
        log.exception("GET %s failed", path)
        return Answer(500, "text/plain; charset=utf-8", f"{type(exc).__name__}\n".encode())


def _response(answer: Answer) -> bytes:
    reason = _REASONS.get(answer.status, "")
    head = (
        f"HTTP/1.1 {answer.status} {reason}\r\n"
        f"Content-Type: {answer.content_type}\r\n"
        f"Content-Length: {len(answer.body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + answer.body

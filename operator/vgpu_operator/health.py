"""The liveness endpoint of the controller and the node agent.

`GET /healthz` (or the path of the `--liveness` URL) answers 200 with each check's "ok", or 500
naming the checks that failed and why. A check is a function returning "" when healthy and the
problem otherwise. That the server answers at all shows the event loop is not stuck; the checks
add what a stuck loop would not show: credentials the apiserver has refused for longer than a
bound (`kubeapi.AuthHealth`), a leader that lost its lease. A standby replica is healthy.
Served by asyncio's own server (`vgpu_operator.endpoints`).
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Callable, Mapping

from vgpu_operator.endpoints import Answer, Server
from vgpu_operator.endpoints import serve as serve_endpoints

__all__ = ["Check", "Info", "Server", "answer", "parse_endpoint", "serve"]

log = logging.getLogger("vgpu_operator.health")

Check = Callable[[], str]
Info = Callable[[], object]


def parse_endpoint(url: str) -> tuple[str, int, str]:
    """host, port and path of an `http://HOST:PORT/PATH` liveness URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or parts.port is None:
        raise ValueError(f"liveness endpoint {url!r}: expected http://HOST:PORT/PATH")
    return parts.hostname or "0.0.0.0", parts.port, parts.path or "/healthz"


def answer(checks: Mapping[str, Check], info: Mapping[str, Info] | None = None) -> Answer:
    """Each check's result ("ok" or its problem), and `info`'s values; 500 if any failed."""
    results = {name: check() for name, check in checks.items()}
    failed = {name: problem for name, problem in results.items() if problem}
    body: dict[str, object] = {name: problem or "ok" for name, problem in results.items()}
    body.update({name: value() for name, value in (info or {}).items()})
    if failed:
        log.warning("liveness check failed: %s", failed)
    return Answer(500 if failed else 200, "application/json", json.dumps(body).encode())


async def serve(
    url: str, checks: Mapping[str, Check], info: Mapping[str, Info] | None = None
) -> Server:
    """Start serving; `await server.cleanup()` stops. `info` adds values to the answer
    (e.g. the reconciler's pass count, which the benchmark reads)."""
    host, port, path = parse_endpoint(url)
    return await serve_endpoints(host, port, {path: lambda: answer(checks, info)})

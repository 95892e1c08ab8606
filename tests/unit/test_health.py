"""The liveness endpoint (`health`) on asyncio's own server (`endpoints`), asked as the kubelet
and Prometheus ask over a real socket: each check's "ok" or its problem (200 or 500), the
agent's metrics page, 404 and 405 for what is not served, and a client that never finishes its
request dropped after the bound."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest

from vgpu_operator import endpoints, health
from vgpu_operator.agent import metrics


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


async def test_healthz_answers_each_check_and_fails_with_the_problem() -> None:
    problem = [""]
    server = await health.serve(
        "http://127.0.0.1:0/healthz", {"credentials": lambda: problem[0]}, {"passes": lambda: 3}
    )
    url = f"http://127.0.0.1:{server.port}/healthz"
    try:
        code, kind, body = await asyncio.to_thread(get, url)
        assert (code, kind, json.loads(body)) == (
            200,
            "application/json",
            {"credentials": "ok", "passes": 3},
        )
        problem[0] = "refused for 301s: get /api/v1/nodes: 401 Unauthorized"
        code, _, body = await asyncio.to_thread(get, url)
        assert code == 500 and json.loads(body)["credentials"] == problem[0]
        code, _, _ = await asyncio.to_thread(get, f"http://127.0.0.1:{server.port}/other")
        assert code == 404
    finally:
        await server.cleanup()


async def test_the_metrics_page_is_served_and_other_methods_refused() -> None:
    server = await endpoints.serve("127.0.0.1", 0, metrics.ROUTES)
    try:
        code, kind, body = await asyncio.to_thread(get, f"http://127.0.0.1:{server.port}/metrics")
        assert (code, kind) == (200, "text/plain; version=0.0.4; charset=utf-8")
        assert "# TYPE vgpu_operator_agent_state gauge" in body
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        answer = await reader.read()  # the server closes after its answer
        assert answer.startswith(b"HTTP/1.1 405 ")
        writer.close()
    finally:
        await server.cleanup()


async def test_a_client_that_never_ends_its_request_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(endpoints, "READ_TIMEOUT", 0.2)
    server = await endpoints.serve("127.0.0.1", 0, metrics.ROUTES)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /metrics HTTP/1.1\r\n")  # and nothing more
        async with asyncio.timeout(5):
            assert await reader.read() == b""  # closed without an answer
        writer.close()
        code, _, _ = await asyncio.to_thread(get, f"http://127.0.0.1:{server.port}/metrics")
        assert code == 200  # and the server serves on
    finally:
        await server.cleanup()

"""`kubeapi.request` on the wire: the error tree from the HTTP status, the apiserver's message,
Retry-After, renewal and one retry on a 401, and the record of refused credentials."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from tests.kit.wire import Wire, error, serve
from vgpu_operator import kubeapi
from vgpu_operator.kubeapi import AuthHealth


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    async for w in serve():
        yield w


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (400, kubeapi.Invalid),
        (401, kubeapi.Unauthorized),
        (403, kubeapi.Forbidden),
        (404, kubeapi.NotFound),
        (409, kubeapi.Conflict),
        (410, kubeapi.Gone),
        (422, kubeapi.Invalid),
        (429, kubeapi.TooManyRequests),
        (500, kubeapi.ServerError),
        (503, kubeapi.ServerError),
    ],
)
async def test_each_status_raises_its_error_with_the_apiservers_message(
    wire: Wire, code: int, kind: type[kubeapi.ApiError]
) -> None:
    async def answer(_: web.Request) -> web.Response:
        return error(code, f"refused with {code}")

    wire.on("PATCH", "/api/v1/nodes/n", answer)
    async with wire.client() as api:
        with pytest.raises(kind) as err:
            await kubeapi.request(api, "PATCH", "/api/v1/nodes/n", body={})
    assert err.value.status == code
    assert err.value.message == f"refused with {code}"
    assert isinstance(err.value, kubeapi.ApiError)  # one tree for both clients (kubeapi.lite)
    assert "refused with" in str(err.value) and "/api/v1/nodes/n" in str(err.value)


async def test_retry_after_is_read_from_the_header(wire: Wire) -> None:
    async def slow_down(_: web.Request) -> web.Response:
        return error(429, "webhook asks to slow down", headers={"Retry-After": "5"})

    wire.on("PATCH", "/api/v1/nodes/n", slow_down)
    async with wire.client() as api:
        with pytest.raises(kubeapi.TooManyRequests) as err:
            await kubeapi.request(api, "PATCH", "/api/v1/nodes/n", body={})
    assert err.value.retry_after == 5.0


async def test_no_answer_is_unreachable() -> None:
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback
    async with kubeapi.Client(cfg) as api:
        with pytest.raises(kubeapi.Unreachable) as err:
            await kubeapi.request(api, "GET", "/api/v1/nodes", timeout=5)
    assert err.value.status == 0


async def test_a_401_renews_the_credentials_and_retries_once(wire: Wire) -> None:
    seen: list[str] = []

    async def nodes(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer second":
            return error(401, "Unauthorized")
        return web.json_response({"items": []})

    renewals = 0

    async def renew(cfg: client.Configuration) -> bool:
        nonlocal renewals
        renewals += 1
        cfg.api_key["BearerToken"] = "Bearer second"
        return True

    wire.on("GET", "/api/v1/nodes", nodes)
    async with wire.client(renew=renew) as api:
        assert await kubeapi.request(api, "GET", "/api/v1/nodes") == {"items": []}
        assert await kubeapi.request(api, "GET", "/api/v1/nodes") == {"items": []}
        assert api.auth.healthy() and api.auth.failing_since is None
    assert seen == ["Bearer first", "Bearer second", "Bearer second"]
    assert renewals == 1


async def test_a_401_that_persists_is_raised_after_one_retry_and_recorded(wire: Wire) -> None:
    calls = 0

    async def nodes(_: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        return error(401, "Unauthorized")

    async def renew(cfg: client.Configuration) -> bool:
        cfg.api_key["BearerToken"] = f"Bearer try-{calls}"
        return True

    now = [100.0]
    health = AuthHealth(bound=60.0, clock=lambda: now[0])
    wire.on("GET", "/api/v1/nodes", nodes)
    async with wire.client(renew=renew, auth=health) as api:
        with pytest.raises(kubeapi.Unauthorized):
            await kubeapi.request(api, "GET", "/api/v1/nodes")
        assert calls == 2  # the request, and one retry with the renewed token
        assert health.healthy()  # refused, but not yet for longer than the bound
        now[0] += 61
        with pytest.raises(kubeapi.Unauthorized):
            await kubeapi.request(api, "GET", "/api/v1/nodes")
        assert not health.healthy()
        assert "get /api/v1/nodes: 401 Unauthorized" in health.problem()


async def test_any_success_clears_a_refusal(wire: Wire) -> None:
    allowed = False

    async def nodes(_: web.Request) -> web.Response:
        return web.json_response({}) if allowed else error(403, "nodes is forbidden")

    now = [0.0]
    health = AuthHealth(bound=1.0, clock=lambda: now[0])
    wire.on("GET", "/api/v1/nodes", nodes)
    async with wire.client(auth=health) as api:
        with pytest.raises(kubeapi.Forbidden):
            await kubeapi.request(api, "GET", "/api/v1/nodes")
        now[0] = 5.0
        assert not health.healthy() and "forbidden" in health.problem()
        allowed = True
        await kubeapi.request(api, "GET", "/api/v1/nodes")
        assert health.healthy() and health.problem() == ""

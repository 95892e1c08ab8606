"""`kubeapi.lite` (the node agent's client) on the wire, against an HTTPS server writing the
apiserver's bytes (tests/kit/rawapi.py): bodies by Content-Length and chunked (cut anywhere,
with extensions and trailers), keep-alive and its end, the error tree from each Status, a 401
that renews the token, the field manager on writes, and list-then-watch over a chunked stream
with bookmarks, 410 and a broken stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.kit.rawapi import (
    LAST_CHUNK,
    RawApi,
    Request,
    bookmark,
    chunk,
    chunked_head,
    conflict,
    event,
    expired,
    forbidden,
    kubeconfig,
    not_found,
    serve,
    whole,
)
from vgpu_operator import kubeapi
from vgpu_operator.exposition import REGISTRY
from vgpu_operator.kubeapi.lite import LiteClient, load
from vgpu_operator.kubeapi.source import Source

NODE = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n1", "resourceVersion": "7"}}


@pytest.fixture
async def raw(tmp_path: Path) -> AsyncIterator[RawApi]:
    async for api in serve(tmp_path):
        yield api


def client(raw: RawApi, token: str = "first", **kwargs: Any) -> LiteClient:
    source = Source(kubeconfig=str(kubeconfig(raw, {"token": token})))
    return LiteClient(load(source), user_agent="test-agent/n1", **kwargs)


async def test_a_get_reads_the_json_and_keeps_the_connection(raw: RawApi) -> None:
    raw.answer("GET", "/api/v1/nodes/n1", whole(200, NODE))
    async with client(raw) as api:
        assert await api.request("GET", "/api/v1/nodes/n1") == NODE
        assert await api.request("GET", "/api/v1/nodes/n1") == NODE
    first, second = raw.requests
    assert (first.connection, second.connection) == (1, 1)  # kept alive, reused
    assert first.headers["authorization"] == "Bearer first"
    assert first.headers["user-agent"] == "test-agent/n1"
    assert first.headers["host"] == f"127.0.0.1:{raw.port}"
    assert "accept-encoding" not in first.headers  # identity: nothing to decompress


async def test_a_chunked_body_is_put_together_however_it_is_cut(raw: RawApi) -> None:
    data = json.dumps(NODE).encode()
    pieces = [data[i : i + 3] for i in range(0, len(data), 3)]
    body = b"".join(chunk(p, ";name=value" if i == 1 else "") for i, p in enumerate(pieces))
    raw.answer("GET", "/api/v1/nodes/n1", chunked_head() + body + b"0\r\nX-Trailer: t\r\n\r\n")
    async with client(raw) as api:
        assert await api.request("GET", "/api/v1/nodes/n1") == NODE
        assert await api.request("GET", "/api/v1/nodes/n1") == NODE
    assert [r.connection for r in raw.requests] == [1, 1]  # the trailer ended the message


async def test_connection_close_is_not_reused(raw: RawApi) -> None:
    raw.answer("GET", "/api/v1/nodes/n1", whole(200, NODE, close=True))
    async with client(raw) as api:
        await api.request("GET", "/api/v1/nodes/n1")
        await api.request("GET", "/api/v1/nodes/n1")
    assert [r.connection for r in raw.requests] == [1, 2]


async def test_a_get_on_a_connection_the_server_closed_is_sent_again(raw: RawApi) -> None:
    """The server ends a kept-alive connection without answering (its idle timeout, as it
    reads the next request): the GET goes again on a fresh connection."""
    answered = 0

    async def once_per_connection(_: Request, writer: asyncio.StreamWriter) -> bool:
        nonlocal answered
        answered += 1
        if answered == 2:
            return False  # closes this connection without an answer
        writer.write(whole(200, NODE))
        await writer.drain()
        return True

    raw.on("GET", "/api/v1/nodes/n1", once_per_connection)
    async with client(raw) as api:
        await api.request("GET", "/api/v1/nodes/n1")
        assert await api.request("GET", "/api/v1/nodes/n1") == NODE
    assert [r.connection for r in raw.requests] == [1, 1, 2]


@pytest.mark.parametrize(
    ("answer", "kind", "message"),
    [
        (whole(404, not_found("n1")), kubeapi.NotFound, 'nodes "n1" not found'),
        (whole(409, conflict("n1")), kubeapi.Conflict, "the object has been modified"),
        (whole(410, expired(5, 10)), kubeapi.Gone, "too old resource version: 5 (10)"),
        (whole(403, forbidden("n1")), kubeapi.Forbidden, "cannot patch resource"),
    ],
)
async def test_each_status_raises_its_error_with_the_apiservers_message(
    raw: RawApi, answer: bytes, kind: type[kubeapi.ApiError], message: str
) -> None:
    raw.answer("PATCH", "/api/v1/nodes/n1", answer)
    raw.answer("GET", "/api/v1/nodes/n1", whole(200, NODE))
    async with client(raw) as api:
        with pytest.raises(kind) as err:
            await api.request("PATCH", "/api/v1/nodes/n1", body={"metadata": {}})
        assert message in err.value.message
        assert err.value.path == "/api/v1/nodes/n1"
        await api.request("GET", "/api/v1/nodes/n1")  # the error's body was read: reused
    assert [r.connection for r in raw.requests] == [1, 1]
    counted = _sample("vgpu_operator_api_errors_total", status=str(err.value.status), verb="patch")
    assert counted >= 1


async def test_a_forbidden_verb_is_recorded_and_exported_until_a_success(raw: RawApi) -> None:
    now = [0.0]
    health = kubeapi.AuthHealth(bound=10.0, clock=lambda: now[0])
    refused = whole(403, forbidden("n1"))
    raw.answer("PATCH", "/api/v1/nodes/n1", refused, refused, whole(200, NODE))
    async with client(raw, auth=health) as api:
        for at in (0.0, 11.0):
            now[0] = at
            with pytest.raises(kubeapi.Forbidden):
                await api.request("PATCH", "/api/v1/nodes/n1", body={})
        assert "patch /api/v1/nodes/n1: 403" in health.problem()
        assert _sample("vgpu_operator_api_auth_failing_seconds") == 11.0
        await api.request("PATCH", "/api/v1/nodes/n1", body={})
        assert health.healthy() and health.problem() == ""
        assert _sample("vgpu_operator_api_auth_failing_seconds") == 0.0


async def test_a_401_reads_the_token_again_and_retries_once(raw: RawApi, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")  # a token file ends in a newline: trimmed

    async def nodes(request: Request, writer: asyncio.StreamWriter) -> bool:
        ok = request.headers.get("authorization") == "Bearer second"
        writer.write(whole(200, NODE) if ok else whole(401, _unauthorized()))
        await writer.drain()
        return True

    raw.on("GET", "/api/v1/nodes/n1", nodes)
    source = Source(kubeconfig=str(kubeconfig(raw, {"tokenFile": str(token)})))
    async with LiteClient(load(source), user_agent="t") as api:
        with pytest.raises(kubeapi.Unauthorized):  # the file has not changed: one retry only
            await api.request("GET", "/api/v1/nodes/n1")
        token.write_text("second")  # the kubelet rotated the projected token
        assert await api.request("GET", "/api/v1/nodes/n1") == NODE
    auths = [r.headers["authorization"] for r in raw.requests]
    assert auths == ["Bearer first", "Bearer first", "Bearer second"]


async def test_writes_carry_the_field_manager_and_content_type(raw: RawApi) -> None:
    raw.answer("PATCH", "/api/v1/nodes/n1", whole(200, NODE))
    raw.answer("POST", "/api/v1/namespaces/default/events", whole(201, {"kind": "Event"}))
    async with client(raw) as api:
        await api.request(
            "PATCH",
            "/api/v1/nodes/n1",
            body={"metadata": {"labels": {"a": "b"}}},
            content_type=kubeapi.MERGE_PATCH,
            field_manager="vgpu-operator-agent",
        )
        await api.request("POST", "/api/v1/namespaces/default/events", body={}, field_manager="m")
    patch, post = raw.requests
    assert patch.query == {"fieldManager": "vgpu-operator-agent"}
    assert patch.headers["content-type"] == "application/merge-patch+json"
    assert json.loads(patch.body) == {"metadata": {"labels": {"a": "b"}}}
    assert int(patch.headers["content-length"]) == len(patch.body)
    assert (post.query, post.headers["content-type"]) == ({"fieldManager": "m"}, "application/json")


@pytest.mark.parametrize(
    "broken",
    [
        chunked_head() + b"zz\r\n{}\r\n" + LAST_CHUNK,  # not a chunk size
        chunked_head() + b"5\r\n{}\r\n",  # the connection ends inside a chunk
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\n{}",  # short body
        b"SSH-2.0-OpenSSH\r\n\r\n",  # not HTTP at all
    ],
)
async def test_a_broken_answer_is_unreachable(raw: RawApi, broken: bytes) -> None:
    async def write(_: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(broken)
        await writer.drain()
        return False

    raw.on("GET", "/api/v1/nodes/n1", write)
    async with client(raw) as api:
        with pytest.raises(kubeapi.Unreachable) as err:
            await api.request("GET", "/api/v1/nodes/n1")
    assert err.value.status == 0


async def test_no_answer_in_time_is_unreachable(raw: RawApi) -> None:
    async def silent(_: Request, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(30)
        return False

    raw.on("GET", "/api/v1/nodes/n1", silent)
    async with client(raw) as api:
        with pytest.raises(kubeapi.Unreachable, match=r"no answer in 0\.3s"):
            await api.request("GET", "/api/v1/nodes/n1", timeout=0.3)


# --- list-then-watch ---------------------------------------------------------------------------


def node(rv: str, **labels: str) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": "n1", "resourceVersion": rv, "labels": labels}}


def listing(rv: str, *items: dict[str, Any]) -> bytes:
    return whole(200, {"kind": "NodeList", "metadata": {"resourceVersion": rv}, "items": items})


OPTIONS = kubeapi.WatchOptions(
    field_selector="metadata.name=n1", min_watch_seconds=60, backoff=(0.01, 0.02), kind="node"
)


async def collect(raw: RawApi, count: int) -> list[kubeapi.Listing | kubeapi.WatchEvent]:
    got: list[kubeapi.Listing | kubeapi.WatchEvent] = []
    async with client(raw) as api:
        async with asyncio.timeout(10):
            async for update in api.list_watch("/api/v1/nodes", OPTIONS):
                got.append(update)
                if len(got) == count:
                    break
    return got


class Watches:
    """List answers and watch streams in order; a stream is written event by event, each line
    cut into two chunks (a line never needs to fit a chunk)."""

    def __init__(self, lists: list[bytes], streams: list[list[bytes] | bytes]) -> None:
        self.lists, self.streams = lists, streams

    async def __call__(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        if request.query.get("watch") != "true":
            writer.write(self.lists.pop(0))
            await writer.drain()
            return True
        if not self.streams:
            await asyncio.sleep(30)  # an idle watch
            return False
        step = self.streams.pop(0)
        if isinstance(step, bytes):  # a whole answer (an error status)
            writer.write(step)
            await writer.drain()
            return True
        writer.write(chunked_head())
        for line in step:
            half = len(line) // 2
            writer.write(chunk(line[:half]) + chunk(line[half:]))
            await writer.drain()
        writer.write(LAST_CHUNK)  # the apiserver ends the watch (its timeoutSeconds)
        await writer.drain()
        return True


async def test_lists_then_watches_and_resumes_from_a_bookmark_on_one_connection(
    raw: RawApi,
) -> None:
    watches = Watches(
        [listing("10", node("9"))],
        [
            [event("MODIFIED", node("11", a="1")), bookmark("15")],
            [event("MODIFIED", node("16", a="2"))],
        ],
    )
    raw.on("GET", "/api/v1/nodes", watches)
    first, one, two = await collect(raw, 3)
    assert isinstance(first, kubeapi.Listing) and first.resource_version == "10"
    assert one == kubeapi.WatchEvent("MODIFIED", node("11", a="1"))
    assert two == kubeapi.WatchEvent("MODIFIED", node("16", a="2"))
    watched = [r for r in raw.requests if r.query.get("watch") == "true"]
    assert [r.query["resourceVersion"] for r in watched] == ["10", "15"]
    for r in watched:
        assert r.query["fieldSelector"] == "metadata.name=n1"
        assert r.query["allowWatchBookmarks"] == "true"
        assert 60 <= int(r.query["timeoutSeconds"]) < 120
    assert {r.connection for r in raw.requests} == {1}  # each watch ended cleanly: reused


@pytest.mark.parametrize(
    "gone",
    [[event("ERROR", expired(10, 40))], whole(410, expired(10, 40))],
    ids=["error-event", "status"],
)
async def test_410_lists_again(raw: RawApi, gone: list[bytes] | bytes) -> None:
    before = _sample("vgpu_operator_watch_restarts_total", kind="node", reason="gone")
    watches = Watches(
        [listing("10"), listing("40", node("40"))], [gone, [event("MODIFIED", node("41"))]]
    )
    raw.on("GET", "/api/v1/nodes", watches)
    _, second, modified = await collect(raw, 3)
    assert isinstance(second, kubeapi.Listing) and second.resource_version == "40"
    assert modified == kubeapi.WatchEvent("MODIFIED", node("41"))
    after = _sample("vgpu_operator_watch_restarts_total", kind="node", reason="gone")
    assert after == before + 1


async def test_a_stream_broken_mid_line_resumes_from_the_last_version(raw: RawApi) -> None:
    async def broken(request: Request, writer: asyncio.StreamWriter) -> bool:
        if request.query.get("watch") != "true":
            writer.write(listing("10"))
        elif request.query["resourceVersion"] == "10":
            line = event("ADDED", node("11"))
            writer.write(chunked_head() + chunk(line) + chunk(b'{"type":"MODIF'))
            await writer.drain()
            return False  # the connection drops in the middle of an event
        else:
            writer.write(chunked_head() + chunk(event("MODIFIED", node("12"))) + LAST_CHUNK)
        await writer.drain()
        return True

    raw.on("GET", "/api/v1/nodes", broken)
    _, added, modified = await collect(raw, 3)
    assert added == kubeapi.WatchEvent("ADDED", node("11"))
    assert modified == kubeapi.WatchEvent("MODIFIED", node("12"))
    watched = [r.query["resourceVersion"] for r in raw.requests if r.query.get("watch")]
    assert watched == ["10", "11"]  # resumed, not listed again
    assert sum(1 for r in raw.requests if not r.query.get("watch")) == 1


def _unauthorized() -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }


def _sample(name: str, **labels: str) -> float:
    """The value a scrape of the agent's registry shows (0 when the series is not there)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(REGISTRY.render().decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0

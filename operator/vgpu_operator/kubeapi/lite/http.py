"""HTTP/1.1 over asyncio streams, as much of it as a Kubernetes client needs (RFC 9112): one
request at a time per connection, keep-alive, bodies framed by Content-Length, chunked transfer
coding (the apiserver's watch responses, and any answer whose length it does not know ahead) or
the end of the connection, and the lines of a streamed body. No compression is asked for
(`Accept-Encoding` is not sent: the apiserver answers identity), no HTTP/2 (no ALPN is offered).

Malformed answers raise `ProtocolError` (a ValueError); a lost connection the asyncio and ssl
errors (OSError, `asyncio.IncompleteReadError`); the client maps all of them to `Unreachable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass
from typing import TypeVar

MAX_HEADERS = 100  # header lines of one answer
MAX_CHUNK = 64 * 1024 * 1024  # one chunk of a chunked body
MAX_BODY = 256 * 1024 * 1024  # one whole body read at once (a page of a listing)
NO_BODY = (204, 304)

T = TypeVar("T")


class ProtocolError(ValueError):
    """The peer's bytes are not HTTP/1.1 as RFC 9112 frames it."""


@dataclass(frozen=True)
class Endpoint:
    """Where to connect: host and port, with TLS (`ssl`) or without (None)."""

    host: str
    port: int
    ssl: ssl.SSLContext | None = None
    server_hostname: str | None = None  # the name the certificate must carry (default: host)

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


class Connection:
    """One open connection: a request is written whole, then its response read."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = time.monotonic()

    @classmethod
    async def open(cls, endpoint: Endpoint, timeout: float) -> Connection:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(
                endpoint.host,
                endpoint.port,
                ssl=endpoint.ssl,
                server_hostname=(endpoint.server_hostname or endpoint.host)
                if endpoint.ssl
                else None,
            )
        return cls(reader, writer)

    @property
    def closed(self) -> bool:
        """Closed by us, or by the peer (its end of stream has arrived)."""
        return self.writer.is_closing() or self.reader.at_eof()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()

    async def send(
        self,
        method: str,
        target: str,
        authority: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | None,
    ) -> None:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {authority}"]
        for name, value in headers:
            if any(c in value for c in "\r\n\0") or any(c in name for c in "\r\n\0: "):
                raise ValueError(f"header {name!r}: a control character in the name or value")
            lines.append(f"{name}: {value}")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.writer.write(head + (body or b""))
        await self.writer.drain()

    async def response(self, method: str, read_timeout: float | None) -> Response:
        """The response's status line and headers; its body is read through the Response."""
        status_line = await _timed(self.reader.readuntil(b"\r\n"), read_timeout)
        parts = status_line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
        version, status = parts[0], int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = await _timed(self.reader.readuntil(b"\r\n"), read_timeout)
            if line == b"\r\n":
                break
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep or not name or name != name.strip():
                raise ProtocolError(f"not a header line: {line[:80]!r}")
            key = name.lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        else:
            raise ProtocolError(f"more than {MAX_HEADERS} header lines")
        return Response(self, method, version, status, reason, headers, read_timeout)


class Response:
    """Status, headers (names in lower case), and the body: read whole, or by lines."""

    def __init__(
        self,
        conn: Connection,
        method: str,
        version: str,
        status: int,
        reason: str,
        headers: dict[str, str],
        read_timeout: float | None,
    ) -> None:
        self.conn = conn
        self.status = status
        self.reason = reason
        self.headers = headers
        self.read_timeout = read_timeout
        self.complete = False  # the whole body has been read
        connection = {t.strip() for t in headers.get("connection", "").lower().split(",")}
        persistent = "keep-alive" in connection if version == "HTTP/1.0" else True
        self._framing, self._length = _framing(method, status, headers)
        # The connection can carry the next request once this body is read to its end.
        self.keep_alive = persistent and "close" not in connection and self._framing != "eof"

    async def read(self, limit: int = MAX_BODY) -> bytes:
        body = bytearray()
        async for piece in self.chunks():
            body += piece
            if len(body) > limit:
                raise ProtocolError(f"a body of more than {limit} bytes")
        return bytes(body)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, de-chunked."""
        reader, wait = self.conn.reader, self.read_timeout
        if self._framing == "none":
            pass
        elif self._framing == "length":
            left = self._length
            while left > 0:
                piece = await _timed(reader.read(min(left, 65536)), wait)
                if not piece:
                    raise asyncio.IncompleteReadError(b"", left)
                left -= len(piece)
                yield piece
        elif self._framing == "chunked":
            while True:
                size = _chunk_size(await _timed(reader.readuntil(b"\r\n"), wait))
                if size == 0:
                    # the trailer section, then the empty line that ends the message
                    for _ in range(MAX_HEADERS + 1):
                        if await _timed(reader.readuntil(b"\r\n"), wait) == b"\r\n":
                            break
                    else:
                        raise ProtocolError(f"more than {MAX_HEADERS} trailer lines")
                    break
                yield await _timed(reader.readexactly(size), wait)
                if await _timed(reader.readexactly(2), wait) != b"\r\n":
                    raise ProtocolError("a chunk not followed by CRLF")
        else:  # until the peer closes
            while piece := await _timed(reader.read(65536), wait):
                yield piece
        self.complete = True

    async def lines(self, max_line: int) -> AsyncIterator[bytes]:
        """The body's lines (each with its newline; the last may lack it), however the chunks
        cut them; a line longer than `max_line` raises ProtocolError."""
        pending = bytearray()
        async for piece in self.chunks():
            pending += piece
            start = 0
            while (end := pending.find(b"\n", start)) >= 0:
                yield bytes(pending[start : end + 1])
                start = end + 1
            del pending[:start]
            if len(pending) > max_line:
                raise ProtocolError(f"a line of more than {max_line} bytes")
        if pending:
            yield bytes(pending)


def _framing(method: str, status: int, headers: dict[str, str]) -> tuple[str, int]:
    """How the body ends (RFC 9112 section 6.3): none, length, chunked or eof."""
    if method == "HEAD" or status in NO_BODY or 100 <= status < 200:
        return "none", 0
    coding = headers.get("transfer-encoding")
    if coding is not None:
        if coding.lower().rsplit(",", 1)[-1].strip() != "chunked":
            return "eof", 0  # another coding last: the body ends with the connection
        return "chunked", 0
    length = headers.get("content-length")
    if length is not None:
        values = {v.strip() for v in length.split(",")}
        if len(values) != 1 or not next(iter(values)).isdigit():
            raise ProtocolError(f"Content-Length {length!r}")
        return "length", int(next(iter(values)))
    return "eof", 0


def _chunk_size(line: bytes) -> int:
    text = line[:-2].split(b";", 1)[0].strip()
    if not text or text.strip(b"0123456789abcdefABCDEF"):
        raise ProtocolError(f"a chunk size {line[:40]!r}")
    size = int(text, 16)
    if size > MAX_CHUNK:
        raise ProtocolError(f"a chunk of {size} bytes")
    return size


async def _timed(step: Awaitable[T], seconds: float | None) -> T:
    """One read, bounded: a silent connection is a dead one."""
    if seconds is None:
        return await step
    async with asyncio.timeout(seconds):
        return await step

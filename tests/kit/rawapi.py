"""An in-process HTTPS server on 127.0.0.1 that writes the apiserver's bytes as the script says:
status line, headers, bodies framed by Content-Length or chunked (cut wherever a test wants),
keep-alive or not. The node agent's client (`kubeapi.lite`) is tested against it at the byte
level; its behaviour with a real apiserver is in tests/cluster (test_agent_*.py).

The bodies are the apiserver's (kubernetes/kubernetes@v1.35.4):
- errors are a metav1.Status (staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go:
  NewNotFound, NewConflict, NewForbidden, NewResourceExpired), `status` below;
- a watch answers 200, `Transfer-Encoding: chunked`, one JSON WatchEvent per line, each flushed
  as it is sent (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/watch.go, `ServeHTTP`: the
  JSON framer writes newline-delimited objects); an expired version in the stream is an ERROR
  event carrying that Status with code 410; a bookmark is a BOOKMARK event whose object carries
  only its kind and metadata.resourceVersion.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from vgpu_devcluster.certs import CertKey, generate_ca, issue_client_cert


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names in lower case
    body: bytes
    connection: int  # which connection it came on (1, 2, ...)
    client_cert: dict[str, Any] | None  # the verified client certificate, if one was sent


Handler = Callable[[Request, asyncio.StreamWriter], Awaitable[bool]]  # True: keep the connection


def status(code: int, reason: str, message: str, **details: str) -> dict[str, Any]:
    """A metav1.Status as the apiserver writes it with an error."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def not_found(name: str) -> dict[str, Any]:
    return status(404, "NotFound", f'nodes "{name}" not found', name=name, kind="nodes")


def conflict(name: str) -> dict[str, Any]:
    return status(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        name=name,
        kind="nodes",
    )


def forbidden(name: str, verb: str = "patch") -> dict[str, Any]:
    return status(
        403,
        "Forbidden",
        f'nodes "{name}" is forbidden: User "system:serviceaccount:vgpu-system:'
        f'vgpu-operator-agent" cannot {verb} resource "nodes" in API group "" at the cluster '
        "scope",
        name=name,
        kind="nodes",
    )


def expired(old: int, now: int) -> dict[str, Any]:
    return status(410, "Expired", f"too old resource version: {old} ({now})")


def event(kind: str, obj: dict[str, Any]) -> bytes:
    """One watch line."""
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def bookmark(rv: str) -> bytes:
    return event(
        "BOOKMARK", {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}
    )


def head(code: int, reason: str, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {code} {reason}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def whole(code: int, body: dict[str, Any], *, close: bool = False) -> bytes:
    """An answer with a Content-Length (what the apiserver sends for a small JSON object)."""
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(data))}
    if close:
        headers["Connection"] = "close"
    reasons = {200: "OK", 201: "Created", 401: "Unauthorized", 403: "Forbidden"}
    reasons |= {404: "Not Found", 409: "Conflict", 410: "Gone", 500: "Internal Server Error"}
    return head(code, reasons.get(code, "Status"), headers) + data


def chunk(data: bytes, extension: str = "") -> bytes:
    return f"{len(data):x}{extension}\r\n".encode() + data + b"\r\n"


def chunked_head(code: int = 200) -> bytes:
    return head(code, "OK", {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})


LAST_CHUNK = b"0\r\n\r\n"


@dataclass
class RawApi:
    """Routes `METHOD path` to a handler that writes the answer's bytes itself."""

    directory: Path
    routes: dict[str, Handler] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    port: int = 0
    ca: CertKey | None = None
    client_ca: CertKey | None = None

    def on(self, method: str, path: str, handler: Handler) -> None:
        self.routes[f"{method} {path}"] = handler

    def answer(self, method: str, path: str, *answers: bytes) -> None:
        """Answer each request in turn with the next bytes (the last one again after that)."""
        left = list(answers)

        async def write(_: Request, writer: asyncio.StreamWriter) -> bool:
            data = left.pop(0) if len(left) > 1 else left[0]
            writer.write(data)
            await writer.drain()
            return b"Connection: close" not in data.split(b"\r\n\r\n", 1)[0]

        self.on(method, path, write)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        peer = writer.get_extra_info("peercert")
        try:
            while True:
                try:
                    request_head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                line, *header_lines = request_head.decode("latin-1").split("\r\n")
                method, target, _ = line.split(" ", 2)
                headers = {}
                for h in header_lines:
                    if h:
                        name, _, value = h.partition(":")
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length") or 0))
                url = urlsplit(target)
                request = Request(
                    method, url.path, dict(parse_qsl(url.query)), headers, body, number, peer
                )
                self.requests.append(request)
                handler = self.routes.get(f"{method} {url.path}")
                if handler is None:
                    writer.write(whole(404, status(404, "NotFound", f"no route {url.path}")))
                    await writer.drain()
                    continue
                if not await handler(request, writer):
                    return
        except (ConnectionError, ssl.SSLError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def serving_cert(ca: CertKey, directory: Path) -> CertKey:
    """A serving certificate for 127.0.0.1, signed by `ca`."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    out = CertKey(directory / "serving.crt", directory / "serving.key")
    out.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    return out


async def serve(directory: Path) -> AsyncIterator[RawApi]:
    """The server, with its CA in `api.ca` and a client CA whose certificates it verifies
    (`client_certificate`)."""
    api = RawApi(directory)
    api.ca = generate_ca(directory, "ca", "raw-apiserver-ca")
    api.client_ca = generate_ca(directory, "client-ca", "raw-client-ca")
    serving = serving_cert(api.ca, directory)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(serving.cert, serving.key)
    context.load_verify_locations(cafile=str(api.client_ca.cert))
    context.verify_mode = ssl.CERT_OPTIONAL
    server = await asyncio.start_server(api._serve, "127.0.0.1", 0, ssl=context)
    api.port = server.sockets[0].getsockname()[1]
    try:
        yield api
    finally:
        server.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                await server.wait_closed()


def client_certificate(api: RawApi, user: str) -> CertKey:
    assert api.client_ca is not None
    return issue_client_cert(api.client_ca, api.directory, user, user)


def kubeconfig(api: RawApi, user: dict[str, Any], path: Path | None = None) -> Path:
    """A kubeconfig (JSON) for this server with `user` (token, tokenFile, client-certificate)."""
    assert api.ca is not None
    out = path or api.directory / "kubeconfig"
    out.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "raw",
                        "cluster": {
                            "server": api.server,
                            "certificate-authority": str(api.ca.cert),
                        },
                    }
                ],
                "users": [{"name": "raw", "user": user}],
                "contexts": [{"name": "raw", "context": {"cluster": "raw", "user": "raw"}}],
                "current-context": "raw",
            }
        )
    )
    return out

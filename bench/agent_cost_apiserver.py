"""The local HTTPS stand-in for the apiserver that bench/agent_cost.py measures its processes
against, and a real cluster's connection in its place (`--kubeconfig F --node N`).

It answers as the apiserver does for what these clients ask (GET, list and watch of Nodes with a
field selector, merge PATCH of a Node, POST of Events; a watch stays open, silent, until its
timeoutSeconds) with a bearer token (`TOKEN`), from Nodes in memory, and counts the requests of
each user agent. It runs in the benchmark's process, on threads of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from vgpu_devcluster.certs import self_signed

TOKEN = "bench-agent-cost-token"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def status(code: int, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "code": code}  # fmt: skip


class Apiserver:
    """Nodes in memory, their watch streams, and a count of the requests each client made."""

    def __init__(self, nodes: dict[str, dict[str, str]]) -> None:
        self.lock = threading.Condition()
        self.rv = 1
        self.nodes = {name: self._node(name, ann) for name, ann in nodes.items()}
        self.events: list[tuple[int, str, dict[str, Any]]] = []  # (rv, type, node)
        self.watching: dict[str, int] = {}  # node -> open watches
        self.requests: dict[str, int] = {}  # user agent -> requests
        self.stopped = False

    def _node(self, name: str, annotations: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "resourceVersion": str(self.rv),
                "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
                "annotations": dict(annotations),
            },
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }

    def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            node = merge_patch(self.nodes[name], body)
            self.rv += 1
            node["metadata"]["resourceVersion"] = str(self.rv)
            self.nodes[name] = node
            self.events.append((self.rv, "MODIFIED", copy.deepcopy(node)))
            self.lock.notify_all()
            return node

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            self.lock.notify_all()


def handler_for(api: Apiserver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def reply(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def route(self) -> tuple[str, dict[str, list[str]]] | None:
            agent = self.headers.get("User-Agent", "")
            with api.lock:
                api.requests[agent] = api.requests.get(agent, 0) + 1
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.reply(401, status(401, "Unauthorized"))
                return None
            url = urlsplit(self.path)
            return url.path, parse_qs(url.query)

        def body(self) -> Any:
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def do_GET(self) -> None:
            routed = self.route()
            if routed is None:
                return
            path, query = routed
            if path.startswith("/api/v1/nodes/"):
                name = path.rsplit("/", 1)[1]
                with api.lock:
                    node = copy.deepcopy(api.nodes.get(name))
                if node is None:
                    self.reply(404, status(404, f'nodes "{name}" not found'))
                else:
                    self.reply(200, node)
                return
            if path != "/api/v1/nodes":
                self.reply(404, status(404, "not found"))
                return
            selector = (query.get("fieldSelector") or [""])[0]
            name = selector.removeprefix("metadata.name=")
            if query.get("watch", [""])[0] in ("true", "1"):
                self.watch(name, int(query.get("resourceVersion", ["0"])[0] or 0), query)
                return
            with api.lock:
                items = [copy.deepcopy(api.nodes[name])] if name in api.nodes else []
                listing = {
                    "kind": "NodeList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(api.rv)},
                    "items": items,
                }
            self.reply(200, listing)

        def watch(self, name: str, since: int, query: dict[str, list[str]]) -> None:
            seconds = float((query.get("timeoutSeconds") or ["300"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            deadline = time.monotonic() + seconds
            with api.lock:
                api.watching[name] = api.watching.get(name, 0) + 1
            try:
                while True:
                    with api.lock:
                        fresh = [(rv, t, o) for rv, t, o in api.events if rv > since and
                                 o["metadata"]["name"] == name]  # fmt: skip
                        left = deadline - time.monotonic()
                        if not fresh and not api.stopped and left > 0:
                            api.lock.wait(left)
                            continue
                    if api.stopped or (not fresh and left <= 0):
                        break
                    for rv, kind, obj in fresh:
                        line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                        since = rv
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                self.close_connection = True
            finally:
                with api.lock:
                    api.watching[name] -= 1

        def do_PATCH(self) -> None:
            routed = self.route()
            if routed is None:
                return
            path, _ = routed
            name = path.rsplit("/", 1)[1]
            if not path.startswith("/api/v1/nodes/") or name not in api.nodes:
                self.reply(404, status(404, f'nodes "{name}" not found'))
                return
            body = self.body()
            want = (body.get("metadata") or {}).get("resourceVersion")
            with api.lock:
                current = api.nodes[name]["metadata"]["resourceVersion"]
            if want is not None and want != current:
                self.reply(409, status(409, "the object has been modified"))
                return
            self.reply(200, api.patch(name, body))

        def do_POST(self) -> None:
            routed = self.route()
            if routed is None:
                return
            path, _ = routed
            body = self.body()
            if not path.endswith("/events"):
                self.reply(404, status(404, "not found"))
                return
            self.reply(201, body)

    return Handler


@contextlib.contextmanager
def local_apiserver(directory: Path, nodes: dict[str, dict[str, str]]) -> Iterator[Server]:
    api = Apiserver(nodes)
    cert, key = self_signed(directory, "bench-apiserver", "serving")
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(api))
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="apiserver", daemon=True)
    thread.start()
    token = directory / "token"
    token.write_text(TOKEN + "\n")
    try:
        yield Server(f"https://127.0.0.1:{server.server_address[1]}", cert, token, api=api)
    finally:
        api.stop()
        server.shutdown()
        server.server_close()


@dataclass
class Server:
    """Where the clients connect, with what: a bearer token file, or a client certificate."""

    url: str
    ca: Path
    token: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    api: Apiserver | None = None  # the local one; None for a real cluster
    kubeconfig: Path | None = None

    def floor_words(self, node: str) -> list[str]:
        words = [f"server={self.url}", f"node={node}", f"ca={self.ca}"]
        if self.token:
            words.append(f"token={self.token}")
        if self.cert and self.key:
            words += [f"cert={self.cert}", f"key={self.key}"]
        return words


def cluster_server(kubeconfig: Path, directory: Path) -> Server:
    """A real cluster's connection, from a kubeconfig, for the floors (which read no YAML)."""
    from vgpu_operator.kubeapi.credentials import Credentials

    cfg = asyncio.run(Credentials(kubeconfig=str(kubeconfig)).configuration())
    token = None
    bearer = cfg.api_key.get("BearerToken")
    if bearer:
        token = directory / "floor-token"
        token.write_text(str(bearer).removeprefix("Bearer ").strip())
    if not cfg.ssl_ca_cert:
        raise SystemExit(f"{kubeconfig}: the floors need the cluster's CA (https only)")
    return Server(
        url=str(cfg.host),
        ca=Path(cfg.ssl_ca_cert),
        token=token,
        cert=Path(cfg.cert_file) if cfg.cert_file else None,
        key=Path(cfg.key_file) if cfg.key_file else None,
        kubeconfig=kubeconfig,
    )

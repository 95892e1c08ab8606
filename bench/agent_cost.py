"""The node agent's cost, one run, one table: resident memory and CPU of an idle agent beside two
floors holding one Node watch, and what each of the agent's dependencies costs to import.

Processes, all started together and measured over the same idle window:
- floor, standard library only: `bench/watch_floor.py stdlib` (http.client, ssl, json);
- floor, aiohttp: `bench/watch_floor.py aiohttp` (one ClientSession);
- the agent: `python -m vgpu_operator.commands.cli agent` with the chart's arguments
  (charts/vgpu-operator/templates/agent-daemonset.yaml: resync, retry, nvidia-smi timeout,
  liveness endpoint, metrics port, text logs, `NODE_NAME` from the environment), the fake
  nvidia-smi the tests use (devtools/vgpu_devcluster/fakesmi.py: 8 A100-SXM4-80GB by default)
  and a released static MIG layout (seven 1g.10gb per GPU), which it applies first. No kubelet
  here: `--pod-resources-socket=` (empty). `--agent-tree LABEL=DIR` adds an agent run from
  another copy of the package (DIR holds `vgpu_operator/`, put first on PYTHONPATH): a before
  and an after measured in the same run.
Each is ready once its watch is open (the floors print `watching`; the agent has logged its
first outcome and, on the local server, holds a watch); then `--settle` seconds (default 5),
then the window: resident memory (VmRSS, with the peak VmHWM) at its end, and CPU as utime +
stime (+ children's) from /proc/<pid>/stat at both ends (1/CLK_TCK resolution, 10 ms here).

Imports: a fresh interpreter per row imports one dependency (or the agent's import set: the
modules `vgpu-operator agent` loads before it serves, as agent/cli.py's `run_agent` imports
them), and its VmRSS is compared with a bare interpreter's (the same code, nothing imported);
each the median of `--repeat` interpreters (default 3). The last column says whether the
agent's import set holds that package; grpc must not be there (the kubelet's PodResources call
runs as a subprocess of its own, agent/podresources_call.py), and the running agents' memory
maps are checked for grpc's extension too.

The control plane: by default a local HTTPS server in this process that answers as the
apiserver does for what these clients ask (GET, list and watch of Nodes with a field selector,
merge PATCH of a Node, POST of Events; a watch stays open, silent, until its timeoutSeconds)
with a bearer token; the agent logs in as in a pod, from a ServiceAccount directory
(`VGPU_SERVICEACCOUNT_DIR`, `KUBERNETES_SERVICE_HOST`/`PORT`: kubeapi/source.py's
in-cluster path). `--kubeconfig F --node N` measures against a real cluster instead: the
floors watch node N, the agents run with `--kubeconfig F` against N (it must exist).

Usage: python bench/agent_cost.py [--idle S] [--settle S] [--repeat K] [--gpus N]
                                  [--agent-tree LABEL=DIR ...] [--kubeconfig F --node N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import datetime as dt
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from benchkit import die_with_parent, log, machine, memory
from importkit import ImportCost, base_env, commit, import_rss, versions

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
TOKEN = "bench-agent-cost-token"
GPU_MODEL = "A100-SXM4-80GB"
RELEASED = {
    "mode": "mig",
    "mig": {"partitioning": "static", "layout": [{"gpus": "all", "profiles": {"1g.10gb": 7}}]},
}
READY_SECONDS = 120.0  # each process must be ready within this

# One dependency per row, imported alone; then the agent's set. `vgpu_operator` first installs
# its lazy kubernetes-asyncio client (vgpu_operator/lazy_client.py), as in the agent.
DEPENDENCIES: list[tuple[str, list[str]]] = [
    ("aiohttp", ["aiohttp"]),
    ("pydantic", ["pydantic"]),
    ("prometheus_client", ["prometheus_client"]),
    ("kubernetes_asyncio (its own `__init__`: every API class and model)", ["kubernetes_asyncio"]),
    (
        "kubernetes_asyncio as `vgpu_operator` loads it (its lazy client, as the controller)",
        ["vgpu_operator", "kubernetes_asyncio.client.rest"],
    ),
    ("yaml (PyYAML)", ["yaml"]),
    ("grpc (grpcio)", ["grpc"]),
    ("kopf", ["kopf"]),
    ("aiohttp + pydantic + prometheus_client", ["aiohttp", "pydantic", "prometheus_client"]),
]
PACKAGES = {  # import name -> distribution, for the versions and the "in the set" column
    "aiohttp": "aiohttp",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic-core",
    "prometheus_client": "prometheus-client",
    "kubernetes_asyncio": "kubernetes-asyncio",
    "yaml": "PyYAML",
    "grpc": "grpcio",
    "kopf": "kopf",
}
# What `vgpu-operator agent` imports before it serves: the console script's parser as it is
# built for `agent` (`@cli agent`: vgpu_operator.commands.cli.main(["agent", "--help"]), its
# output dropped), then cmd_agent's and run_agent's imports (agent/cli.py), its metrics server
# included. A tree whose agent has its own standard-library client (`kubeapi/lite`) imports that;
# an older tree (`--agent-tree`) the controller's client, kubernetes-asyncio and prometheus_client.
AGENT_IMPORTS = [
    "@cli agent",
    "vgpu_operator.kubeapi.source",
    "vgpu_operator.kubeapi.lite",
    "vgpu_operator.logs",
    "vgpu_operator.endpoints",
    "vgpu_operator.health",
    "vgpu_operator.agent.kubelet",
    "vgpu_operator.agent.loop",
    "vgpu_operator.agent.nodeapi",
    "vgpu_operator.agent.smi",
    "vgpu_operator.agent.metrics",
]
AGENT_IMPORTS_KUBERNETES_ASYNCIO = [
    "@cli agent",
    "vgpu_operator.kubeapi.credentials",
    "vgpu_operator.logs",
    "vgpu_operator.health",
    "vgpu_operator.agent.kubelet",
    "vgpu_operator.agent.loop",
    "vgpu_operator.agent.nodeapi",
    "vgpu_operator.agent.smi",
    "vgpu_operator.kubeapi",
    "prometheus_client",
    "vgpu_operator.agent.metrics",
]


def agent_imports(tree: Path | None) -> list[str]:
    """The agent's import set for a tree (None: this checkout)."""
    package = (tree or REPO / "operator") / "vgpu_operator"
    lite = (package / "kubeapi" / "lite").is_dir()
    return AGENT_IMPORTS if lite else AGENT_IMPORTS_KUBERNETES_ASYNCIO


# --- the local apiserver ----------------------------------------------------------------------


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


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A serving certificate for 127.0.0.1 (its own CA), and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench-apiserver")])
    now = dt.datetime.now(dt.UTC)
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "serving.crt", directory / "serving.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@contextlib.contextmanager
def local_apiserver(directory: Path, nodes: dict[str, dict[str, str]]) -> Iterator[Server]:
    api = Apiserver(nodes)
    cert, key = self_signed(directory)
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


# --- the processes ----------------------------------------------------------------------------


@dataclass
class Measured:
    label: str
    argv: list[str]
    env: dict[str, str]
    logfile: Path
    ready: Callable[[Measured], bool]
    waiting_for: str
    proc: subprocess.Popen[bytes] | None = None
    cpu_start: float = 0.0
    cpu_end: float = 0.0
    rss: float = 0.0
    peak: float = 0.0
    grpc_mapped: bool | None = None
    node: str | None = None
    state_file: Path | None = None
    notes: list[str] = field(default_factory=list)

    def start(self) -> None:
        with self.logfile.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.logfile.parent,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def output(self) -> str:
        return self.logfile.read_text(errors="replace") if self.logfile.exists() else ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        if self.state_file is not None:
            from vgpu_devcluster import fakesmi_state

            fakesmi_state.kill_strays(self.state_file)


def cpu_seconds(pid: int) -> float:
    """utime + stime + cutime + cstime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK_TCK


def maps_grpc(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return "cygrpc" in Path(f"/proc/{pid}/maps").read_text()
    return False


def floors(server: Server, node: str, directory: Path) -> list[Measured]:
    out = []
    for kind, label in (
        ("stdlib", "floor: standard library only (http.client, ssl), one Node watch"),
        ("aiohttp", "floor: aiohttp, one Node watch"),
    ):
        out.append(
            Measured(
                label=label,
                argv=[
                    sys.executable,
                    str(BENCH / "watch_floor.py"),
                    kind,
                    *server.floor_words(node),
                ],
                env=base_env(),
                logfile=directory / f"floor-{kind}.log",
                ready=lambda m: "watching" in m.output(),
                waiting_for="its watch to open (`watching`)",
            )
        )
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agent(
    label: str, tree: Path | None, node: str, server: Server, directory: Path, gpus: int
) -> Measured:
    from vgpu_devcluster import fakesmi_state
    from vgpu_devcluster.agentproc import FakeGpus

    fake = FakeGpus.create(directory / node, node, GPU_MODEL, gpus)
    env = base_env()
    env["NODE_NAME"] = node
    env[fakesmi_state.ENV_STATE] = str(fake.state)
    env.pop(fakesmi_state.ENV_PID_NAMESPACE, None)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    argv = [
        sys.executable, "-m", "vgpu_operator.commands.cli", "agent",
        "--resync=300", "--retry=30", "--timeout=60",
        f"--liveness=http://127.0.0.1:{free_port()}/healthz",
        "--log-format=text", f"--metrics-port={free_port()}",
        "--pod-resources-socket=", f"--nvidia-smi={fake.binary}",
    ]  # fmt: skip
    if server.kubeconfig is not None:
        argv.append(f"--kubeconfig={server.kubeconfig}")
    else:  # as in a pod: the ServiceAccount directory and the service's address
        sa = directory / f"sa-{node}"
        sa.mkdir()
        (sa / "token").write_text(TOKEN)
        (sa / "ca.crt").write_bytes(server.ca.read_bytes())
        url = urlsplit(server.url)
        env.update(
            VGPU_SERVICEACCOUNT_DIR=str(sa),
            KUBERNETES_SERVICE_HOST=url.hostname or "",
            KUBERNETES_SERVICE_PORT=str(url.port),
            HOME=str(directory),  # no ~/.kube/config to fall back on
        )

    def ready(m: Measured) -> bool:
        if "outcome:" not in m.output():
            return False
        return server.api is None or server.api.watching.get(node, 0) > 0

    return Measured(
        label=f"agent ({label})",
        argv=argv,
        env=env,
        logfile=directory / f"agent-{node}.log",
        ready=ready,
        waiting_for="its first outcome logged and its Node watch open",
        node=node,
        state_file=fake.state,
    )


def wait_ready(processes: list[Measured], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    waiting = list(processes)
    while waiting:
        for m in list(waiting):
            assert m.proc is not None
            if m.proc.poll() is not None:
                raise RuntimeError(
                    f"{m.label} exited ({m.proc.returncode}); its output:\n{m.output()[-3000:]}"
                )
            if m.ready(m):
                log(f"ready: {m.label}")
                waiting.remove(m)
        if waiting and time.monotonic() > deadline:
            m = waiting[0]
            raise RuntimeError(
                f"no end after {seconds:.0f}s: {m.label} was waiting for {m.waiting_for}; "
                f"its output:\n{m.output()[-3000:]}"
            )
        time.sleep(0.1)


def measure(processes: list[Measured], settle: float, idle: float) -> None:
    time.sleep(settle)
    for m in processes:
        m.cpu_start = cpu_seconds(m.pid)
    log(f"idle window: {idle:g}s")
    time.sleep(idle)
    for m in processes:
        m.cpu_end = cpu_seconds(m.pid)
        m.rss, m.peak = memory(m.pid)
        m.grpc_mapped = maps_grpc(m.pid)


# --- the report -------------------------------------------------------------------------------


def report(
    processes: list[Measured],
    bare: float,
    deps: list[tuple[str, ImportCost]],
    agent_sets: list[tuple[str, ImportCost]],
    args: argparse.Namespace,
    control_plane: str,
) -> str:
    lines = [
        f"Date {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}",
        f"Machine: {machine()}",
        f"Versions: {versions(PACKAGES.values())}",
        f"Control plane: {control_plane}; settle {args.settle:g} s, idle window {args.idle:g} s, "
        f"import rows the median of {args.repeat} interpreters",
        "",
        "| process (idle) | RSS MiB | peak MiB | CPU s in the window | % of a core |",
        "|---|---:|---:|---:|---:|",
    ]
    for m in processes:
        cpu = m.cpu_end - m.cpu_start
        lines.append(
            f"| {m.label} | {m.rss:.1f} | {m.peak:.1f} | {cpu:.2f} | {100 * cpu / args.idle:.2f} |"
        )
    lines += [
        "",
        "| imported in a fresh interpreter | RSS MiB | over the bare interpreter MiB | "
        "in the agent's import set |",
        "|---|---:|---:|---|",
        f"| nothing (the bare interpreter) | {bare:.1f} | 0.0 | |",
    ]

    def held_by(root: str) -> str:
        """yes/no for this checkout's agent, then the other trees' in parentheses."""
        answers = [("yes" if root in c.modules else "no", label) for label, c in agent_sets]
        others = "".join(f" ({label}: {yes})" for yes, label in answers[1:])
        return f"{root}: {answers[0][0]}{others}" if answers else ""

    for label, cost in deps:
        roots = {m.split(".")[0] for m in cost.label.split(" + ")} - {"vgpu_operator"}
        held = ", ".join(held_by(r) for r in sorted(roots))
        lines.append(f"| {label} | {cost.rss:.1f} | {cost.rss - bare:.1f} | {held} |")
    for label, cost in agent_sets:
        lines.append(
            f"| the agent's import set ({label}) | {cost.rss:.1f} | {cost.rss - bare:.1f} | |"
        )
    mapped = [m.label for m in processes if m.grpc_mapped]
    lines += [
        "",
        "grpc's extension (cygrpc) mapped in: " + (", ".join(mapped) if mapped else "none"),
    ]
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--idle", type=float, default=30.0, help="seconds of the idle window")
    p.add_argument("--settle", type=float, default=5.0, help="seconds after ready, before it")
    p.add_argument("--repeat", type=int, default=3, help="interpreters per import row")
    p.add_argument("--gpus", type=int, default=8, help="GPUs of each agent's fake node")
    p.add_argument(
        "--agent-tree",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also run an agent from DIR (a directory holding vgpu_operator/)",
    )
    p.add_argument("--kubeconfig", type=Path, help="a real cluster instead of the local server")
    p.add_argument("--node", help="with --kubeconfig: the Node the floors and agents watch")
    p.add_argument("--no-imports", action="store_true", help="skip the import rows")
    args = p.parse_args(argv)
    if args.kubeconfig and not args.node:
        p.error("--kubeconfig needs --node")
    return args


def run(args: argparse.Namespace) -> str:
    trees: list[tuple[str, Path | None]] = [("this checkout", None)]
    for spec in args.agent_tree:
        label, _, directory = spec.partition("=")
        path = Path(directory).resolve()
        if not (path / "vgpu_operator" / "__init__.py").is_file():
            raise SystemExit(f"--agent-tree {spec}: no vgpu_operator/ in {path}")
        trees.append((label, path))
    from vgpu_operator.models.node import NodeConfig

    released = NodeConfig.model_validate(RELEASED).to_annotation()
    from vgpu_operator import contract

    names = [args.node] * len(trees) if args.kubeconfig else [f"gpu-{i}" for i in range(len(trees))]
    floor_node = args.node or "floor-0"
    processes: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="vgpu-bench-agent-") as tmp:
        directory = Path(tmp)
        with contextlib.ExitStack() as stack:
            if args.kubeconfig:
                server = cluster_server(args.kubeconfig, directory)
                control_plane = f"the cluster of {args.kubeconfig}, node {args.node}"
            else:
                nodes = {n: {contract.ANN_CONFIG: released} for n in names}
                nodes[floor_node] = {}
                server = stack.enter_context(local_apiserver(directory, nodes))
                control_plane = (
                    "local HTTPS stand-in for the apiserver (bench/agent_cost.py), the agents "
                    f"in-cluster style; fake nvidia-smi, {args.gpus} x {GPU_MODEL}, a static "
                    "layout of 7 x 1g.10gb per GPU released"
                )
            processes = floors(server, floor_node, directory)
            processes += [
                agent(label, tree, node, server, directory, args.gpus)
                for (label, tree), node in zip(trees, names, strict=True)
            ]
            try:
                for m in processes:
                    m.start()
                wait_ready(processes, READY_SECONDS)
                measure(processes, args.settle, args.idle)
            finally:
                for m in processes:
                    m.stop()
        deps: list[tuple[str, ImportCost]] = []
        agent_sets: list[tuple[str, ImportCost]] = []
        empty = directory / "imports"
        empty.mkdir()
        bare = import_rss([], args.repeat, empty).rss
        if not args.no_imports:
            for label, modules in DEPENDENCIES:
                log(f"imports: {label}")
                deps.append((label, import_rss(modules, args.repeat, empty)))
            for label, tree in trees:
                log(f"imports: the agent's set ({label})")
                modules = agent_imports(tree)
                agent_sets.append((label, import_rss(modules, args.repeat, empty, tree)))
    return report(processes, bare, deps, agent_sets, args, control_plane)


def main(argv: list[str]) -> None:
    args = parse(argv)

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    log(f"machine: {machine()}")
    try:
        print(run(args), flush=True)
    except KeyboardInterrupt:
        print("benchmark stopped by a signal; everything it started is gone", file=sys.stderr)
        sys.exit(1)
    except RuntimeError as exc:
        print(f"agent_cost: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])

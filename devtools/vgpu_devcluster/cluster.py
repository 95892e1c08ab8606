"""A real local control plane: etcd, kube-apiserver, controller manager, scheduler and kwok.

Everything runs as child processes in one temp dir on free loopback ports. The apiserver has real
authentication (a static token per component, so the audit log tells who wrote what, and client
certificates from its own client CA), `--authorization-mode=RBAC`, ServiceAccount signing keys and
an audit log of every write. `restart_apiserver()` restarts it on the same port, certificates,
tokens and etcd.
Teardown stops the clients first, then the apiserver, then etcd, and removes the temp dir; children
started in the foreground also get PR_SET_PDEATHSIG so they die with the process that started them.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vgpu_devcluster import auditlog, binaries, certs, kubeconfigs
from vgpu_devcluster.kubeconfigs import write_kubeconfig as write_kubeconfig

# The writes of an identity in this group are logged with their bodies (level Request). No
# component's identity carries it, so every other write stays at Metadata: a test opts in for
# one client of its own (`LocalCluster.request_audited_kubeconfig`).
AUDIT_REQUEST_GROUP = "vgpu-devcluster:audit-request-bodies"
# Every read of an identity in this group is logged too (level Metadata): the benchmarks give
# it to a client whose reads they count (bench/doctor_scale.py: doctor's and its floor's).
AUDIT_READS_GROUP = "vgpu-devcluster:audit-reads"

AUDIT_POLICY = f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  userGroups: ["{AUDIT_REQUEST_GROUP}"]
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: Metadata
  verbs: ["list"]
  resources:
  - group: ""
    resources: ["pods"]
  - group: "apps"
    resources: ["daemonsets"]
# Every read of the ServiceAccounts in the operator's namespace (the controller's, the agent's):
# the RBAC test checks each call they made against the chart's roles. `audit_events` leaves
# these out unless asked (`reads=True`), so the other tests see writes as before.
- level: Metadata
  verbs: ["get", "list", "watch"]
  userGroups: ["system:serviceaccounts:vgpu-system"]
- level: Metadata
  verbs: ["get", "list", "watch"]
  userGroups: ["{AUDIT_READS_GROUP}"]
- level: None
"""


def _logged_by_default(event: dict[str, Any]) -> bool:
    """Is this an event the policy logs for everyone (writes; lists of pods and DaemonSets)?"""
    verb = event.get("verb")
    if verb not in ("get", "list", "watch"):
        return True
    ref = event.get("objectRef") or {}
    return verb == "list" and (ref.get("apiGroup", ""), ref.get("resource")) in (
        ("", "pods"),
        ("apps", "daemonsets"),
    )


# One identity per component: the audit log can then attribute every write.
IDENTITIES: dict[str, tuple[str, str]] = {
    # name -> (username, groups)
    "admin": ("admin", "system:masters"),
    "kwok": ("kwok", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", "system:masters"),
    "scheduler": ("system:kube-scheduler", "system:masters"),
}

# kwok stages beyond the fast ones: a pod completing after the delay its annotation sets.
DELAYED_POD_STAGES = Path(__file__).parent / "data" / "kwok-stages-delayed.yaml"
STOP_ORDER = ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")
STOP_GRACE = {"kube-apiserver": 20.0, "etcd": 10.0}


class ClusterError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class LocalCluster:
    """A running local control plane. Use `start()`/`stop()` or `with LocalCluster.run():`."""

    workdir: Path
    server: str = ""
    tokens: dict[str, str] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    log: Callable[[str], None] = binaries._stderr_log
    with_scheduler: bool = True
    with_kwok: bool = True
    with_controller_manager: bool = True
    profiling: bool = False  # the apiserver's /debug/pprof (the bench reads its CPU profile)
    # etcd's `--quota-backend-bytes` (0: etcd's default, 2 GiB, etcd-io/etcd@v3.6.5:
    # server/storage/quota.go `DefaultQuotaBytes`); the benchmarks at 10,000 nodes need more.
    etcd_quota_bytes: int = 0
    _apiserver_args: list[str] = field(default_factory=list, repr=False)
    _detach: bool = field(default=False, repr=False)

    # -- paths ------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (system:masters)."""
        return self.workdir / "kubeconfig-admin"

    def kubeconfig_for(self, identity: str) -> Path:
        return self.workdir / f"kubeconfig-{identity}"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    @property
    def ca_file(self) -> Path:
        """The CA a client verifies the apiserver with (its self-signed serving certificate)."""
        return self.workdir / "certs" / "apiserver.crt"

    @property
    def client_ca(self) -> Path:
        """The CA of client certificates (`--client-ca-file`); its key is `client-ca.key`."""
        return self.workdir / "pki" / "client-ca.crt"

    @property
    def client_cert(self) -> Path:
        """An admin client certificate: CN=admin-cert, O=system:masters."""
        return self.workdir / "pki" / "admin-cert.crt"

    @property
    def client_key(self) -> Path:
        return self.workdir / "pki" / "admin-cert.key"

    def issue_client_cert(
        self, name: str, user: str, groups: tuple[str, ...] = ()
    ) -> certs.CertKey:
        """Another client certificate from the client CA (user = CN, groups = O)."""
        ca = certs.CertKey(self.client_ca, self.client_ca.with_suffix(".key"))
        return certs.issue_client_cert(ca, self.workdir / "pki", name, user, groups)

    def request_audited_kubeconfig(
        self, name: str, user: str, groups: tuple[str, ...] = ()
    ) -> Path:
        """A kubeconfig (`kubeconfig-<name>`) for `user` in `groups` whose writes the audit log
        records with their request bodies: a client certificate that also carries
        AUDIT_REQUEST_GROUP. RBAC and admission policies match a ServiceAccount by its user
        name, so with a ServiceAccount's name and groups this is that identity, bodies logged."""
        cert = self.issue_client_cert(name, user, (*groups, AUDIT_REQUEST_GROUP))
        content = kubeconfigs.config(
            kubeconfigs.cluster_entry(self.server, self.ca_file),
            kubeconfigs.cert_files_user(cert.cert, cert.key),
            name=name,
            context=name,
        )
        return kubeconfigs.write(self.workdir / f"kubeconfig-{name}", content)

    # -- lifecycle --------------------------------------------------------------------------
    @classmethod
    @contextlib.contextmanager
    def run(cls, **kwargs: Any) -> Iterator[LocalCluster]:
        cluster = cls.start(**kwargs)
        try:
            yield cluster
        finally:
            cluster.stop()

    @classmethod
    def start(
        cls, *, detach: bool = False, prefix: str = "vgpu-devcluster-", **kwargs: Any
    ) -> LocalCluster:
        bins = binaries.ensure_all(
            names=("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok")
        )
        workdir = Path(tempfile.mkdtemp(prefix=prefix))
        cluster = cls(workdir=workdir, **kwargs)
        try:
            cluster._start(bins, detach=detach)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _spawn(self, name: str, args: list[str], detach: bool, *, append: bool = False) -> None:
        mode = "ab" if append else "wb"
        logf = open(self.workdir / f"{name}.log", mode)  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            args,
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=None if detach else _die_with_parent,
        )
        logf.close()
        self.processes[name] = proc
        self.pids[name] = proc.pid

    def _start(self, bins: dict[str, Path], *, detach: bool) -> None:
        t0 = time.monotonic()
        d = self.workdir
        (d / "certs").mkdir()
        (d / "pki").mkdir()
        certs.generate_sa_keys(d)
        client_ca = certs.generate_ca(d / "pki", "client-ca", "vgpu-devcluster-client-ca")
        self.issue_client_cert("admin-cert", "admin-cert", ("system:masters",))
        (d / "audit-policy.yaml").write_text(AUDIT_POLICY)
        self.tokens = {name: secrets.token_hex(16) for name in IDENTITIES}
        (d / "tokens.csv").write_text(
            "".join(
                f'{self.tokens[n]},{user},{user}-uid,"{groups}"\n'
                for n, (user, groups) in IDENTITIES.items()
            )
        )
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        self._spawn(
            "etcd",
            [
                str(bins["etcd"]),
                f"--data-dir={d / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
                *([f"--quota-backend-bytes={q}"] if (q := self.etcd_quota_bytes) else []),
            ],
            detach,
        )
        self.server = f"https://127.0.0.1:{api_port}"
        self._apiserver_args = [
            str(bins["kube-apiserver"]),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--secure-port={api_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--cert-dir={d / 'certs'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            f"--client-ca-file={client_ca.cert}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            f"--audit-policy-file={d / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            # Never rotated: readers take events after a byte offset of this one file. Unset
            # (0), the apiserver's log writer takes lumberjack's default of 100 MB
            # (gopkg.in/natefinch/lumberjack.v2 lumberjack.go `MaxSize`) and moves the file
            # aside as audit-<time>.log: bench/scale.py at 10,000 nodes passed that within one
            # convergence run and counted none of the writes after it.
            "--audit-log-maxsize=1000000",
            # On SIGTERM, end open watches within 2 s: unset, the apiserver stopped listening at
            # once but its process outlived the 20 s STOP_GRACE (measured here), which made
            # `restart_apiserver` and the teardown slow.
            "--shutdown-watch-termination-grace-period=2s",
            f"--profiling={'true' if self.profiling else 'false'}",
        ]
        self._detach = detach
        self._spawn("kube-apiserver", self._apiserver_args, detach)
        self._wait_ready(timeout=90)
        for name in IDENTITIES:
            user = IDENTITIES[name][0]
            write_kubeconfig(
                self.kubeconfig_for(name), self.server, self.tokens[name], self.ca_file, user
            )
        if self.with_controller_manager:
            k = self.kubeconfig_for("controller-manager")
            self._spawn(
                "kube-controller-manager",
                [
                    str(bins["kube-controller-manager"]),
                    f"--kubeconfig={k}",
                    f"--authentication-kubeconfig={k}",
                    f"--authorization-kubeconfig={k}",
                    f"--service-account-private-key-file={d / 'sa.key'}",
                    f"--root-ca-file={self.ca_file}",
                    "--use-service-account-credentials=true",
                    "--leader-elect=false",
                    "--secure-port=0",
                    "--concurrent-deployment-syncs=10",
                ],
                detach,
            )
        if self.with_scheduler:
            k = self.kubeconfig_for("scheduler")
            self._spawn(
                "kube-scheduler",
                [
                    str(bins["kube-scheduler"]),
                    f"--kubeconfig={k}",
                    f"--authentication-kubeconfig={k}",
                    f"--authorization-kubeconfig={k}",
                    "--leader-elect=false",
                    "--secure-port=0",
                ],
                detach,
            )
        if self.with_kwok:
            self._spawn(
                "kwok",
                [
                    str(bins["kwok"]),
                    f"--kubeconfig={self.kubeconfig_for('kwok')}",
                    f"--config={binaries.kwok_stages()}",
                    f"--config={DELAYED_POD_STAGES}",
                    "--manage-all-nodes=false",
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    "--node-lease-duration-seconds=40",
                    "--cidr=10.0.0.1/24",
                    "--node-ip=10.0.0.1",
                ],
                detach,
            )
        self._write_state()
        self.log(f"control plane up in {time.monotonic() - t0:.1f}s: {self.server}")

    def _write_state(self) -> None:
        (self.workdir / "cluster.json").write_text(
            json.dumps({"server": self.server, "pids": self.pids, "workdir": str(self.workdir)})
        )

    def restart_apiserver(self, timeout: float = 90.0) -> None:
        """Stop kube-apiserver and start it again with the same arguments: the same port,
        serving certificate (reused from `--cert-dir`), client CA, tokens, ServiceAccount keys,
        audit log (appended to) and etcd. Returns once it answers /readyz; its clients (kwok,
        the controller manager, the scheduler) reconnect by themselves."""
        if not self._apiserver_args:
            raise ClusterError("the apiserver was not started by this LocalCluster")
        name = "kube-apiserver"
        stop_pids({name: self.pids[name]}, {name: self.processes[name]})
        self._spawn(name, self._apiserver_args, self._detach, append=True)
        self._wait_ready(timeout=timeout)
        self._write_state()

    def _wait_ready(self, timeout: float) -> None:
        ctx = ssl.create_default_context(cafile=None)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for name in ("etcd", "kube-apiserver"):
                proc = self.processes.get(name)
                if proc is not None and proc.poll() is not None:
                    tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]
                    raise ClusterError(f"{name} exited with {proc.returncode}:\n{tail}")
            req = urllib.request.Request(
                f"{self.server}/readyz",
                headers={"Authorization": f"Bearer {self.tokens['admin']}"},
            )
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError as exc:
                last = str(exc)
            time.sleep(0.25)
        raise ClusterError(f"kube-apiserver not ready after {timeout}s: {last}")

    def check_running(self) -> list[str]:
        """Names of components that have exited (an empty list when all are up)."""
        return [n for n, p in self.processes.items() if p.poll() is not None]

    def stop(self) -> None:
        """Stop clients, then the apiserver, then etcd; SIGKILL what outlives its bound."""
        stop_pids(self.pids, self.processes)
        self.processes.clear()
        self.pids.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- audit log --------------------------------------------------------------------------
    def audit_events(
        self, *, user: str | None = None, offset: int = 0, reads: bool = False
    ) -> list[dict[str, Any]]:
        """Audit events after byte `offset`, optionally by user: writes and lists of pods and
        DaemonSets; with `reads`, also the reads logged for the operator's ServiceAccounts."""
        lines, _ = auditlog.whole_lines(self.audit_log, offset)
        events = [json.loads(line) for line in lines]
        if not reads:
            events = [e for e in events if _logged_by_default(e)]
        if user is not None:
            events = [e for e in events if e.get("user", {}).get("username") == user]
        return events

    def audit_offset(self) -> int:
        """Where the next event will start (the end of the last whole line, `auditlog`)."""
        return auditlog.line_end(self.audit_log)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def stop_pids(
    pids: dict[str, int], processes: dict[str, subprocess.Popen[bytes]] | None = None
) -> None:
    processes = processes or {}
    for name in STOP_ORDER:
        pid = pids.get(name)
        if pid is None:
            continue
        proc = processes.get(name)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE.get(name, 5.0)
        while time.monotonic() < deadline:
            if proc is not None:
                if proc.poll() is not None:
                    break
            elif not pid_alive(pid):
                break
            time.sleep(0.05)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)

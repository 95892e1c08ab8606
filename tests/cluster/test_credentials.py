"""Credentials as an operator is given them, against the real apiserver.

For every kubeconfig form kubectl accepts (devcluster.kubeconfigs.FORMS) and the in-cluster
ServiceAccount, `vgpu-operator doctor` reads the cluster and `vgpu-operator run` (subprocesses,
as a person or a pod runs them) converges a policy, writing as the identity of that form.

Rotation: with a `tokenFile`, an exec plugin and the in-cluster token, a second bound token
replaces the first where the process reads it and the first is revoked (its Secret deleted); the
running operator converges the next change with the second token (the audit log names its JTI),
without a restart.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes_asyncio import client

from tests.cluster.agentkit import release, static, wait_applied
from tests.cluster.helpers import (
    ClusterUnderTest,
    NodeFactory,
    PolicyFactory,
    die_with_parent,
    eventually,
    patch_spec,
    unique,
)
from vgpu_devcluster import binaries, kubeconfigs
from vgpu_devcluster.agentproc import AgentProcess, FakeGpus, fake_model
from vgpu_devcluster.cluster import LocalCluster
from vgpu_operator import contract
from vgpu_operator.kubeapi import NotFound, node_path, policy_path, request
from vgpu_operator.kubeapi.credentials import ENV_SA_DIR, Credentials

VGPU_OPERATOR = Path(sys.executable).parent / "vgpu-operator"
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
IN_CLUSTER = "in-cluster"
ROTATED = ("token-file", "exec-plugin", IN_CLUSTER)
CONVERGE = 45.0  # seconds for a started operator to label a node


@dataclass
class Launch:
    """How a process gets its credentials: flags and environment."""

    args: list[str]
    env: dict[str, str]
    user: str  # the user name the apiserver gives it


def base_env(home: Path) -> dict[str, str]:
    """This environment without any credentials, HOME pointed at an empty directory."""
    drop = ("KUBECONFIG", ENV_SA_DIR, "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    return env


@dataclass
class OperatorProcess:
    """`vgpu-operator run` as a subprocess."""

    launch: Launch
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        argv = [str(VGPU_OPERATOR), "run", *self.launch.args, "--resync", "3600"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.launch.env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@dataclass
class Operators:
    directory: Path
    started: list[OperatorProcess] = field(default_factory=list)

    def start(self, launch: Launch) -> OperatorProcess:
        log = self.directory / f"operator-{len(self.started)}.log"
        op = OperatorProcess(launch, log).start()
        self.started.append(op)
        return op


@pytest.fixture
async def operators(
    api: client.ApiClient, installed: Credentials, tmp_path: Path
) -> AsyncIterator[Operators]:
    """Start `vgpu-operator run` processes (the CRDs installed). Request it before `policies`:
    the policies are deleted first, and the processes stop only once the deletions are finished
    (the operator releases its finalizer)."""
    running = Operators(tmp_path)

    async def settled() -> bool:
        return await policies_settled(api)

    yield running
    try:
        if any(op.running() for op in running.started):
            await eventually(settled, timeout=30, interval=0.2)
    finally:
        for op in running.started:
            op.stop()


# -- identities -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local(cluster: ClusterUnderTest) -> LocalCluster:
    """Client certificates and the audit log are the local control plane's."""
    return cluster.require_audit()


@dataclass(frozen=True)
class ServiceAccount:
    namespace: str
    name: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"


@pytest.fixture(scope="module")
async def admin_sa(api: client.ApiClient) -> AsyncIterator[ServiceAccount]:
    """A ServiceAccount bound to cluster-admin, in a namespace of its own."""
    sa = ServiceAccount(unique("creds"), "admin")
    binding = f"{sa.namespace}-admin"
    await request(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": sa.namespace}})
    await request(
        api,
        "POST",
        f"/api/v1/namespaces/{sa.namespace}/serviceaccounts",
        body={"metadata": {"name": sa.name}},
    )
    await request(
        api,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        body={
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "namespace": sa.namespace, "name": sa.name}],
        },
    )
    yield sa
    for path in (
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{binding}",
        f"/api/v1/namespaces/{sa.namespace}",
    ):
        with contextlib.suppress(NotFound):
            await request(api, "DELETE", path)


async def bound_token(api: client.ApiClient, sa: ServiceAccount) -> tuple[str, str]:
    """A Secret and a TokenRequest token of `sa` bound to it (10 minutes, the shortest the
    apiserver issues): the token stops working once the Secret is deleted."""
    secret = await request(
        api,
        "POST",
        f"/api/v1/namespaces/{sa.namespace}/secrets",
        body={"metadata": {"generateName": "token-anchor-"}},
    )
    meta = secret["metadata"]
    review = await request(
        api,
        "POST",
        f"/api/v1/namespaces/{sa.namespace}/serviceaccounts/{sa.name}/token",
        body={
            "spec": {
                "expirationSeconds": 600,
                "boundObjectRef": {
                    "kind": "Secret",
                    "apiVersion": "v1",
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            }
        },
    )
    return meta["name"], str(review["status"]["token"])


def jti(token: str) -> str:
    """The JWT ID of a ServiceAccount token (its payload's `jti`)."""
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return str(claims["jti"])


def cert_credential_id(cert: Path) -> str:
    """How the apiserver names a client certificate in `credential-id`."""
    der = x509.load_pem_x509_certificate(cert.read_bytes()).public_bytes(serialization.Encoding.DER)
    return "X509SHA256=" + hashlib.sha256(der).hexdigest()


def write_atomically(path: Path, text: str) -> None:
    """Replace a file at once, as the kubelet swaps a projected token."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    tmp.replace(path)


def in_cluster_launch(
    local: LocalCluster, home: Path, sa_dir: Path, token: str, user: str
) -> Launch:
    """No kubeconfig anywhere; a ServiceAccount directory and the service variables."""
    sa_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(sa_dir / "token", token)
    (sa_dir / "ca.crt").write_bytes(local.ca_file.read_bytes())
    env = base_env(home)
    env[ENV_SA_DIR] = str(sa_dir)
    env["KUBERNETES_SERVICE_HOST"] = "127.0.0.1"
    env["KUBERNETES_SERVICE_PORT"] = local.server.rsplit(":", 1)[1]
    return Launch([], env, user)


@pytest.fixture(scope="module")
async def launches(
    local: LocalCluster,
    admin_sa: ServiceAccount,
    api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Launch]:
    """One Launch per form: the admin token or the admin client certificate in each
    kubeconfig form, and a cluster-admin ServiceAccount in-cluster."""
    d = tmp_path_factory.mktemp("forms")
    token_file = d / "admin-token"
    token_file.write_text(local.tokens["admin"] + "\n")  # as `echo` writes it
    who = kubeconfigs.Identity(
        server=local.server,
        ca_file=local.ca_file,
        token=local.tokens["admin"],
        token_file=token_file,
        client_cert=local.client_cert,
        client_key=local.client_key,
    )
    out: dict[str, Launch] = {}
    for form, k in kubeconfigs.write_forms(d / "kubeconfigs", who).items():
        env = {**base_env(d / "home"), **k.env()}
        out[form] = Launch(k.args(), env, "admin-cert" if form.startswith("cert-") else "admin")
    _, token = await bound_token(api, admin_sa)
    # its own empty HOME: kubectl, run with the others, writes a cache under ~/.kube
    out[IN_CLUSTER] = in_cluster_launch(local, d / "empty-home", d / "sa", token, admin_sa.user)
    return out


# -- what the processes do ------------------------------------------------------------------


async def run_doctor(launch: Launch) -> tuple[int, str, str]:
    """`vgpu-operator doctor -o json` with these credentials: exit code, stdout, stderr. With
    `--config` (the defaults), as the operator runs: without it doctor lists ConfigMaps
    cluster-wide to find the running configuration (commands/running_config.py), which the
    operator's own ServiceAccount, one of these credentials, may not."""
    config = Path(launch.env.get("HOME") or "/tmp") / "doctor-config.yaml"
    config.write_text("{}\n")
    proc = await asyncio.create_subprocess_exec(
        str(VGPU_OPERATOR),
        "doctor",
        *launch.args,
        "--config",
        str(config),
        "-o",
        "json",
        env=launch.env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def kubectl_whoami(launch: Launch) -> str:
    """The user kubectl authenticates as with these credentials (kubectl accepts the form)."""
    kubectl = binaries.ensure("kubectl")
    out = subprocess.run(
        [str(kubectl), *launch.args, "auth", "whoami", "-o", "json"],
        env=launch.env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    return str(json.loads(out.stdout)["status"]["userInfo"]["username"])


def hami_policy(pool: str, **extra: Any) -> dict[str, Any]:
    return {"nodeSelector": {"matchLabels": {"test/pool": pool}}, "mode": "hami-core", **extra}


async def wait_labels(
    api: client.ApiClient, name: str, wanted: dict[str, str], op: OperatorProcess
) -> None:
    async def labelled() -> bool:
        assert op.running(), f"the operator exited:\n{op.output()}"
        node = await request(api, "GET", node_path(name))
        labels = node["metadata"].get("labels") or {}
        return all(labels.get(k) == v for k, v in wanted.items())

    try:
        await eventually(labelled, timeout=CONVERGE, interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\noperator log:\n{op.output()}") from None


async def operator_node_patches(
    local: LocalCluster, name: str, offset: int
) -> list[dict[str, Any]]:
    """The operator's accepted PATCHes to the node `name` after `offset` of the audit log (by
    its user agent: the test's own client may share the identity), once there is one. The
    apiserver logs a request's ResponseComplete stage after it has answered, so the write can
    be seen on the node a moment before its audit event is in the file."""

    def found() -> list[dict[str, Any]]:
        return [
            e
            for e in local.audit_events(offset=offset)
            if e["verb"] == "patch"
            and e["objectRef"].get("resource") == "nodes"
            and not e["objectRef"].get("subresource")
            and e["objectRef"].get("name") == name
            and e["responseStatus"]["code"] < 300
            and e.get("userAgent", "").startswith("vgpu-operator")
        ]

    async def logged() -> bool:
        return bool(found())

    with contextlib.suppress(AssertionError):  # none: the caller's assertion says so
        await eventually(logged, timeout=10)
    return found()


async def policies_settled(api: client.ApiClient) -> bool:
    """No VGPUNodePolicy is being deleted (the operator has released every finalizer)."""
    items = (await request(api, "GET", policy_path()))["items"]
    return not any(p["metadata"].get("deletionTimestamp") for p in items)


# -- every form: doctor reads, run converges ------------------------------------------------


@pytest.mark.parametrize("form", [*kubeconfigs.FORMS, IN_CLUSTER])
async def test_doctor_and_run_with_each_form(
    form: str,
    operators: Operators,
    api: client.ApiClient,
    local: LocalCluster,
    launches: dict[str, Launch],
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    launch = launches[form]
    if form != IN_CLUSTER:  # kubectl has no in-cluster mode outside a pod
        assert kubectl_whoami(launch) == launch.user
    op = operators.start(launch)
    pool = unique("pool")
    [name] = await make_nodes("A30", 1, gpus=1, labels={"test/pool": pool}, wait_ready=False)
    offset = local.audit_offset()
    policy = await policies("creds", hami_policy(pool))
    await wait_labels(api, name, {contract.LABEL_POLICY: policy}, op)

    patches = await operator_node_patches(local, name, offset)
    assert patches and {e["user"]["username"] for e in patches} == {launch.user}
    if form.startswith("cert-"):  # the certificate itself, not some other admin credential
        ids = {tuple(e["user"].get("extra", {}).get(CREDENTIAL_ID, ())) for e in patches}
        assert ids == {(cert_credential_id(local.client_cert),)}

    # doctor reads the node: no device plugin registered its GPUs (there is no Volcano here)
    code, out, err = await run_doctor(launch)
    assert code in (0, 1), err  # 2: it could not read the cluster
    try:
        report = json.loads(out)
    except ValueError:
        raise AssertionError(f"doctor printed no report (exit {code}):\n{err}") from None
    named = {
        f["id"]
        for f in report["findings"]
        if any(o["kind"] == "Node" and o["name"] == name for o in f["objects"])
    }
    assert "node-registration" in named, report["findings"]


# -- rotation -------------------------------------------------------------------------------


async def refused(local: LocalCluster, token: str) -> bool:
    """Whether the apiserver now answers this token with 401."""
    ctx = ssl.create_default_context(cafile=str(local.ca_file))
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"{local.server}/api", headers={"Authorization": f"Bearer {token}"}, ssl=ctx
        ) as resp,
    ):
        return resp.status == 401


def rotating_kubeconfig(
    local: LocalCluster, directory: Path, form: str, source: Path, token: str
) -> Path:
    """A kubeconfig whose token is read from `source` when the client loads it: as a
    `tokenFile` (form "token-file") or through the exec plugin ("exec-plugin")."""
    write_atomically(source, token)
    if form == "token-file":
        user = kubeconfigs.token_file_user(source)
    else:
        plugin = kubeconfigs.write_exec_plugin(directory / "plugin.sh")
        user = kubeconfigs.exec_user(plugin, str(source))
    cluster = kubeconfigs.cluster_entry(local.server, local.ca_file)
    return kubeconfigs.write(directory / "kubeconfig", kubeconfigs.config(cluster, user))


async def rotate(
    api: client.ApiClient,
    local: LocalCluster,
    sa: ServiceAccount,
    source: Path,
    first_secret: str,
    first: str,
) -> str:
    """Put a second bound token where the process reads it, revoke the first (delete its
    Secret) and wait until the apiserver refuses it. Returns the second token."""
    _, second = await bound_token(api, sa)
    write_atomically(source, second)
    await request(api, "DELETE", f"/api/v1/namespaces/{sa.namespace}/secrets/{first_secret}")

    async def first_refused() -> bool:
        return await refused(local, first)

    await eventually(first_refused, timeout=30, interval=0.5)
    return second


@pytest.mark.parametrize("form", ROTATED)
async def test_a_rotated_token_is_used_without_a_restart(
    form: str,
    operators: Operators,
    api: client.ApiClient,
    local: LocalCluster,
    admin_sa: ServiceAccount,
    tmp_path: Path,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    first_secret, first = await bound_token(api, admin_sa)
    home = tmp_path / "home"
    if form == IN_CLUSTER:
        source = tmp_path / "sa" / "token"
        launch = in_cluster_launch(local, home, source.parent, first, admin_sa.user)
    else:
        source = tmp_path / "token"
        path = rotating_kubeconfig(local, tmp_path, form, source, first)
        launch = Launch(["--kubeconfig", str(path)], base_env(home), admin_sa.user)
    op = operators.start(launch)
    pool = unique("pool")
    [name] = await make_nodes("A30", 1, gpus=1, labels={"test/pool": pool}, wait_ready=False)
    policy = await policies("rotate", hami_policy(pool))
    await wait_labels(api, name, {contract.LABEL_POLICY: policy}, op)

    second = await rotate(api, local, admin_sa, source, first_secret, first)

    offset = local.audit_offset()
    await patch_spec(api, policy, {"nodeLabels": {"rotated/after": "yes"}})
    await wait_labels(api, name, {"rotated/after": "yes"}, op)
    patches = await operator_node_patches(local, name, offset)
    assert patches
    for event in patches:
        assert event["user"]["username"] == admin_sa.user
        assert event["user"]["extra"][CREDENTIAL_ID] == [f"JTI={jti(second)}"]


async def test_the_agent_uses_a_rotated_token_without_a_restart(
    api: client.ApiClient,
    local: LocalCluster,
    admin_sa: ServiceAccount,
    tmp_path: Path,
    make_nodes: NodeFactory,
) -> None:
    """`vgpu-operator agent` with a `tokenFile` kubeconfig (a projected token, as in its pod)."""
    first_secret, first = await bound_token(api, admin_sa)
    source = tmp_path / "token"
    kubeconfig = rotating_kubeconfig(local, tmp_path, "token-file", source, first)
    [name] = await make_nodes("A30", 1, gpus=1, wait_ready=False)
    gpus = FakeGpus.create(tmp_path / name, name, fake_model("A30"), 1)
    agent = AgentProcess(name, kubeconfig, gpus, tmp_path / "agent.log").start()
    try:
        before = static({"1g.6gb": 4})
        await release(api, name, before)
        await wait_applied(api, name, before, agent, timeout=CONVERGE)

        second = await rotate(api, local, admin_sa, source, first_secret, first)

        offset = local.audit_offset()
        after = static({"2g.12gb": 2})
        await release(api, name, after)
        await wait_applied(api, name, after, agent, timeout=CONVERGE)
        patches = [
            e
            for e in local.audit_events(user=admin_sa.user, offset=offset)
            if e["objectRef"].get("resource") == "nodes"
            and e["responseStatus"]["code"] < 300
            and e.get("userAgent", "").startswith("vgpu-operator-agent")
        ]
        assert patches
        for event in patches:
            assert event["user"]["extra"][CREDENTIAL_ID] == [f"JTI={jti(second)}"]
    finally:
        agent.stop()

"""Two `vgpu-operator run --leader-elect` processes on one Lease, against the real apiserver,
under the operator's ServiceAccount and the chart's RBAC (its leader-election Role rendered for a
fresh Lease name per test). Short durations: lease 4 s, renew deadline 3 s, retry 0.5 s.

- only the leader writes: in the audit log every write of the operator's user carries the
  leader's user agent (`vgpu-operator/<identity>`), Kopf's own writes on the policy included
  (Kopf runs only in the leader); the standby writes nothing, not even to the Lease, and its
  liveness endpoint answers 200 with `leader: false`;
- `kill -9` of the leader (no release): the standby takes over once the Lease has lapsed on its
  clock, and converges a policy change made while no replica led;
- SIGTERM of the leader (a rolling update) releases the Lease: the standby takes over at its
  next attempt; a leader whose Lease is taken from it exits with code 1.

And the chart's Deployment and PodDisruptionBudget for several replicas, rendered by helm and
accepted by the apiserver (server-side dry run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import (
    ClusterUnderTest,
    NodeFactory,
    PolicyFactory,
    die_with_parent,
    eventually,
    patch_spec,
    unique,
)
from vgpu_devcluster.cluster import LocalCluster, free_port
from vgpu_devcluster.install import (
    OPERATOR_NAMESPACE,
    OPERATOR_USER,
    apply,
    object_path,
    render_chart,
)
from vgpu_operator import contract
from vgpu_operator.kubeapi import Conflict, NotFound, node_path, policy_path, request
from vgpu_operator.kubeapi.credentials import Credentials

LEASE = 4.0
RENEW = 3.0
RETRY = 0.5
JITTERED = 2.2 * RETRY  # the longest pause between two attempts of a standby (jitter factor 1.2)
# The apiserver, kwok and the other test sessions share two cores: what a loaded machine adds to
# a bound that holds on an idle one.
SLACK = 1.5
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/leases"


@dataclass
class Replica:
    """One `vgpu-operator run --leader-elect` process and its liveness endpoint."""

    identity: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def user_agent(self) -> str:
        return f"vgpu-operator/{self.identity}"

    def running(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    async def health(self) -> tuple[int, dict[str, Any]]:
        """The liveness endpoint's status and JSON body; (0, {}) while it does not answer."""
        url = f"http://127.0.0.1:{self.port}/healthz"
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp,
            ):
                return resp.status, dict(await resp.json(content_type=None))
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError):
            return 0, {}

    async def wait_leading(self, leading: bool, timeout: float) -> None:
        """Until the endpoint answers 200 with `leader` as given (0.05 s polls)."""

        async def reached() -> bool:
            assert self.running(), f"{self.identity} exited:\n{self.output()}"
            status, body = await self.health()
            return status == 200 and body.get("leader") is leading

        try:
            await eventually(reached, timeout=timeout, interval=0.05)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.identity}'s log:\n{self.output()}") from None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


@dataclass
class Replicas:
    kubeconfig: str
    lease: str
    directory: Path
    started: list[Replica] = field(default_factory=list)

    def start(self, identity: str) -> Replica:
        port = free_port()
        log = self.directory / f"operator-{identity}.log"
        argv = [
            sys.executable,
            "-m",
            "vgpu_operator.commands.cli",
            "run",
            f"--kubeconfig={self.kubeconfig}",
            f"--identity={identity}",
            f"--liveness=http://127.0.0.1:{port}/healthz",
            "--resync=3600",
            "--leader-elect",
            f"--leader-elect-namespace={OPERATOR_NAMESPACE}",
            f"--leader-elect-name={self.lease}",
            f"--leader-elect-lease-duration={LEASE}",
            f"--leader-elect-renew-deadline={RENEW}",
            f"--leader-elect-retry-period={RETRY}",
        ]
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        replica = Replica(identity, proc, port, log)
        self.started.append(replica)
        return replica


@pytest.fixture
def local(cluster: ClusterUnderTest) -> LocalCluster:
    return cluster.require_audit()


@pytest.fixture
async def lease_name(api: client.ApiClient, installed: Credentials) -> AsyncIterator[str]:
    """A fresh Lease name, with the chart's leader-election Role and RoleBinding rendered for it
    (under their own names, beside the release's); all three deleted afterwards."""
    name = unique("lease")
    docs = render_chart("leader-election-rbac.yaml", values={"leaderElection.leaseName": name})
    for doc in docs:
        doc["metadata"]["name"] = name
        if doc["kind"] == "RoleBinding":
            doc["roleRef"]["name"] = name
        await apply(api, doc)
    yield name
    for path in [object_path(d) for d in docs] + [f"{LEASES}/{name}"]:
        with contextlib.suppress(NotFound):
            await request(api, "DELETE", path, field_manager=None)


@pytest.fixture
async def replicas(
    api: client.ApiClient, installed: Credentials, lease_name: str, tmp_path: Path
) -> AsyncIterator[Replicas]:
    """Start replicas; request it before `policies`: the policies are deleted first, and the
    replicas are stopped once their deletion is finished (the leader releases the finalizer).
    Every process is stopped whatever happens."""
    assert installed.kubeconfig is not None
    running = Replicas(installed.kubeconfig, lease_name, tmp_path)

    async def settled() -> bool:
        items = (await request(api, "GET", policy_path()))["items"]
        return not any(p["metadata"].get("deletionTimestamp") for p in items)

    yield running
    try:
        if any(r.running() for r in running.started):
            await eventually(settled, timeout=30, interval=0.2)
    finally:
        for replica in running.started:
            replica.stop()


async def lease_spec(api: client.ApiClient, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = (await request(api, "GET", f"{LEASES}/{name}"))["spec"]
    return spec


def received(event: dict[str, Any]) -> float:
    """When the apiserver received the request (epoch seconds)."""
    stamp = event["requestReceivedTimestamp"].rstrip("Z")
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


def is_lease(event: dict[str, Any], name: str) -> bool:
    ref = event["objectRef"]
    return ref.get("resource") == "leases" and ref.get("name") == name


def hami_policy(pool: str, **extra: Any) -> dict[str, Any]:
    return {"nodeSelector": {"matchLabels": {"test/pool": pool}}, "mode": "hami-core", **extra}


def nodes_labelled(
    api: client.ApiClient, names: list[str], wanted: dict[str, str]
) -> Callable[[], Awaitable[bool]]:
    async def labelled() -> bool:
        for name in names:
            labels = (await request(api, "GET", node_path(name)))["metadata"].get("labels") or {}
            if any(labels.get(k) != v for k, v in wanted.items()):
                return False
        return True

    return labelled


def is_kopf_write(event: dict[str, Any], policy: str) -> bool:
    """A write to the policy object itself (not its status): only Kopf's bookkeeping writes
    there (its finalizer, `vgpu.volcano.sh/kopf-managed`, the last-handled configuration); the
    reconciler writes the status subresource."""
    ref = event["objectRef"]
    return (
        ref.get("resource") == "vgpunodepolicies"
        and ref.get("name") == policy
        and not ref.get("subresource")
        and event["verb"] in ("patch", "update")
    )


async def test_only_the_leader_writes_and_a_killed_one_is_replaced(
    api: client.ApiClient,
    local: LocalCluster,
    lease_name: str,
    replicas: Replicas,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    began = local.audit_offset()
    a = replicas.start("a")
    await a.wait_leading(True, timeout=30)
    b = replicas.start("b")
    await b.wait_leading(False, timeout=30)

    pool = unique("pool")
    nodes = await make_nodes("A100-SXM4-80GB", 2, labels={"test/pool": pool})
    policy = await policies("failover", hami_policy(pool))
    await eventually(nodes_labelled(api, nodes, {contract.LABEL_POLICY: policy}), timeout=30)

    # The standby: healthy (200), not leading, nothing reconciled; the Lease names the leader.
    status, body = await b.health()
    assert status == 200, body
    assert body["leader"] is False and body["lease"] == "ok" and body["reconcilePasses"] == 0
    status, body = await a.health()
    assert status == 200 and body["leader"] is True and body["reconcilePasses"] >= 1, body
    spec = await lease_spec(api, lease_name)
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == LEASE
    assert spec["leaseTransitions"] == 0

    # Every write of the operator's user so far is the leader's: its Lease (created, renewed)
    # and the nodes. Not one of the standby's, not even an attempt at the Lease.
    before_kill = local.audit_events(user=OPERATOR_USER, offset=began)
    agents = {e.get("userAgent") for e in before_kill}
    assert agents == {a.user_agent}, agents
    lease_writes = [e for e in before_kill if is_lease(e, lease_name)]
    assert [e["verb"] for e in lease_writes[:2]] == ["create", "update"]
    assert all(e["responseStatus"]["code"] < 300 for e in lease_writes)
    node_writes = [e for e in before_kill if e["objectRef"].get("name") in nodes]
    assert node_writes and all(e["verb"] == "patch" for e in node_writes)
    # Kopf's own writes (its finalizer and handled-state annotations on the policy) are among
    # them: Kopf runs in the leader only, so they are the leader's too.
    assert [e for e in before_kill if is_kopf_write(e, policy)], "no Kopf write on the policy"

    # kill -9: no release. The policy changes while no replica leads, and nothing applies it.
    killed_wall, killed = time.time(), time.monotonic()
    a.proc.send_signal(signal.SIGKILL)
    edit = {"failover/edit": "1"}
    await patch_spec(api, policy, {"nodeLabels": {"volcano.sh/vgpu.enabled": "true", **edit}})
    assert a.proc.wait(10) == -signal.SIGKILL
    assert not await nodes_labelled(api, nodes[:1], edit)()
    await b.wait_leading(True, timeout=LEASE + 2 * JITTERED + 10)
    took = time.monotonic() - killed
    # a renewed every RETRY (plus the request's time): the standby saw its last renewal at the
    # earliest that long before the kill, and waits LEASE from then. It may have seen that
    # renewal one attempt late, and notices the lapse at its next attempt: at most LEASE and two
    # jittered attempts.
    earliest = LEASE - RETRY - 0.5
    assert earliest <= took <= LEASE + 2 * JITTERED + SLACK, took
    await eventually(nodes_labelled(api, nodes, edit), timeout=30)

    # From the start: a's writes end at the kill (a request in flight then may land just
    # after); b's begin with taking the Lease once it lapsed, and its node writes follow.
    writes = local.audit_events(user=OPERATOR_USER, offset=began)
    assert {e.get("userAgent") for e in writes} == {a.user_agent, b.user_agent}
    assert max(received(e) for e in writes if e["userAgent"] == a.user_agent) < killed_wall + 0.2
    by_b = [e for e in writes if e["userAgent"] == b.user_agent]
    first = by_b[0]
    assert is_lease(first, lease_name) and first["verb"] == "update", first
    assert first["responseStatus"]["code"] == 200
    assert received(first) >= killed_wall + earliest
    patches = [e for e in by_b if e["objectRef"].get("name") in nodes]
    assert patches and all(received(e) >= received(first) for e in patches)
    # b's Kopf started only once b led: it handled the change made while no replica led (its
    # write of the handled state on the policy), after b took the Lease.
    kopf_by_b = [e for e in by_b if is_kopf_write(e, policy)]
    assert kopf_by_b and all(received(e) >= received(first) for e in kopf_by_b)
    spec = await lease_spec(api, lease_name)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    print(f"takeover after kill -9: {took:.2f}s (lease {LEASE}s, retry {RETRY}s)")


async def test_a_terminated_leader_hands_over_and_a_deposed_one_exits_1(
    api: client.ApiClient,
    local: LocalCluster,
    lease_name: str,
    replicas: Replicas,
) -> None:
    a = replicas.start("a")
    await a.wait_leading(True, timeout=30)
    b = replicas.start("b")
    await b.wait_leading(False, timeout=30)
    await asyncio.sleep(2 * JITTERED)  # b has read the Lease held by a

    # SIGTERM, as a rolling update sends: a releases the Lease and exits 0; b takes over at its
    # next attempt instead of after the lease duration.
    terminated = time.monotonic()
    a.proc.send_signal(signal.SIGTERM)
    await b.wait_leading(True, timeout=LEASE + 2 * JITTERED + 10)
    took = time.monotonic() - terminated
    assert took < LEASE - RETRY, took
    assert await asyncio.to_thread(a.proc.wait, 30) == 0, a.output()
    exited = time.monotonic() - terminated
    spec = await lease_spec(api, lease_name)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1

    # The Lease taken from b (as another elector that won a race would): b stops at its next
    # renewal and the process exits with 1, writing nothing more.
    for _ in range(20):  # b renews every RETRY seconds: its renewal may come in between
        lease = await request(api, "GET", f"{LEASES}/{lease_name}")
        lease["spec"]["holderIdentity"] = "intruder"
        try:
            await request(api, "PUT", f"{LEASES}/{lease_name}", body=lease, field_manager=None)
        except Conflict:
            continue
        break
    else:
        raise AssertionError("the Lease could not be taken from b in 20 tries")
    deposed = time.monotonic()
    code = await asyncio.to_thread(b.proc.wait, RENEW + 10)
    assert code == 1, b.output()
    gone = time.monotonic() - deposed
    assert gone < RETRY + SLACK + 2  # a renewal, then Kopf's shutdown
    assert "lost the leader lease" in b.output()
    print(f"takeover after SIGTERM: {took:.2f}s (the old leader exited after {exited:.2f}s)")
    print(f"a deposed leader exited after {gone:.2f}s")


# -- the chart --------------------------------------------------------------------------------


def controller(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    return deployment


def test_chart_runs_two_replicas_with_leader_election() -> None:
    docs = render_chart()
    dep = controller(docs)
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    [container] = dep["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[0] == "run"
    for arg in (
        "--leader-elect",
        f"--leader-elect-namespace={OPERATOR_NAMESPACE}",
        "--leader-elect-name=vgpu-operator",
        "--leader-elect-lease-duration=15",
        "--leader-elect-renew-deadline=10",
        "--leader-elect-retry-period=2",
    ):
        assert arg in args, args
    env = {e["name"]: e["valueFrom"] for e in container["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    [pdb] = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == dep["spec"]["selector"]

    # One replica: no PDB (it would block every drain); the Lease still guards rollouts.
    one = render_chart(values={"replicaCount": "1"})
    assert controller(one)["spec"]["replicas"] == 1
    assert not [d for d in one if d["kind"] == "PodDisruptionBudget"]
    tuned = controller(
        render_chart(
            "deployment.yaml",
            values={"leaderElection.leaseName": "x", "leaderElection.leaseDurationSeconds": "30"},
        )
    )
    tuned_args = tuned["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-elect-name=x" in tuned_args
    assert "--leader-elect-lease-duration=30" in tuned_args


def test_chart_without_leader_election_is_one_replica_recreated() -> None:
    off = {"leaderElection.enabled": "false", "replicaCount": "1"}
    docs = render_chart(values=off)
    dep = controller(docs)
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--leader-elect")], args
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]

    # Two replicas without an election would both write: the render fails and says why.
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render_chart(values={"leaderElection.enabled": "false"})
    assert "leaderElection.enabled" in failed.value.stderr, failed.value.stderr
    assert "replicaCount" in failed.value.stderr


async def test_chart_deployment_and_pdb_are_accepted_by_the_apiserver(
    api: client.ApiClient, installed: Credentials
) -> None:
    docs = [d for d in render_chart() if d["kind"] in ("Deployment", "PodDisruptionBudget")]
    assert len(docs) == 2
    for doc in docs:
        plural = "deployments" if doc["kind"] == "Deployment" else "poddisruptionbudgets"
        stored = await request(
            api,
            "POST",
            f"/apis/{doc['apiVersion']}/namespaces/{OPERATOR_NAMESPACE}/{plural}",
            body=doc,
            query={"dryRun": "All", "fieldValidation": "Strict"},
            field_manager=None,
        )
        if doc["kind"] == "Deployment":
            assert stored["spec"]["strategy"] == doc["spec"]["strategy"]
            assert stored["spec"]["replicas"] == 2
        else:
            assert stored["spec"]["minAvailable"] == 1

"""A node whose writes the apiserver refuses backs off alone, counted from the audit log.

The review's finding: an apiserver answering 422 for some nodes got a full pass every second,
forever (3,800 PATCHes in 20 s for 200 nodes). Here one node of five refuses the operator's
updates, first through a ValidatingAdmissionPolicy (what the apiserver answers is checked: 422),
then through a validating webhook served by this test that asks for a retry (429 with
`Retry-After: 5`). Each time: the other nodes converge, the refused node is tried with growing
pauses (never before the Retry-After), the policy status names it with the apiserver's message,
and once the refusal is gone the node converges on its next attempt.

Both admission objects are cluster-wide and the cluster is shared by the session's tests: they
match one node of this test only (a label with a unique value, and the node's name), only the
operator's user, and are deleted even when the test fails.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import itertools
import json
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, NodeFactory, PolicyFactory, eventually, unique
from tests.cluster.poolkit import configured_by, hami_policy, wait_nodes
from vgpu_devcluster.certs import self_signed
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_operator import kubeapi
from vgpu_operator.controller.runner import OperatorThread

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
REFUSE_LABEL = "test.vgpu.volcano.sh/refuse"
# The bound is "at most 10 PATCHes in 60 s" for a refused node. The backoff (1 s, then
# doubling, + up to 20% jitter) tries at 0, 1, 3, 7, 15, 31 s: 6 in 60 s, 5 in 20 s. A 20 s
# window with at most 6 proves the same rate, and the pauses are checked to double.
WINDOW = 20.0
MAX_IN_WINDOW = 6
RETRY_AFTER = 5


# -- the audit log ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    at: dt.datetime  # requestReceivedTimestamp
    code: int


def operator_patches(cluster: ClusterUnderTest, offset: int, node: str) -> list[Attempt]:
    """The operator's PATCHes of `node` since `offset`, as the apiserver received them."""
    local = cluster.require_audit()
    return sorted(
        (
            Attempt(
                dt.datetime.fromisoformat(e["requestReceivedTimestamp"]),
                int(e["responseStatus"]["code"]),
            )
            for e in local.audit_events(user=OPERATOR_USER, offset=offset)
            if e["verb"] == "patch"
            and e["objectRef"].get("resource") == "nodes"
            and e["objectRef"].get("name") == node
            and not e["objectRef"].get("subresource")
        ),
        key=lambda a: a.at,
    )


def node_patch_counts(cluster: ClusterUnderTest, offset: int, nodes: list[str]) -> dict[str, int]:
    return {n: len(operator_patches(cluster, offset, n)) for n in nodes}


def gaps(attempts: list[Attempt]) -> list[float]:
    return [(b.at - a.at).total_seconds() for a, b in itertools.pairwise(attempts)]


# -- what the operator is told --------------------------------------------------------------


async def probe_as_operator(api: client.ApiClient, node: str) -> kubeapi.ApiError:
    """A dry-run update of `node` as the operator's user (impersonated by the admin, so the audit
    log does not count it as the operator's), until admission refuses it; the refusal."""
    refusal: list[kubeapi.ApiError] = []

    async def refused() -> bool:
        try:
            resp = await kubeapi.open_stream(
                api,
                "PATCH",
                kubeapi.node_path(node),
                query=[("dryRun", "All")],
                headers={
                    "Content-Type": kubeapi.MERGE_PATCH,
                    "Accept": kubeapi.JSON,
                    "Impersonate-User": OPERATOR_USER,
                },
                # a key the chart's policyKeys list (its admission policy refuses any other)
                body={"metadata": {"labels": {"volcano.sh/test-probe": "x"}}},
            )
        except kubeapi.ApiError as exc:
            refusal.append(exc)
            return True
        resp.release()
        return False  # the admission object is not in force yet

    await eventually(refused, timeout=30, interval=0.2)
    return refusal[-1]


async def policy_status(api: client.ApiClient, name: str) -> dict[str, Any]:
    obj = await kubeapi.request(api, "GET", kubeapi.policy_path(name))
    return dict(obj.get("status") or {})


async def wait_problem(api: client.ApiClient, policy: str, node: str, text: str) -> None:
    """Until the policy status names `node` as WriteFailed with `text` (the apiserver's
    message) and Stalled is True."""

    async def named() -> bool:
        status = await policy_status(api, policy)
        problems = {p["node"]: p for p in status.get("problemNodes") or []}
        problem = problems.get(node) or {}
        stalled = {c["type"]: c for c in status.get("conditions") or []}.get("Stalled") or {}
        return (
            problem.get("reason") == "WriteFailed"
            and text in problem.get("message", "")
            and stalled.get("status") == "True"
            and node in stalled.get("message", "")
        )

    await eventually(named, timeout=WINDOW, interval=0.3)


async def wait_healed(api: client.ApiClient, policy: str, node: str, timeout: float) -> None:
    """The refusal gone: the node converges on its next attempt and leaves the status."""
    await wait_nodes(api, [node], configured_by(policy), timeout=timeout)

    async def ready() -> bool:
        status = await policy_status(api, policy)
        ready = {c["type"]: c for c in status.get("conditions") or []}.get("Ready") or {}
        return not status.get("problemNodes") and ready.get("status") == "True"

    await eventually(ready, timeout=10, interval=0.3)


# -- cluster-wide admission objects, always deleted -------------------------------------------


@contextlib.asynccontextmanager
async def created(
    api: client.ApiClient, *objects: tuple[str, dict[str, Any]]
) -> AsyncIterator[None]:
    """POST each (collection path, object); DELETE them all afterwards, whatever happened."""
    made: list[str] = []
    try:
        for path, body in objects:
            await kubeapi.request(api, "POST", path, body=body, field_manager=None)
            made.append(f"{path}/{body['metadata']['name']}")
        yield
    finally:
        for path in reversed(made):
            with contextlib.suppress(kubeapi.NotFound):
                await kubeapi.request(api, "DELETE", path, field_manager=None)


def operator_updates(node: str) -> list[dict[str, str]]:
    return [
        {
            "name": "the-operator-updating-this-node",
            "expression": f"request.userInfo.username == '{OPERATOR_USER}'"
            f" && object.metadata.name == '{node}'",
        }
    ]


NODE_UPDATES = {
    "apiGroups": [""],
    "apiVersions": ["v1"],
    "operations": ["UPDATE"],
    "resources": ["nodes"],
}


def refusing_policy(name: str, node: str, token: str) -> list[tuple[str, dict[str, Any]]]:
    """A ValidatingAdmissionPolicy and its Deny binding refusing the operator's updates of
    `node` (https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/)."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [NODE_UPDATES],
                "objectSelector": {"matchLabels": {REFUSE_LABEL: token}},
            },
            "matchConditions": operator_updates(node),
            "validations": [
                {"expression": "false", "message": f"test {token}: this node is not yours"}
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [
        (f"{ADMISSION}/validatingadmissionpolicies", policy),
        (f"{ADMISSION}/validatingadmissionpolicybindings", binding),
    ]


# -- a webhook that asks for a retry ----------------------------------------------------------


@dataclass
class Webhook:
    url: str
    ca_bundle: str
    token: str
    reviews: list[tuple[str, str]] = field(default_factory=list)  # (user, node) seen


@contextlib.contextmanager
def slow_down_webhook(directory: Path, token: str) -> Iterator[Webhook]:
    """An HTTPS server on 127.0.0.1 answering every AdmissionReview with `allowed: false` and
    a 429 Status asking for a retry after RETRY_AFTER seconds (`details.retryAfterSeconds`,
    which the apiserver turns into a Retry-After header: kubernetes/apiserver@v0.35.4:
    pkg/endpoints/handlers/responsewriters/writers.go, ErrorNegotiated)."""
    cert_file, key_file = self_signed(directory, "vgpu-test-webhook", "webhook")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    seen: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            request = review["request"]
            seen.append((request["userInfo"]["username"], request["name"]))
            body = json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": {
                        "uid": request["uid"],
                        "allowed": False,
                        "status": {
                            "code": 429,
                            "reason": "TooManyRequests",
                            "message": f"test {token}: busy, come back later",
                            "details": {"retryAfterSeconds": RETRY_AFTER},
                        },
                    },
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="test-webhook", daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        ca = base64.b64encode(cert_file.read_bytes()).decode()
        yield Webhook(f"https://127.0.0.1:{port}/validate", ca, token, seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def webhook_config(name: str, hook: Webhook, node: str) -> list[tuple[str, dict[str, Any]]]:
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "slow-down.test.vgpu.volcano.sh",
                "clientConfig": {"url": hook.url, "caBundle": hook.ca_bundle},
                "rules": [{**NODE_UPDATES, "scope": "Cluster"}],
                "objectSelector": {"matchLabels": {REFUSE_LABEL: hook.token}},
                "matchConditions": operator_updates(node),
                # If this server is gone, nobody else's writes may suffer.
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }
        ],
    }
    return [(f"{ADMISSION}/validatingwebhookconfigurations", config)]


# -- the tests ----------------------------------------------------------------------------------


async def pool_with_a_refusing_node(make_nodes: NodeFactory) -> tuple[str, str, str, list[str]]:
    """(pool, token, the node to refuse, the other four nodes)."""
    pool, token = unique("pool"), unique("refuse")
    [target] = await make_nodes(
        "A100-SXM4-80GB", 1, labels={"test/pool": pool, REFUSE_LABEL: token}, prefix="refused"
    )
    others = await make_nodes("A100-SXM4-80GB", 4, labels={"test/pool": pool})
    return pool, token, target, others


async def test_a_node_denied_by_an_admission_policy_backs_off_alone(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    operator: OperatorThread,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    pool, token, target, others = await pool_with_a_refusing_node(make_nodes)
    vap = unique("vgpu-test-deny")
    async with created(api, *refusing_policy(vap, target, token)):
        refusal = await probe_as_operator(api, target)
        # What the real apiserver answers for a ValidatingAdmissionPolicy's Deny: 422 Invalid
        # (reason Invalid when the validation names none: kubernetes/apiserver@v0.35.4:
        # pkg/admission/plugin/policy/validating/dispatcher.go).
        assert isinstance(refusal, kubeapi.Invalid) and refusal.status == 422, refusal
        assert f"ValidatingAdmissionPolicy '{vap}' with binding '{vap}' denied" in refusal.message
        assert f"test {token}: this node is not yours" in refusal.message

        offset = local.audit_offset()
        start = time.monotonic()
        name = await policies("refused", hami_policy(pool))
        await wait_nodes(api, others, configured_by(name), timeout=WINDOW)
        await wait_problem(api, name, target, refusal.message)
        await asyncio.sleep(max(0.0, start + WINDOW - time.monotonic()))

        attempts = operator_patches(cluster, offset, target)
        pauses = gaps(attempts)
        assert 3 <= len(attempts) <= MAX_IN_WINDOW, pauses
        assert {a.code for a in attempts} == {422}
        for i, pause in enumerate(pauses):  # 1 s, then doubling (jitter only adds)
            assert pause >= 2**i - 0.05, pauses
        assert node_patch_counts(cluster, offset, others) == {n: 1 for n in others}

    # The policy gone: the next attempt (due 31-37 s after the first) goes through.
    await wait_healed(api, name, target, timeout=40)
    assert operator_patches(cluster, offset, target)[-1].code == 200


async def test_a_webhooks_retry_after_is_honoured(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    operator: OperatorThread,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    tmp_path: Path,
) -> None:
    local = cluster.require_audit()
    pool, token, target, others = await pool_with_a_refusing_node(make_nodes)
    with slow_down_webhook(tmp_path, token) as hook:
        async with created(api, *webhook_config(unique("vgpu-test-slow"), hook, target)):
            refusal = await probe_as_operator(api, target)
            # What the real apiserver answers when a webhook's Status asks for a retry: that
            # code, and the Retry-After header from details.retryAfterSeconds.
            assert isinstance(refusal, kubeapi.TooManyRequests), refusal
            assert refusal.status == 429 and refusal.retry_after == RETRY_AFTER, refusal.headers
            assert 'admission webhook "slow-down.test.vgpu.volcano.sh" denied the request' in (
                refusal.message
            )
            assert (OPERATOR_USER, target) in hook.reviews

            offset = local.audit_offset()
            name = await policies("slowed", hami_policy(pool))
            await wait_nodes(api, others, configured_by(name), timeout=WINDOW)
            await wait_problem(api, name, target, refusal.message)

            async def three_attempts() -> bool:
                return len(operator_patches(cluster, offset, target)) >= 3

            await eventually(three_attempts, timeout=3 * RETRY_AFTER + 10, interval=0.3)
            attempts = operator_patches(cluster, offset, target)
            assert {a.code for a in attempts} == {429}
            assert all(pause >= RETRY_AFTER for pause in gaps(attempts)), gaps(attempts)
            assert node_patch_counts(cluster, offset, others) == {n: 1 for n in others}

    await wait_healed(api, name, target, timeout=30)
    assert operator_patches(cluster, offset, target)[-1].code == 200

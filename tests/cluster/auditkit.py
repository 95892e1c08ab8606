"""The operator's writes as the audit log shows them, for tests that count them per object (a
policy's life, ownership cases), and the operator started and stopped within one test."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client

from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_operator import contract
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi import NotFound, policy_path, request
from vgpu_operator.kubeapi.credentials import Credentials

WRITES = {"create", "patch", "update", "delete"}
STARTED: dict[int, str] = {}  # audit offset -> when it was taken (RFC 3339, as the log has it)
Write = tuple[str, str, str]  # verb, resource[/subresource], name


def audit_offset(local: LocalCluster) -> int:
    """The audit log's end now, remembered with the time: the apiserver writes its log in
    batches, so events of an earlier test may still come after this offset."""
    offset = local.audit_offset()
    STARTED[offset] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return offset


def writes(local: LocalCluster, offset: int) -> list[Write]:
    """Each accepted write by the operator since `offset`, the Lease left out (it renews on its
    own clock)."""
    out = []
    for e in local.audit_events(user=OPERATOR_USER, offset=offset):
        if e.get("requestReceivedTimestamp", "") < STARTED.get(offset, ""):
            continue  # an earlier test's, flushed to the log after the offset was taken
        ref = e.get("objectRef") or {}
        resource = "/".join(filter(None, (ref.get("resource"), ref.get("subresource"))))
        if e["verb"] in WRITES and e["responseStatus"]["code"] < 300 and resource != "leases":
            out.append((e["verb"], resource, str(ref.get("name", ""))))
    return out


def node_writes(found: list[Write]) -> Counter[str]:
    return Counter(name for _, resource, name in found if resource == "nodes")


def unneeded(found: list[Write], policy: str | None) -> list[Write]:
    """Writes to anything but nodes, Events and the policy itself (its status, Kopf's
    finalizer and bookkeeping annotations)."""
    own = ("vgpunodepolicies", "vgpunodepolicies/status")
    return [
        w for w in found if w[1] not in ("nodes", "events") and not (w[1] in own and w[2] == policy)
    ]


def quiet(local: LocalCluster, offset: int) -> Any:
    """True once no operator write came since the last look."""
    seen = [-1]

    async def check() -> bool:
        count = len(writes(local, offset))
        done = count == seen[0]
        seen[0] = count
        return done

    return check


async def create_policy(api: client.ApiClient, name: str, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }
    await request(api, "POST", policy_path(), body=body, field_manager=None)


async def gone(api: client.ApiClient, name: str) -> bool:
    try:
        await request(api, "GET", policy_path(name))
    except NotFound:
        return True
    return False


@pytest.fixture
def start_operator(installed: Credentials) -> Iterator[Any]:
    """`start_operator()`: the operator in a thread under its ServiceAccount, stopped after the
    test (or earlier by `.stop()`); each call starts another."""
    started: list[OperatorThread] = []

    def start() -> OperatorThread:
        running = OperatorThread(installed, options=ReconcilerOptions(resync_seconds=3600))
        started.append(running.start())
        return running

    yield start
    for running in started:
        running.stop()

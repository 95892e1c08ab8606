"""Leader election against the real apiserver: two electors in this process on one Lease (short
durations), and the chart's Role, which lets the operator's ServiceAccount run the election."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.helpers import unique
from vgpu_devcluster.install import (
    OPERATOR_NAMESPACE,
    OPERATOR_USER,
    apply,
    render_chart,
)
from vgpu_operator import kubeapi
from vgpu_operator.controller.leader import LeaderElectionConfig, LeaderElector
from vgpu_operator.kubeapi.credentials import Credentials

LEASE = 3.0
RENEW = 2.0
RETRY = 0.5
JITTERED = 2.2 * RETRY  # the longest pause between two attempts of a standby


class Lead:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.runs = 0
        self.cancelled = False

    async def __call__(self) -> None:
        self.runs += 1
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


class Candidate:
    """One elector running as a task, with its lead."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str, **kw: Any) -> None:
        config = LeaderElectionConfig(
            namespace,
            "vgpu-operator",
            unique(name),
            lease_duration=LEASE,
            renew_deadline=RENEW,
            retry_period=RETRY,
            **kw,
        )
        self.elector = LeaderElector(api, config)
        self.identity = config.identity
        self.lead = Lead()
        self.task = asyncio.create_task(self.elector.run(self.lead))

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, RENEW + 1)


async def lease(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/vgpu-operator"
    spec: dict[str, Any] = (await kubeapi.request(api, "GET", path))["spec"]
    return spec


async def takeover_time(standby: Candidate, since: float) -> float:
    await asyncio.wait_for(standby.lead.started.wait(), LEASE + 3 * JITTERED + 2)
    return time.monotonic() - since


async def test_one_leads_and_a_release_hands_over_at_the_next_retry(
    api: client.ApiClient, namespace: str
) -> None:
    first = Candidate(api, namespace, "first")
    await asyncio.wait_for(first.lead.started.wait(), 5)
    second = Candidate(api, namespace, "second")
    try:
        for _ in range(12):  # 1.8 s: several renewals and standby attempts
            await asyncio.sleep(0.15)
            assert first.elector.is_leader and not second.elector.is_leader
        assert second.lead.runs == 0 and second.elector.holder == first.identity
        spec = await lease(api, namespace)
        assert spec["holderIdentity"] == first.identity
        assert spec["leaseDurationSeconds"] == 3 and spec["leaseTransitions"] == 0
        assert spec["renewTime"] > spec["acquireTime"]  # renewed since it was taken

        began = time.monotonic()
        await first.stop()  # released
        assert first.lead.cancelled and not first.elector.is_leader
        # Without the release this takes at least LEASE - RETRY (the last renewal came at most
        # one retry period before the stop); with it, the standby's next attempt takes over.
        assert await takeover_time(second, began) < JITTERED + 0.5
        spec = await lease(api, namespace)
        assert spec["holderIdentity"] == second.identity and spec["leaseTransitions"] == 1
        assert first.lead.runs == 1 and second.lead.runs == 1
    finally:
        await first.stop()
        await second.stop()


async def test_a_crashed_leader_is_replaced_after_the_lease_duration(
    api: client.ApiClient, namespace: str
) -> None:
    crashing = Candidate(api, namespace, "crashing", release_on_cancel=False)
    await asyncio.wait_for(crashing.lead.started.wait(), 5)
    standby = Candidate(api, namespace, "standby")
    try:
        await asyncio.sleep(1.0)
        assert crashing.elector.is_leader and standby.lead.runs == 0
        began = time.monotonic()
        await crashing.stop()  # no release: as if the process died
        assert (await lease(api, namespace))["holderIdentity"] == crashing.identity
        took = await takeover_time(standby, began)
        # Not before the Lease lapsed on the standby's clock (counted from when it saw the last
        # renewal, at most a retry period before the crash), and within one jittered attempt
        # to see that renewal plus one to act after it lapsed.
        assert LEASE - RETRY - 0.2 <= took <= LEASE + 2 * JITTERED + 0.5, took
        spec = await lease(api, namespace)
        assert spec["holderIdentity"] == standby.identity and spec["leaseTransitions"] == 1
        assert crashing.lead.cancelled and crashing.lead.runs == 1
    finally:
        await crashing.stop()
        await standby.stop()


def test_chart_role_grants_the_lease_and_nothing_more() -> None:
    [role, binding] = render_chart("leader-election-rbac.yaml")
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == OPERATOR_NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["vgpu-operator"],
            "verbs": ["get", "update"],
        },
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "vgpu-operator", "namespace": OPERATOR_NAMESPACE}
    ]
    named = render_chart("leader-election-rbac.yaml", values={"leaderElection.leaseName": "x"})
    assert named[0]["rules"][1]["resourceNames"] == ["x"]
    assert not [
        d
        for d in render_chart(values={"leaderElection.enabled": "false", "replicaCount": "1"})
        if d["kind"] == "Role" and any("leases" in r["resources"] for r in d["rules"])
    ]


async def allowed(api: client.ApiClient, verb: str, name: str = "", ns: str = "") -> bool:
    attributes = {
        "namespace": ns or OPERATOR_NAMESPACE,
        "verb": verb,
        "group": "coordination.k8s.io",
        "resource": "leases",
        "name": name,
    }
    review = await kubeapi.request(
        api,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={"spec": {"user": OPERATOR_USER, "resourceAttributes": attributes}},
        field_manager=None,
    )
    return bool(review["status"].get("allowed"))


async def test_the_operators_service_account_can_run_the_election(
    api: client.ApiClient, installed: Credentials
) -> None:
    for doc in render_chart("leader-election-rbac.yaml"):
        await apply(api, doc)
    assert await allowed(api, "create")
    assert await allowed(api, "get", "vgpu-operator")
    assert await allowed(api, "update", "vgpu-operator")
    assert not await allowed(api, "update", "someone-elses")
    assert not await allowed(api, "get", "someone-elses")
    assert not await allowed(api, "delete", "vgpu-operator")
    assert not await allowed(api, "update", "vgpu-operator", ns="default")

    # The elector's own requests, under the ServiceAccount: create, renew, release.
    path = f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/leases/vgpu-operator"
    with contextlib.suppress(kubeapi.NotFound):
        await kubeapi.request(api, "DELETE", path, field_manager=None)
    operator_api = await installed.client()
    try:
        candidate = Candidate(operator_api, OPERATOR_NAMESPACE, "operator")
        await asyncio.wait_for(candidate.lead.started.wait(), 5)
        await asyncio.sleep(RETRY + 0.3)  # one renewal
        spec = await lease(api, OPERATOR_NAMESPACE)
        assert spec["holderIdentity"] == candidate.identity
        assert spec["renewTime"] > spec["acquireTime"]
        await candidate.stop()
        assert candidate.task.cancelled()
        spec = await lease(api, OPERATOR_NAMESPACE)
        assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    finally:
        await operator_api.close()
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(api, "DELETE", path, field_manager=None)

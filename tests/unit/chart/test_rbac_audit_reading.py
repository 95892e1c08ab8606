"""How the session-wide RBAC check (tests/cluster/test_rbac_audit.py) reads audit events, on
events shaped as kube-apiserver v1.35 writes them at Metadata level: who made a request (an
impersonating admin stays the admin), which RBAC refused, which binding allowed one, and which
ServiceAccounts are a Helm release's of the chart."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.cluster import rbackit


def event(
    user: str,
    verb: str,
    resource: str,
    *,
    namespace: str = "",
    name: str = "",
    decision: str = "allow",
    reason: str = "",
    agent: str = "vgpu-operator",
    code: int = 200,
    impersonated: str | None = None,
) -> dict[str, Any]:
    e: dict[str, Any] = {
        "verb": verb,
        "requestURI": f"/api/v1/{resource}",
        "user": {"username": user},
        "userAgent": agent,
        "objectRef": {"resource": resource, "namespace": namespace, "name": name},
        "responseStatus": {"code": code},
        "annotations": {rbackit.DECISION: decision, rbackit.REASON: reason},
    }
    if impersonated:
        e["impersonatedUser"] = {"username": impersonated}
    return e


def test_an_impersonated_probe_is_the_admins_and_only_rbac_refusals_count() -> None:
    probe = event("admin", "get", "secrets", decision="forbid", impersonated=rbackit.OPERATOR_USER)
    assert rbackit.username(probe) == "admin"
    refused_by_admission = event(rbackit.OPERATOR_USER, "patch", "nodes", code=422)
    refused_by_rbac = event(rbackit.OPERATOR_USER, "get", "secrets", decision="forbid")
    lines = rbackit.forbidden([refused_by_admission, refused_by_rbac])
    assert len(lines) == 1 and "get /api/v1/secrets" in lines[0]


@pytest.mark.parametrize(
    ("reason", "binding"),
    [
        (
            'RBAC: allowed by ClusterRoleBinding "vo-1" of ClusterRole "vo-1" to '
            'ServiceAccount "vo-1/t-1"',
            "vo-1",
        ),
        (
            'RBAC: allowed by RoleBinding "vo-1-objects/t-1" of Role "vo-1-objects" to '
            'ServiceAccount "vo-1/t-1"',
            "vo-1-objects",
        ),
        ("", None),
    ],
)
def test_the_binding_that_allowed_a_request(reason: str, binding: str | None) -> None:
    assert rbackit.granted_by(event("u", "get", "nodes", reason=reason)) == binding


def test_a_helm_release_is_found_from_the_service_accounts_helm_created() -> None:
    def created(name: str, agent: str = "Helm/v3.22.0") -> dict[str, Any]:
        return event(
            "admin", "create", "serviceaccounts", namespace="t-1", name=name, agent=agent, code=201
        )

    stored = event("admin", "create", "secrets", namespace="t-1", name="sh.helm.release.v1.vo-1.v1")
    events = [created("vo-1-agent"), created("vo-1"), created("other", agent="kubectl"), stored]
    [release] = rbackit.helm_releases(events)
    assert (release.namespace, release.fullname) == ("t-1", "vo-1")
    assert release.users == [
        "system:serviceaccount:t-1:vo-1",
        "system:serviceaccount:t-1:vo-1-agent",
    ]
    assert {"vo-1", "vo-1-objects", "vo-1-agent", "vo-1-cleanup"} <= release.bindings()
    # the operator's chart (Helm made its Deployment) whose ServiceAccounts were not seen
    deployment = event(
        "admin", "create", "deployments", namespace="t-1", name="vo-1", agent="Helm/v3.22.0"
    )
    with pytest.raises(AssertionError, match=re.escape("not found: {'t-1'}")):
        rbackit.helm_releases([stored, deployment])
    # another chart's release (a CRD-only chart makes no Deployment): not the operator's
    assert rbackit.helm_releases([stored]) == []


def test_kubernetes_own_grants_to_every_user_are_told_apart() -> None:
    everyone = (
        'RBAC: allowed by ClusterRoleBinding "system:basic-user" of ClusterRole '
        '"system:basic-user" to Group "system:authenticated"'
    )
    chart = (
        'RBAC: allowed by ClusterRoleBinding "vo-1" of ClusterRole "vo-1" to ServiceAccount '
        '"vo-1/t-1"'
    )
    assert rbackit.granted_to_everyone(event("u", "create", "selfsubjectreviews", reason=everyone))
    assert not rbackit.granted_to_everyone(event("u", "get", "nodes", reason=chart))


def test_a_refusal_is_at_an_apiserver_start_within_seconds_of_its_identity_lease() -> None:
    def at(e: dict[str, Any], time: str) -> dict[str, Any]:
        return {**e, "requestReceivedTimestamp": f"2026-11-23T12:09:{time}Z"}

    lease = event(
        "system:apiserver",
        "create",
        "leases",
        namespace="kube-system",
        name="apiserver-wlv32tlttr4jl3gtroqexyxapa",
        code=201,
    )
    other = event("kwok", "create", "leases", namespace="kube-node-lease", name="n1", code=201)
    starts = rbackit.apiserver_starts([at(lease, "15.286724"), at(other, "16.0")])
    assert len(starts) == 1
    watch = event(rbackit.OPERATOR_USER, "watch", "configmaps", decision="forbid")
    assert rbackit.at_a_start(at(watch, "15.176633"), starts)  # (its reconnect came first)
    assert not rbackit.at_a_start(at(watch, "45.0"), starts)

"""Least privilege, from the audit log: every call the operator's and the agent's
ServiceAccounts made in a Volcano + HAMi scenario (the local control plane logs their reads too) is
permitted by the chart's RBAC as installed, asked of the apiserver with a SubjectAccessReview per
(verb, resource, namespace, name); none was refused with 403. Acting as either ServiceAccount,
what the chart does not grant is refused: Secrets, pods/exec, ConfigMaps and DaemonSets not named
in values, and deleting a pod without the device plugin's labels (the admission policy)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, unique
from tests.cluster.test_volcano_restarts import hami, steady
from tests.cluster.volcano_env import PLUGIN_NS, VolcanoEnv, volcano_env
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_devcluster.install import (
    AGENT_USER,
    OPERATOR_NAMESPACE,
    OPERATOR_USER,
    install_agent_access,
)
from vgpu_operator import kubeapi
from vgpu_operator.kubeapi.credentials import Credentials

pytestmark = pytest.mark.cluster

__all__ = ["volcano_env", "volcano_operator"]

PROBE_AGENT = "vgpu-rbac-probe"  # the user agent of this test's own refused requests
SA_GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{OPERATOR_NAMESPACE}"]
Call = tuple[str, str, str, str, str, str]  # verb, group, resource, subresource, namespace, name


def calls_of(events: list[dict[str, Any]]) -> set[Call]:
    out: set[Call] = set()
    for e in events:
        ref = e.get("objectRef") or {}
        if "resource" not in ref:
            continue  # a non-resource URL (discovery), allowed to every authenticated user
        out.add(
            (
                e["verb"],
                ref.get("apiGroup", ""),
                ref["resource"],
                ref.get("subresource", ""),
                ref.get("namespace", ""),
                ref.get("name", ""),
            )
        )
    return out


# The chart's lease name (values.yaml leaderElection.leaseName). The leader-election tests run
# the operator under fresh lease names, each with the chart's Role rendered for that name and
# deleted afterwards (test_leader_processes.py `lease_name`): their calls are checked as the
# release's, which test_leader_election.py shows the value carries to the Role.
RELEASE_LEASE = "vgpu-operator"


def as_released(call: Call) -> Call:
    verb, group, resource, subresource, namespace, name = call
    if (group, resource, namespace) == ("coordination.k8s.io", "leases", OPERATOR_NAMESPACE):
        return (verb, group, resource, subresource, namespace, name and RELEASE_LEASE)
    return call


async def allowed(api: client.ApiClient, user: str, call: Call) -> bool:
    verb, group, resource, subresource, namespace, name = call
    attrs = {"verb": verb, "group": group, "resource": resource, "subresource": subresource}
    attrs |= {"namespace": namespace, "name": name}
    review = await kubeapi.request(
        api,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={"spec": {"user": user, "groups": SA_GROUPS, "resourceAttributes": attrs}},
        field_manager=None,
    )
    return bool(review["status"].get("allowed"))


async def test_every_call_of_the_operator_service_accounts_is_granted_by_the_chart(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    volcano_env: VolcanoEnv,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    # This scenario's calls only: earlier tests run the operator before some namespaces (and so
    # the chart's Roles in them) exist, and provoke refusals on purpose.
    offset = local.audit_offset()
    env = volcano_env
    group = unique("rbac")
    await env.add_control_node()
    rtx = await env.add_nodes("RTX-4090", 2, gpus=2, released=None, labels={"test/group": group})
    await env.install()
    volcano_operator("restarts: {minIntervalSeconds: 5}")
    await policies("rbac", hami(group))
    await steady(env, rtx)

    checked = 0
    for user in (OPERATOR_USER, AGENT_USER):
        events = [
            e
            for e in local.audit_events(user=user, offset=offset, reads=True)
            if not e.get("userAgent", "").startswith(PROBE_AGENT)
        ]
        refused = [e for e in events if (e.get("responseStatus") or {}).get("code") == 403]
        assert refused == [], [(e["verb"], e["requestURI"]) for e in refused]
        calls = {as_released(c) for c in calls_of(events)}
        denied = [c for c in sorted(calls) if not await allowed(api, user, c)]
        assert denied == [], f"{user} made calls the chart's RBAC does not grant: {denied}"
        checked += len(calls)
    # the operator read and wrote nodes, policies, ConfigMaps by name, the plugin DaemonSet
    operator_calls = calls_of(local.audit_events(user=OPERATOR_USER, reads=True))
    resources = {(c[0], c[2]) for c in operator_calls}
    assert {("watch", "configmaps"), ("patch", "nodes"), ("watch", "vgpunodepolicies")} <= resources
    named_watches = {c for c in operator_calls if c[0] == "watch" and c[2] == "configmaps"}
    assert named_watches and all(c[5] for c in named_watches), named_watches
    assert checked > 10


async def probe_client(credentials: Credentials) -> client.ApiClient:
    api = await config.new_client_from_config(config_file=credentials.kubeconfig)
    api.user_agent = PROBE_AGENT
    return api


async def refused(api: client.ApiClient, method: str, path: str, **kwargs: Any) -> str:
    """The message of the apiserver's refusal (403) of this request; fails if it succeeded."""
    with pytest.raises(kubeapi.ApiError) as err:
        await kubeapi.request(api, method, path, field_manager=None, **kwargs)
    assert err.value.status == 403, err.value
    return str(err.value.body)


DRY_RUN = {"dryRun": "All"}


async def test_the_service_accounts_are_refused_what_the_chart_does_not_grant(
    api: client.ApiClient, installed: Credentials, tmp_path: Any
) -> None:
    agent_credentials = await install_agent_access(api, tmp_path)
    async with (
        await probe_client(installed) as operator,
        await probe_client(agent_credentials) as agent,
    ):
        for sa in (operator, agent):
            await refused(sa, "GET", "/api/v1/namespaces/kube-system/secrets")
            await refused(sa, "GET", f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets")
            await refused(sa, "POST", "/api/v1/namespaces/kube-system/pods/anything/exec", body={})
            await refused(
                sa,
                "PATCH",
                "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy",
                body={"metadata": {"labels": {"x": "y"}}},
                content_type=kubeapi.MERGE_PATCH,
            )
        # ConfigMaps: writing one not named in values is not granted; creating one is refused
        # by the admission policy (RBAC cannot limit create by name).
        await refused(
            operator,
            "PATCH",
            "/api/v1/namespaces/kube-system/configmaps/coredns",
            body={"data": {"x": "y"}},
            content_type=kubeapi.MERGE_PATCH,
        )
        foreign = {"metadata": {"name": unique("not-in-values")}, "data": {}}
        message = await refused(
            operator,
            "POST",
            "/api/v1/namespaces/kube-system/configmaps",
            body=foreign,
            query=DRY_RUN,
        )
        assert "only the ConfigMaps named in its chart values" in message
        await refused(
            operator, "POST", "/api/v1/namespaces/default/configmaps", body=foreign, query=DRY_RUN
        )
        named = {"metadata": {"name": "volcano-vgpu-node-config"}, "data": {}}
        with contextlib.suppress(kubeapi.Conflict):  # exists: then create is what was asked
            await kubeapi.request(
                operator,
                "POST",
                "/api/v1/namespaces/kube-system/configmaps",
                body=named,
                query=DRY_RUN,
                field_manager=None,
            )
        # Pods: only the device plugin's, by its labels.
        plain, plugin = unique("plain"), unique("plugin")
        for name, labels in (
            (plain, {"app": "other"}),
            (plugin, {"name": "volcano-device-plugin"}),
        ):
            body = {
                "metadata": {"name": name, "labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            }
            await kubeapi.request(
                api, "POST", f"/api/v1/namespaces/{PLUGIN_NS}/pods", body=body, field_manager=None
            )
        try:
            message = await refused(
                operator, "DELETE", f"/api/v1/namespaces/{PLUGIN_NS}/pods/{plain}", query=DRY_RUN
            )
            assert "only device plugin pods" in message
            await refused(operator, "DELETE", f"/api/v1/namespaces/default/pods/{plain}")
            await kubeapi.request(
                operator,
                "DELETE",
                f"/api/v1/namespaces/{PLUGIN_NS}/pods/{plugin}",
                query=DRY_RUN,
                field_manager=None,
            )
            # The agent deletes no pod, and writes no ConfigMap.
            await refused(agent, "DELETE", f"/api/v1/namespaces/{PLUGIN_NS}/pods/{plugin}")
            await refused(agent, "POST", "/api/v1/namespaces/kube-system/configmaps", body=foreign)
        finally:
            for name in (plain, plugin):
                with contextlib.suppress(kubeapi.NotFound):
                    await kubeapi.request(
                        api,
                        "DELETE",
                        f"/api/v1/namespaces/{PLUGIN_NS}/pods/{name}",
                        query={"gracePeriodSeconds": "0"},
                        field_manager=None,
                    )

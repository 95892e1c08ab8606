"""Least privilege, from the audit log: every call the chart's ServiceAccounts made in the whole
test session is allowed by the chart's RBAC, and what the chart does not grant is refused.

`test_every_call_of_the_chart_service_accounts_in_the_session_is_granted` runs last in the
session (tests/cluster/conftest.py orders it after every other test) and reads the whole audit
log. Its rule:

- Whose calls: the chart's ServiceAccounts. Those vgpu_devcluster.install puts in vgpu-system
  for the session (the controller's, the node agent's, the pre-delete hook's), and every
  ServiceAccount Helm itself created in the session (a release's, test_helm_install.py). The
  local control plane logs every request of the vgpu-system ServiceAccounts, reads included;
  of the others, their writes and their lists of pods and DaemonSets.
- No call was refused by RBAC: the apiserver's audit annotation `authorization.k8s.io/decision`
  is never "forbid", whatever a test meant. One exception, the apiserver's own: a starting
  kube-apiserver serves requests before its RBAC authorizer has filled its caches, so a client
  reconnecting at once is refused for a moment (test_apiserver_restart.py restarts it). A
  refusal within `rbackit.START_SECONDS` of a start (the apiserver creates its identity Lease,
  kube-system/apiserver-*) of a call the chart's RBAC grants (a SubjectAccessReview now) is the
  start's. A request RBAC allowed and something after RBAC refused (a
  ValidatingAdmissionPolicy or webhook: test_write_backoff.py, test_agent_node_token.py;
  storage's 404 or 409) is no RBAC matter, and is checked like every other call: its decision
  says "allow".
- Every call (verb, group, resource, subresource, namespace, name) of the vgpu-system accounts
  is allowed by the chart's RBAC as installed at the end of the session: asked of the apiserver
  again with a SubjectAccessReview (a lease under a test's own name as the release's lease,
  `rbackit.as_released`). A Helm release's RBAC is uninstalled by then, so for its accounts the
  binding RBAC allowed each call by (`authorization.k8s.io/reason`) must be one the chart
  renders for that release (or one of Kubernetes' own grants to every authenticated user).
- Left out, and why: the refusal probes of this file, test_write_backoff.py,
  impersonationkit.py and test_agent_process.py (the agent may not read policies). The
  admin makes them impersonating a ServiceAccount (RBAC and admission then judge the
  ServiceAccount), so the audit log names the admin as the user and the ServiceAccount as
  `impersonatedUser`; each probe asserts its own refusal. The operator, the agent and the
  cleanup never impersonate.

When this file runs alone, its own scenario runs first: the controller, a node agent and the
pre-delete hook's cleanup, all under the chart's ServiceAccounts, on a Volcano + HAMi install; it
also shows the operator's placement patch of HAMi's plugin DaemonSet recorded on the DaemonSet
and the cleanup taking off exactly that, not a person's tolerations.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster import rbackit
from tests.cluster.agentkit import Agents, GpuNode, agent_kubeconfig_path, agents
from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually, unique
from tests.cluster.rbackit import acting_as
from tests.cluster.volcano_env import PLUGIN_DS, PLUGIN_NS, VolcanoEnv, hami, steady, volcano_env
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_devcluster.agentproc import FakeGpus, fake_model
from vgpu_devcluster.install import (
    AGENT_USER,
    CLEANUP_USER,
    OPERATOR_USER,
    install_cleanup_access,
)
from vgpu_operator import contract, kubeapi
from vgpu_operator.commands.cleanup import Cleanup
from vgpu_operator.controller.snapshot import workload_path
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.placement import PlacementRecord

pytestmark = pytest.mark.cluster

__all__ = ["agent_kubeconfig_path", "agents", "volcano_env", "volcano_operator"]

POOL_TAINT = {"key": "example.com/gpu-pool", "value": "rbac", "effect": "NoSchedule"}
POOL_TOLERATION = {**POOL_TAINT, "operator": "Equal"}
MINE = {"key": "example.com/mine", "operator": "Exists", "effect": "NoExecute"}


class HeardCleanup(Cleanup):
    """`vgpu-operator cleanup` in-process, keeping what it says."""

    def __init__(self) -> None:
        super().__init__(OperatorConfig(), dry_run=False, stop_timeout=10.0)
        self.said: list[str] = []

    def say(self, line: str) -> None:
        self.said.append(line)


def placement_of(daemonset: dict[str, Any]) -> tuple[Any, Any]:
    pod = daemonset["spec"]["template"]["spec"]
    return copy.deepcopy(pod.get("nodeSelector")), copy.deepcopy(pod.get("tolerations"))


async def test_operator_agent_and_cleanup_hook_run_under_the_chart_service_accounts(
    api: client.ApiClient,
    volcano_env: VolcanoEnv,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
    agents: Agents,
    tmp_path: Path,
) -> None:
    env = volcano_env
    group = unique("rbac")
    await env.add_control_node()
    rtx = await env.add_nodes("RTX-4090", 2, gpus=2, released=None, labels={"test/group": group})
    await env.install()
    plugin = workload_path("DaemonSet", PLUGIN_NS, PLUGIN_DS)
    shipped = placement_of(await kubeapi.request(api, "GET", plugin))
    op = volcano_operator("restarts: {minIntervalSeconds: 5}")
    gpus = FakeGpus.create(tmp_path / rtx[0], rtx[0], fake_model("RTX-4090"), 2, mig=False)
    agent = agents.start(GpuNode(rtx[0], gpus))
    await policies("rbac", hami(group, nodeTaints=[POOL_TAINT]))
    await steady(env, rtx)

    # The placement PATCH records on the DaemonSet what it set: the nodeSelector on the node
    # contract's label and the toleration of the pool's taint (the DaemonSet's own toleration
    # of volcano.sh/vgpu, a person's, needs none).
    async def recorded() -> bool:
        ds = await kubeapi.request(api, "GET", plugin)
        raw = (ds["metadata"].get("annotations") or {}).get(contract.ANN_PLACEMENT)
        return PlacementRecord.from_annotation(raw) == PlacementRecord(
            node_selector={contract.LABEL_DEVICE_PLUGIN: "hami"}, tolerations=[POOL_TOLERATION]
        )

    await eventually(recorded, timeout=60)

    async def agent_reported() -> bool:
        node = await kubeapi.request(api, "GET", kubeapi.node_path(rtx[0]))
        return node["metadata"]["labels"].get(contract.LABEL_STATE) == "success"

    await eventually(agent_reported, timeout=60)
    op.stop()
    agent.stop()

    # A person adds a toleration of their own after the operator's patch.
    ds = await kubeapi.request(api, "GET", plugin)
    _, tolerations = placement_of(ds)
    await env.patch(plugin, {"spec": {"template": {"spec": {"tolerations": [*tolerations, MINE]}}}})

    # The pre-delete hook's cleanup, under the hook's ServiceAccount and the chart's RBAC for it.
    hook = await install_cleanup_access(api, tmp_path)
    cleanup = HeardCleanup()
    async with await hook.client() as hook_api:
        await cleanup.run_with(hook_api)
    assert cleanup.failed == [], cleanup.said
    ref = f"daemonset {PLUGIN_NS}/{PLUGIN_DS}"
    assert f"{ref}: removed toleration example.com/gpu-pool=rbac:NoSchedule" in cleanup.said
    assert f"{ref}: removed nodeSelector {contract.LABEL_DEVICE_PLUGIN}=hami" in cleanup.said
    after = await kubeapi.request(api, "GET", plugin)
    selector, tolerations = shipped
    assert placement_of(after) == (selector, [*tolerations, MINE])
    assert contract.ANN_PLACEMENT not in (after["metadata"].get("annotations") or {})
    for name in rtx:
        node = await kubeapi.request(api, "GET", kubeapi.node_path(name))
        keys = [*node["metadata"].get("labels", {}), *node["metadata"].get("annotations", {})]
        assert [k for k in keys if k.startswith(f"{contract.GROUP}/")] == [], name


# -- what the chart does not grant is refused ---------------------------------------------------


async def refused(api: client.ApiClient, method: str, path: str, **kwargs: Any) -> str:
    """The message of the apiserver's refusal (403) of this request; fails if it succeeded."""
    with pytest.raises(kubeapi.ApiError) as err:
        await kubeapi.request(api, method, path, field_manager=None, **kwargs)
    assert err.value.status == 403, err.value
    return str(err.value.body)


DRY_RUN = {"dryRun": "All"}


async def test_the_service_accounts_are_refused_what_the_chart_does_not_grant(
    api: client.ApiClient,
    kubeconfig: Path,
    installed: object,
    agent_kubeconfig_path: Path,
    tmp_path: Path,
) -> None:
    await install_cleanup_access(api, tmp_path)
    async with (
        acting_as(kubeconfig, OPERATOR_USER) as operator,
        acting_as(kubeconfig, AGENT_USER) as agent,
        acting_as(kubeconfig, CLEANUP_USER) as hook,
    ):
        whoami = await kubeapi.request(
            operator,
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body={},
            field_manager=None,
        )
        assert whoami["status"]["userInfo"]["username"] == OPERATOR_USER
        for sa in (operator, agent, hook):
            await refused(sa, "GET", "/api/v1/namespaces/kube-system/secrets")
            await refused(sa, "GET", "/api/v1/namespaces/vgpu-system/secrets")
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


# -- the whole session (run last: conftest.py) -------------------------------------------------


async def test_every_call_of_the_chart_service_accounts_in_the_session_is_granted(
    cluster: ClusterUnderTest, api: client.ApiClient
) -> None:
    events = rbackit.session_events(cluster.require_audit().audit_log)
    by_user: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_user.setdefault(rbackit.username(e), []).append(e)

    # (a refusal of a call the chart grants, at an apiserver's start: the start's, see the rule)
    starts = rbackit.apiserver_starts(events)
    refused_by_rbac = []
    for user in rbackit.INSTALLED:
        for e in by_user.get(user, []):
            call = rbackit.call_of(e)
            if rbackit.decision(e) == "forbid" and not (
                call is not None
                and rbackit.at_a_start(e, starts)
                and await rbackit.allowed(api, user, call)
            ):
                refused_by_rbac += rbackit.forbidden([e])
    releases = rbackit.helm_releases(events)
    for release in releases:
        for user in release.users:
            refused_by_rbac += rbackit.forbidden(by_user.get(user, []))
    assert refused_by_rbac == [], (
        "RBAC refused calls of the chart's ServiceAccounts:\n" + "\n".join(refused_by_rbac)
    )

    checked: dict[str, int] = {}
    for user in rbackit.INSTALLED:
        calls = {rbackit.as_released(c) for c in rbackit.calls_of(by_user.get(user, []))}
        denied = [c for c in sorted(calls) if not await rbackit.allowed(api, user, c)]
        assert denied == [], f"{user} made calls the chart's RBAC does not grant: {denied}"
        checked[user] = len(calls)
    for release in releases:
        bindings = release.bindings()
        for user in release.users:
            foreign = {
                (rbackit.granted_by(e), e["verb"], e["requestURI"])
                for e in by_user.get(user, [])
                if rbackit.decision(e) == "allow"
                and rbackit.granted_by(e) not in bindings
                and not rbackit.granted_to_everyone(e)
            }
            assert foreign == set(), f"{user}: allowed by bindings not of the chart: {foreign}"
            checked[user] = len(by_user.get(user, []))

    # The operator read and wrote nodes, policies, ConfigMaps by name, the plugin DaemonSet; the
    # agent patched its node; the hook patched nodes and the plugin DaemonSet.
    operator = rbackit.calls_of(by_user.get(OPERATOR_USER, []))
    resources = {(c[0], c[2]) for c in operator}
    assert {("watch", "configmaps"), ("patch", "nodes"), ("watch", "vgpunodepolicies")} <= resources
    assert {("get", "daemonsets"), ("patch", "daemonsets")} <= resources
    named_watches = {c for c in operator if c[0] == "watch" and c[2] == "configmaps"}
    assert named_watches and all(c[5] for c in named_watches), named_watches
    agent = {(c[0], c[2]) for c in rbackit.calls_of(by_user.get(AGENT_USER, []))}
    assert ("patch", "nodes") in agent, agent
    hook = {(c[0], c[2]) for c in rbackit.calls_of(by_user.get(CLEANUP_USER, []))}
    assert {("patch", "nodes"), ("patch", "daemonsets")} <= hook, hook
    assert all(checked.get(user) for user in rbackit.INSTALLED), checked

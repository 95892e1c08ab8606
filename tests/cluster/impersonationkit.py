"""Least privilege as a matrix, asked of a live install (`check_matrix`): the chart's
ServiceAccounts (the controller's, the node agent's, the uninstall hook's), as the install made
them (RBAC and the admission policies of admission-policies.yaml), asked by the admin
impersonating each (`acting_as`; the agent with a token bound to its pod, whose node-name and
pod-name claims its admission policy reads) to do what the chart must not let them: every row of
`matrixkit` is refused (403), by RBAC or by the admission policy the row names, and the allowed
rows are not. The agent's rows that RBAC refuses are asked impersonating it too (RBAC reads no
claim): every request made with its own token must be one the chart grants (test_rbac_audit.py's
session check).

Two install paths ask it: the chart's templates applied as `vgpu_devcluster.install` renders them
(test_impersonation_template.py) and a `helm install` release (test_impersonation_helm.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory, unique
from tests.cluster.matrixkit import (
    AGENT_NODE,
    DENY_LABEL,
    OBJECTS,
    RBAC,
    RELEASED,
    SYSTEM,
    USERS,
    WORKLOADS,
    Row,
    Scene,
    allowed_rows,
    deploy_path,
    ds_path,
    forbidden_rows,
)
from tests.cluster.rbackit import acting_as, agent_on
from vgpu_devcluster.install import ensure_namespace
from vgpu_operator import contract, kubeapi
from vgpu_operator.models.node import Owned
from vgpu_operator.models.policy import Taint


async def ask(api: client.ApiClient, row: Row) -> dict[str, Any]:
    return await kubeapi.request(
        api,
        row.method,
        row.path,
        body=row.body,
        content_type=row.content_type if row.method == "PATCH" else kubeapi.JSON,
        query=row.query or None,
        field_manager=None,
    )


def refusal_of(row: Row, err: kubeapi.ApiError) -> str | None:
    """None when `err` is the refusal the row expects, else what is wrong."""
    body = str(err.body)
    if err.status != 403:
        return f"{err.status}: {body[:300]}"
    if row.refused_by == RBAC:
        by_rbac = " cannot " in body and "ValidatingAdmissionPolicy" not in body
        return None if by_rbac else f"not refused by RBAC: {body[:300]}"
    if f"ValidatingAdmissionPolicy '{row.refused_by}'" not in body:
        return f"not refused by {row.refused_by}: {body[:300]}"
    return None


async def make_pod(api: client.ApiClient, namespace: str, labels: dict[str, str]) -> str:
    name = unique("victim")
    body = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    await kubeapi.request(
        api, "POST", f"/api/v1/namespaces/{namespace}/pods", body=body, field_manager=None
    )
    return name


async def check_matrix(
    api: client.ApiClient,
    kubeconfig: Path,
    make_nodes: NodeFactory,
    tmp_path: Path,
    *,
    fullname: str,
    namespace: str,
    hook: bool,
) -> None:
    """Every forbidden row refused as it says, every allowed row allowed, for the install whose
    fullname and namespace are given (its ServiceAccounts, RBAC and policies in force; the
    uninstall hook's only when `hook`)."""
    sa = f"system:serviceaccount:{namespace}:"
    node_a, node_b = await make_nodes("A100-SXM4-80GB", 2, gpus=1, prefix="matrix")
    record = Owned(
        labels={RELEASED: "x", SYSTEM: ""},
        taints=[Taint(key=RELEASED, value="x", effect="NoSchedule")],
    )
    [released] = await make_nodes(
        "A100-SXM4-80GB",
        1,
        gpus=1,
        prefix="matrix-rel",
        labels={RELEASED: "x", USERS: "y", SYSTEM: ""},
        taints=[{"key": RELEASED, "value": "x", "effect": "NoSchedule"}],
        annotations={contract.ANN_OWNED: record.to_annotation()},
    )
    released_node = await kubeapi.request(api, "GET", kubeapi.node_path(released))
    ds = await kubeapi.request(api, "GET", ds_path())
    dep = await kubeapi.request(api, "GET", deploy_path())
    plugin = ds["spec"]["template"]["spec"]
    free, opted_out = unique("evictable"), unique("opted-out")
    await ensure_namespace(api, free)
    await kubeapi.request(
        api,
        "POST",
        "/api/v1/namespaces",
        body={"metadata": {"name": opted_out, "labels": {DENY_LABEL: "deny"}}},
        field_manager=None,
    )
    victims = [
        ("kube-system", await make_pod(api, "kube-system", {"app": "not-the-plugin"})),
        (free, await make_pod(api, free, {"app": "gpu-job"})),
        (opted_out, await make_pod(api, opted_out, {"app": "gpu-job"})),
    ]
    try:
        async with (
            agent_on(api, node_a, namespace, f"{fullname}-agent", tmp_path) as (agent_pod, agent),
            acting_as(kubeconfig, f"{sa}{fullname}") as operator,
            acting_as(kubeconfig, f"{sa}{fullname}-cleanup") as cleanup,
            acting_as(kubeconfig, f"{sa}{fullname}-agent") as agent_impersonated,
        ):
            scene = Scene(
                node_a=node_a,
                node_b=node_b,
                released=released,
                released_taints=list(released_node["spec"].get("taints") or []),
                agent_pod=agent_pod,
                plugin_container=plugin["containers"][0]["name"],
                plugin_args=list(plugin["containers"][0].get("args") or []),
                scheduler_container=dep["spec"]["template"]["spec"]["containers"][0]["name"],
                host_pid=bool(plugin.get("hostPID")),
                kube_system_pod=victims[0][1],
                evictable=f"{free}/{victims[1][1]}",
                opted_out=f"{opted_out}/{victims[2][1]}",
                fullname=fullname,
                namespace=namespace,
            )
            clients = {"operator": operator, "agent": agent, "hook": cleanup}
            # RBAC's refusals of the agent are asked impersonating it (RBAC reads no claim):
            # the session's audit check (test_rbac_audit.py) holds every request made with the
            # agent's own token to be granted.
            impersonated = {**clients, "agent": agent_impersonated}

            def client_for(row: Row) -> client.ApiClient:
                return (impersonated if row.refused_by == RBAC else clients)[row.who]

            forbidden = [r for r in forbidden_rows(scene) if hook or r.who != "hook"]
            allowed = [r for r in allowed_rows(scene) if hook or r.who != "hook"]
            assert len(forbidden) >= 30
            # The policies take effect a moment after they are created: until a row of each
            # is refused.
            for policy in (OBJECTS, WORKLOADS, AGENT_NODE):
                probe = next(r for r in forbidden if r.refused_by == scene.policy(policy))
                deadline = asyncio.get_running_loop().time() + 30
                while True:
                    try:
                        answer: object = await ask(client_for(probe), probe)
                    except kubeapi.ApiError as exc:
                        if exc.status == 403:
                            break
                        answer = exc
                    assert asyncio.get_running_loop().time() < deadline, (probe.what, answer)
                    await asyncio.sleep(0.5)

            wrong: list[str] = []
            for row in forbidden:
                try:
                    await ask(client_for(row), row)
                except kubeapi.ApiError as exc:
                    problem = refusal_of(row, exc)
                    if problem is not None:
                        wrong.append(f"{row.who} {row.what}: {problem}")
                else:
                    wrong.append(f"{row.who} {row.what}: allowed")
            for row in allowed:
                try:
                    await ask(clients[row.who], row)
                except kubeapi.ApiError as exc:
                    wrong.append(f"{row.who} {row.what} (allowed row): {exc.status} {exc.body!s}")
            assert wrong == [], "\n".join(wrong)

        # nothing was stored: the DaemonSet, the Deployment and node A are as they were
        after = await kubeapi.request(api, "GET", ds_path())
        assert after["spec"]["template"] == ds["spec"]["template"]
        assert (await kubeapi.request(api, "GET", deploy_path()))["spec"] == dep["spec"]
        node = await kubeapi.request(api, "GET", kubeapi.node_path(node_a))
        assert not node["metadata"].get("finalizers")
        assert not node["spec"].get("taints")
    finally:
        for victim_namespace, name in victims:
            with contextlib.suppress(kubeapi.NotFound):
                await kubeapi.request(
                    api,
                    "DELETE",
                    f"/api/v1/namespaces/{victim_namespace}/pods/{name}",
                    query={"gracePeriodSeconds": "0"},
                    field_manager=None,
                )
        for gone in (free, opted_out):
            with contextlib.suppress(kubeapi.NotFound):
                await kubeapi.request(
                    api, "DELETE", f"/api/v1/namespaces/{gone}", field_manager=None
                )

"""The impersonation matrix (`impersonationkit.check_matrix`) holds for a `helm install` of the
chart with its default values under a fullname and namespace of its own: that release's
ServiceAccounts, RBAC and admission policies refuse every row of `matrixkit` and allow the
calls the operator and the agent make (the uninstall hook's ServiceAccount exists only while
`helm uninstall` runs: its rows are left out)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory, helm, unique
from tests.cluster.impersonationkit import check_matrix
from tests.cluster.volcano_env import VolcanoEnv, volcano_env
from vgpu_devcluster.install import chart_dir, ensure_namespace
from vgpu_operator import kubeapi

pytestmark = pytest.mark.cluster

__all__ = ["volcano_env"]


async def test_the_matrix_holds_for_a_helm_install(
    api: client.ApiClient,
    kubeconfig: Path,
    volcano_env: VolcanoEnv,
    make_nodes: NodeFactory,
    tmp_path: Path,
) -> None:
    await volcano_env.install()
    namespace, release = unique("matrix-rel"), unique("mx")
    fullname = f"{release}-op"
    await ensure_namespace(api, namespace)
    await helm(
        kubeconfig,
        "install",
        release,
        str(chart_dir()),
        "-n",
        namespace,
        "--set",
        f"fullnameOverride={fullname}",
    )
    try:
        await check_matrix(
            api,
            kubeconfig,
            make_nodes,
            tmp_path,
            fullname=fullname,
            namespace=namespace,
            hook=False,
        )
    finally:
        await helm(kubeconfig, "uninstall", release, "-n", namespace, "--no-hooks")
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(
                api, "DELETE", f"/api/v1/namespaces/{namespace}", field_manager=None
            )

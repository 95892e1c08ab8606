"""The impersonation matrix (`impersonationkit.check_matrix`) holds for the chart's templates
applied as `vgpu_devcluster.install` renders them (`helm template`, the session's install, with
the suite's keys added to config.policyKeys: `rbackit.session_values`): the controller's, the
node agent's and the uninstall hook's ServiceAccounts are refused every row of `matrixkit` and
allowed their own calls."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory
from tests.cluster.impersonationkit import check_matrix
from tests.cluster.volcano_env import VolcanoEnv, volcano_env
from vgpu_devcluster.install import (
    OPERATOR_NAMESPACE,
    install_agent_access,
    install_agent_admission,
    install_cleanup_access,
    remove,
)

pytestmark = pytest.mark.cluster

__all__ = ["volcano_env"]


async def test_the_chart_service_accounts_are_refused_the_matrix_and_allowed_their_calls(
    api: client.ApiClient,
    kubeconfig: Path,
    installed: object,
    volcano_env: VolcanoEnv,
    make_nodes: NodeFactory,
    tmp_path: Path,
) -> None:
    """`helm template` applied: the chart's templates as vgpu_devcluster.install applies them
    for the session (the agent's policy for this test only), the uninstall hook's too."""
    await install_agent_access(api, tmp_path)
    await install_cleanup_access(api, tmp_path)
    agent_policy = await install_agent_admission(api)
    await volcano_env.install()
    try:
        await check_matrix(
            api,
            kubeconfig,
            make_nodes,
            tmp_path,
            fullname="vgpu-operator",
            namespace=OPERATOR_NAMESPACE,
            hook=True,
        )
    finally:
        await remove(api, agent_policy)

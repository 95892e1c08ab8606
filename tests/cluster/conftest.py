"""Fixtures for tests against a real API server.

One control plane per test session (`cluster`), built and cached by vgpu_devcluster; or
an existing cluster when VGPU_TEST_KUBECONFIG names its kubeconfig (audit-log tests then skip).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.rest import ApiException

from tests.cluster.helpers import (
    ClusterUnderTest,
    NodeFactory,
    PolicyFactory,
    ServiceAccountClient,
    unique,
)
from tests.cluster.rbackit import session_values
from vgpu_devcluster.cluster import LocalCluster, write_kubeconfig
from vgpu_devcluster.install import install_operator_access
from vgpu_devcluster.nodes import NodeSpec, create_gpu_nodes
from vgpu_operator import contract
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi import NotFound, policy_path, request
from vgpu_operator.kubeapi.credentials import Credentials

TEST_CLUSTER_PREFIX = "vgpu-testcluster-"
# test_rbac_audit.py's check of every call the chart's ServiceAccounts made in the session: it
# reads the whole audit log, so it runs after every other test.
SESSION_END_CHECK = "test_every_call_of_the_chart_service_accounts_in_the_session_is_granted"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    last = [item for item in items if item.name == SESSION_END_CHECK]
    items[:] = [item for item in items if item.name != SESSION_END_CHECK] + last


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterUnderTest]:
    external = os.environ.get("VGPU_TEST_KUBECONFIG")
    if external:
        yield ClusterUnderTest(kubeconfig=Path(external), local=None)
        return
    # The prefix names the temp dir, which every component's command line carries: the
    # Makefile checks no process with it is left after the session.
    with LocalCluster.run(prefix=TEST_CLUSTER_PREFIX) as local:
        yield ClusterUnderTest(kubeconfig=local.kubeconfig, local=local)


@pytest.fixture(scope="session")
def kubeconfig(cluster: ClusterUnderTest) -> Path:
    return cluster.kubeconfig


@pytest.fixture(scope="session")
async def api(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    """An admin kubernetes-asyncio client."""
    api_client = await config.new_client_from_config(config_file=str(kubeconfig))
    async with api_client:
        yield api_client


@pytest.fixture
async def namespace(api: client.ApiClient) -> AsyncIterator[str]:
    """A fresh namespace with its default ServiceAccount, deleted afterwards."""
    name = unique("t")
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": name}})
    # The ServiceAccount admission plugin refuses every pod in a namespace until the
    # serviceaccount controller has created "default" there; under load that takes seconds.
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        try:
            await core.read_namespaced_service_account("default", name)
            break
        except ApiException as exc:
            if exc.status != 404 or asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(0.1)
    yield name
    try:
        await core.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
async def service_account_client(
    api: client.ApiClient, kubeconfig: Path, tmp_path: Path
) -> AsyncIterator[ServiceAccountClient]:
    """`await factory(namespace, name)`: a client authenticated as that ServiceAccount (it is
    created if missing), with a token from the TokenRequest API."""
    opened: list[client.ApiClient] = []
    core = client.CoreV1Api(api)

    async def factory(namespace: str, name: str) -> client.ApiClient:
        try:
            await core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise
        token = await core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"expirationSeconds": 3600}}
        )
        server = api.configuration.host
        ca = api.configuration.ssl_ca_cert
        path = write_kubeconfig(
            tmp_path / f"kubeconfig-{namespace}-{name}",
            server,
            token.status.token,
            Path(ca) if ca else None,
            f"system:serviceaccount:{namespace}:{name}",
        )
        sa_client = await config.new_client_from_config(config_file=str(path))
        opened.append(sa_client)
        return sa_client

    yield factory
    for c in opened:
        await c.close()


@pytest.fixture
async def make_nodes(api: client.ApiClient) -> AsyncIterator[NodeFactory]:
    """`await make_nodes(model, count, labels=..., prefix=...)`: simulated nodes with unique
    names, Ready before it returns; deleted after the test."""
    created: list[str] = []

    async def factory(
        model: str | None = "A100-SXM4-80GB",
        count: int = 1,
        *,
        gpus: int = 8,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        prefix: str = "gpu",
        wait_ready: bool = True,
        **kwargs: Any,
    ) -> list[str]:
        base = unique(prefix)
        specs = [
            NodeSpec(
                name=f"{base}-{i}",
                model=model,
                gpus=gpus if model else 0,
                labels=labels or {},
                taints=tuple(taints or ()),
                **kwargs,
            )
            for i in range(count)
        ]
        created.extend(s.name for s in specs)
        return await create_gpu_nodes(api, specs, wait_ready=wait_ready)

    yield factory
    core = client.CoreV1Api(api)
    for name in created:
        try:
            await core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


# -- the operator under test ----------------------------------------------------------------


@pytest.fixture(scope="session")
async def installed(api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory) -> Credentials:
    """CRDs and the chart's ServiceAccount + RBAC installed; the operator's credentials."""
    return await install_operator_access(
        api, tmp_path_factory.mktemp("operator"), values=session_values()
    )


@pytest.fixture
def operator(installed: Credentials) -> Iterator[OperatorThread]:
    """The controller running (in a thread, under its ServiceAccount) for one test."""
    running = OperatorThread(installed, options=ReconcilerOptions(resync_seconds=3600)).start()
    yield running
    running.stop()


@pytest.fixture
async def policies(api: client.ApiClient) -> AsyncIterator[PolicyFactory]:
    """`await policies(name, spec)`: create a VGPUNodePolicy (unique name); deleted after the
    test, while the operator still runs, so its finalizer is released."""
    created: list[str] = []

    async def factory(prefix: str, spec: dict[str, Any]) -> str:
        name = unique(prefix)
        body = {
            "apiVersion": contract.API_VERSION,
            "kind": contract.POLICY_KIND,
            "metadata": {"name": name},
            "spec": spec,
        }
        await request(api, "POST", policy_path(), body=body, field_manager=None)
        created.append(name)
        return name

    yield factory
    for name in created:
        with contextlib.suppress(NotFound):
            await request(api, "DELETE", policy_path(name), field_manager=None)

"""Small helpers shared by the cluster tests."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from vgpu_operator.devcluster.cluster import LocalCluster
from vgpu_operator.kubeapi import request


@dataclass
class ClusterUnderTest:
    kubeconfig: Path
    local: LocalCluster | None

    def require_audit(self) -> LocalCluster:
        if self.local is None:
            pytest.skip("needs the local control plane's audit log (VGPU_TEST_KUBECONFIG is set)")
        return self.local


ServiceAccountClient = Callable[[str, str], Awaitable[client.ApiClient]]
NodeFactory = Callable[..., Awaitable[list[str]]]
PolicyFactory = Callable[[str, dict[str, Any]], Awaitable[str]]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 60.0, interval: float = 0.5
) -> None:
    """Poll `check` until it returns True; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {check.__name__}")
        await asyncio.sleep(interval)


async def apply(api: client.ApiClient, manifest: dict[str, Any]) -> dict[str, Any]:
    """Create the object, or replace its spec/metadata if it exists (a tiny `kubectl apply`)."""
    path = object_path(manifest)
    try:
        return await request(api, "POST", path.rsplit("/", 1)[0], body=manifest, field_manager=None)
    except ApiException as exc:
        if exc.status != 409:
            raise
    current = await request(api, "GET", path)
    manifest = {**manifest, "metadata": {**manifest["metadata"]}}
    manifest["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    return await request(api, "PUT", path, body=manifest, field_manager=None)


_PLURALS = {
    "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "CustomResourceDefinition": "customresourcedefinitions",
    "ConfigMap": "configmaps",
    "DaemonSet": "daemonsets",
    "Deployment": "deployments",
    "VGPUNodePolicy": "vgpunodepolicies",
    "Node": "nodes",
}


def object_path(manifest: dict[str, Any]) -> str:
    api_version: str = manifest["apiVersion"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    meta = manifest["metadata"]
    ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"{base}{ns}/{_PLURALS[manifest['kind']]}/{meta['name']}"

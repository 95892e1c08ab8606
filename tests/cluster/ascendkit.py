"""The Ascend scenario's shared parts: the operator configuration with HAMi's Ascend objects,
and the scheduler's version as `kubectl set image` changes it (test_ascend_versions.py,
test_ascend_soft_slicing.py)."""

from __future__ import annotations

from kubernetes_asyncio import client

from vgpu_operator import kubeapi
from vgpu_operator.controller.snapshot import workload_path

CONFIG = "ascendVnpu: {enabled: true}\n"  # the Ascend objects' names as HAMi ships them
SCHEDULER = workload_path("Deployment", "volcano-system", "volcano-scheduler")
IMAGE = "docker.io/volcanosh/vc-scheduler:{}"  # the manifest's, at another tag


async def set_version(api: client.ApiClient, tag: str) -> None:
    """The scheduler's image at `tag`, as `kubectl set image` changes it."""
    container = {"name": "volcano-scheduler", "image": IMAGE.format(tag)}
    await kubeapi.request(
        api,
        "PATCH",
        SCHEDULER,
        body={"spec": {"template": {"spec": {"containers": [container]}}}},
        content_type="application/strategic-merge-patch+json",
        field_manager="kubectl-set",
    )

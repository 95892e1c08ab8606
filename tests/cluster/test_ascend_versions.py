"""The `vnpus:` the operator writes into the scheduler's device config, in the form the running
scheduler's version parses, against Volcano's and HAMi's own manifests: the demo's (Volcano
v1.15.1, HAMi's volcano-vgpu-device-plugin v1.12.0) plus HAMi's Ascend plugin v1.4.0
(`hami-scheduler-device`, whose `vnpus:` is the `{hamiVnpuCore, configs}` wrapper), one Ascend
node in an ascend-vnpu pool and `ascendVnpu.enabled: true`. The scheduler's version is its image
tag (core/volcano/component_versions.py `scheduler_vnpus_form`), changed here as an upgrade or a
downgrade changes it:

- v1.15.1 (as shipped) parses the wrapper and the list
  (volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/vnpu.go): the operator mirrors the
  wrapper; a list it keeps, and a wrapper written by hand too; no rule speaks;
- v1.14.3 and v1.15.0 declare `VNPUs []VNPUConfig`
  (volcano-sh/volcano@v1.15.0:pkg/scheduler/api/devices/config/config.go) and fall back to their
  built-in defaults on the wrapper: the operator writes the list of the wrapper's configs;
  `hami-scheduler-device` keeps its wrapper (the Ascend plugin's, never written); no rule
  reports a fallback once it is written."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.ascendkit import CONFIG, set_version
from tests.cluster.helpers import NodeFactory, PolicyFactory, eventually, unique
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_devcluster import upstream
from vgpu_operator import kubeapi
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.controller.snapshot import configmap_path, read_snapshot
from vgpu_operator.core.rules import run_rules
from vgpu_operator.models.config import load_config

pytestmark = pytest.mark.cluster

__all__ = ["volcano_operator"]

NS, KEY = "kube-system", "device-config.yaml"
DEVICE_CM, ASCEND_CM = "volcano-vgpu-device-config", "hami-scheduler-device"
VNPUS_RULES = {"vnpus-form", "vnpus-mirror"}
FALLBACK = "built-in defaults"  # how rule vnpus-form words a scheduler's fallback


def shipped_scheduler_device() -> dict[str, Any]:
    [cm] = [d for d in upstream.ascend_documents() if d["metadata"]["name"] == ASCEND_CM]
    return dict(cm["data"])


async def vnpus(api: client.ApiClient, name: str) -> Any:
    cm = await kubeapi.request(api, "GET", configmap_path(NS, name))
    return (yaml.safe_load(cm["data"][KEY]) or {}).get("vnpus")


async def a_pass_after_now(op: OperatorThread) -> None:
    """Until a pass of the operator read the cluster after now (and made its writes)."""
    since = datetime.now(UTC)

    async def read_after() -> bool:
        volcano = op.controller.volcano if op.controller is not None else None
        read_at = volcano.published.read_at if volcano is not None else None
        return read_at is not None and read_at > since

    await eventually(read_after, timeout=30, interval=0.2)


async def quiet(api: client.ApiClient) -> None:
    """No rule reports a `vnpus:` problem or a scheduler that falls back to its defaults."""
    config = load_config(CONFIG)
    findings = run_rules(await read_snapshot(api, config)).findings
    loud = [(f.id, f.message) for f in findings if f.id in VNPUS_RULES or FALLBACK in f.message]
    assert loud == [], loud


async def until(check: Callable[[], Awaitable[bool]], what: list[Any]) -> None:
    try:
        await eventually(check, timeout=30, interval=0.3)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {what}") from None


async def test_vnpus_in_the_form_each_scheduler_version_parses(
    api: client.ApiClient,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    volcano_operator: OperatorFactory,
) -> None:
    installed = await upstream.install(api, hami="v1.12.0", ascend=True)
    try:
        source = yaml.safe_load(shipped_scheduler_device()[KEY])["vnpus"]
        assert set(source) == {"hamiVnpuCore", "configs"}  # HAMi ships the wrapper
        listed = source["configs"]
        pool = unique("ascend")
        await make_nodes(
            "Ascend910B3", 1, gpus=8, labels={"test/pool": pool, "ascend": "on"}, prefix="npu"
        )
        op = volcano_operator(CONFIG)
        await policies(
            "ascend", {"mode": "ascend-vnpu", "nodeSelector": {"matchLabels": {"test/pool": pool}}}
        )
        seen: list[Any] = []

        async def written(form: Any) -> bool:
            seen[:] = [await vnpus(api, DEVICE_CM)]
            return bool(seen[0] == form)

        # v1.15.1 (the manifest's): the Ascend plugin's wrapper, mirrored as it is
        await until(lambda: written(source), seen)
        await quiet(api)

        for tag in ("v1.14.3", "v1.15.1", "v1.15.0"):
            await set_version(api, tag)
            if tag == "v1.15.1":
                # the list of the step before stays (it reads both), and so does a wrapper
                # written by hand
                await a_pass_after_now(op)
                assert await vnpus(api, DEVICE_CM) == listed
                await quiet(api)
                path = configmap_path(NS, DEVICE_CM)
                cm = await kubeapi.request(api, "GET", path)
                doc = yaml.safe_load(cm["data"][KEY])
                doc["vnpus"] = copy.deepcopy(source)
                cm["data"][KEY] = yaml.safe_dump(doc, sort_keys=False)
                await kubeapi.request(api, "PUT", path, body=cm, field_manager="kubectl-edit")
                await a_pass_after_now(op)
                assert await vnpus(api, DEVICE_CM) == source
            else:
                # a list-only version: the list of the wrapper's configs
                await until(lambda: written(listed), seen)
            await quiet(api)
            # the Ascend plugin's own ConfigMap keeps its wrapper, as shipped
            cm = await kubeapi.request(api, "GET", configmap_path(NS, ASCEND_CM))
            assert cm["data"] == shipped_scheduler_device(), tag
    finally:
        await upstream.uninstall(api, installed)

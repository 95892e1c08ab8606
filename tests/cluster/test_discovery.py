"""Discovery on the real apiserver: Volcano's and HAMi's own manifests applied as a person
installed them by hand, moved (seed 002 style) to other namespaces and renamed, and the operator
config's `auto` resolves to exactly those objects, at the controller's start and in `doctor`.

The scheduler Deployment and its ConfigMap (renamed) and the plugin DaemonSet with its node
config go to a fresh namespace; the device config goes to `volcano-system`, where the plugin
looks when `kube-system` has none, with the count resource renamed to `nvidia.com/gpu`.

Discovery reads with the admin credentials here: it lists Deployments and reads ConfigMaps
outside the names the chart's Roles grant (a narrower Role ends in the defaults and a note).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.volcano_ops import run_doctor
from vgpu_devcluster import upstream
from vgpu_devcluster.install import apply, object_path
from vgpu_operator import kubeapi
from vgpu_operator.controller.discovery import read_and_discover
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.controller.snapshot import configmap_path
from vgpu_operator.kubeapi.credentials import resolve
from vgpu_operator.models.config import load_config

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]
SCHED_CM = "volcano-scheduler-conf-site"  # renamed by the person who installed it

AUTO_CONFIG = """
mode: report
resourceNames: auto
deviceConfig: auto
nodeConfig: auto
devicePlugin: auto
scheduler: {configMap: auto, deployment: auto}
"""


def hand_installed(namespace: str) -> list[Obj]:
    """The objects as seed 002's engineer left them (names and namespaces changed, contents as
    shipped apart from the renamed count resource and the scheduler's deviceshare arguments)."""
    volcano = upstream.volcano_documents()
    hami = upstream.hami_vgpu_documents("v1.12.0")
    sched_cm = copy.deepcopy(
        next(
            d
            for d in volcano
            if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("volcano-scheduler")
        )
    )
    sched = copy.deepcopy(next(d for d in volcano if d["kind"] == "Deployment"))
    sched_cm["metadata"] = {"name": SCHED_CM, "namespace": namespace}
    conf = yaml.safe_load(sched_cm["data"]["volcano-scheduler.conf"])
    conf["tiers"][1]["plugins"].append(
        {
            "name": "deviceshare",
            "arguments": {
                "deviceshare.VGPUEnable": True,
                "deviceshare.KnownGeometriesCMNamespace": "volcano-system",
            },
        }
    )
    sched_cm["data"]["volcano-scheduler.conf"] = yaml.safe_dump(conf)
    sched["metadata"]["namespace"] = namespace
    sched["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] = SCHED_CM
    out = [sched_cm, sched]
    for doc in copy.deepcopy(hami):
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "volcano-vgpu-device-config":
            doc["metadata"]["namespace"] = "volcano-system"
            text = doc["data"]["device-config.yaml"]
            doc["data"]["device-config.yaml"] = text.replace(
                "resourceCountName: volcano.sh/vgpu-number", "resourceCountName: nvidia.com/gpu"
            )
            out.append(doc)
        elif doc["kind"] in ("ConfigMap", "DaemonSet"):
            doc["metadata"]["namespace"] = namespace
            out.append(doc)
    return out


@pytest.fixture
async def hand_cluster(api: client.ApiClient, namespace: str) -> AsyncIterator[str]:
    docs = hand_installed(namespace)
    await apply(
        api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "volcano-system"}}
    )
    for doc in docs:
        await apply(api, doc)
    yield namespace
    for doc in docs:  # the namespace goes with the fixture; volcano-system stays
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(api, "DELETE", object_path(doc))


async def expected_device_namespace(api: client.ApiClient) -> str:
    """The plugin reads kube-system's device config when one exists (another test of the same
    session may have left one there), else volcano-system's."""
    try:
        await kubeapi.request(
            api, "GET", configmap_path("kube-system", "volcano-vgpu-device-config")
        )
    except kubeapi.NotFound:
        return "volcano-system"
    return "kube-system"


async def test_auto_resolves_to_the_hand_installed_objects(
    api: client.ApiClient, hand_cluster: str, kubeconfig: Path
) -> None:
    ns = hand_cluster
    found = await read_and_discover(api, load_config(AUTO_CONFIG))
    c = found.config
    assert c.auto_fields() == []
    # (Where another test left Volcano's own scheduler in volcano-system, two are found: the
    # note says so, and the first by namespace, this test's "t-...", is taken.)
    assert (c.scheduler.deployment.namespace, c.scheduler.deployment.name) == (
        ns,
        "volcano-scheduler",
    )
    assert c.scheduler.config_map.ref() == (ns, SCHED_CM)  # from --scheduler-conf's volume
    assert c.scheduler.config_map.key == "volcano-scheduler.conf"
    assert (c.device_plugin.namespace, c.device_plugin.name) == (ns, "volcano-device-plugin")
    assert c.node_config.ref() == (ns, "volcano-vgpu-node-config")
    device_ns = await expected_device_namespace(api)
    assert c.device_config.ref() == (device_ns, "volcano-vgpu-device-config")
    if device_ns == "volcano-system":
        assert c.resource_names.count == "nvidia.com/gpu"  # renamed by a person: kept

    # The controller resolves the same at its start (and logs it).
    admin = resolve(str(kubeconfig), None)
    thread = OperatorThread(
        admin, options=ReconcilerOptions(resync_seconds=3600), config=load_config(AUTO_CONFIG)
    ).start()
    try:
        assert thread.controller is not None
        assert thread.controller.settings.config == c
    finally:
        thread.stop()

    # `doctor --discover` prints what it resolved and why.
    code, out, err = await run_doctor(kubeconfig, "--discover", "-o", "json")
    assert code in (0, 1), err
    report = json.loads(out)
    resolved = {r["field"]: r for r in report["discovery"]["resolved"]}
    assert resolved["nodeConfig.namespace"]["value"] == ns
    assert "/config/config.json" in resolved["nodeConfig.name"]["why"]
    assert resolved["deviceConfig.namespace"]["value"] == device_ns
    code, out, _ = await run_doctor(kubeconfig, "--discover", "--rule", "device-config-location")
    assert "Resolved from the cluster" in out and f"devicePlugin.namespace = {ns}" in out

"""A Volcano/HAMi install on the test cluster, built from the seeds' real configurations
(tests/data/volcano): the scheduler ConfigMap and Deployment (volcano-system), the
device and node ConfigMaps and the device plugin DaemonSet (kube-system), running on simulated
nodes (controller manager, kube-scheduler and kwok give them pods), with the simulated device
plugin registering each node's GPUs when its plugin pod starts.

`consistent=True` installs the ConfigMaps already as the operator renders them for the nodes'
released configurations, so a cluster is consistent once the pods run and have registered.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory, eventually, unique
from tests.kit.volcano_fixtures import POLICY_TAINT, obj, text
from vgpu_devcluster.pluginsim import PluginSimulator
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import (
    configmap_path,
    read_snapshot,
    workload_path,
)
from vgpu_operator.core.nodes.status import timestamp
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.rules.base import Finding
from vgpu_operator.core.volcano.placement import reaches
from vgpu_operator.core.volcano.render import render_device_config, render_node_config
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.kubeapi import policy_path
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.node import NodeConfig, Owned
from vgpu_operator.models.policy import Taint
from vgpu_operator.models.volcano_views import workload_view

SCHED_NS, PLUGIN_NS = "volcano-system", "kube-system"
SCHED_CM, SCHED_DEPLOY = "volcano-scheduler-configmap", "volcano-scheduler"
DEVICE_CM, NODE_CM, PLUGIN_DS = (
    "volcano-vgpu-device-config",
    "volcano-vgpu-node-config",
    "volcano-device-plugin",
)
HAMI = NodeConfig(mode="hami-core", policy="pool", generation=1)
MIG = NodeConfig(mode="mig", policy="pool", generation=1)
# Every object the operator could write to, by path (for resourceVersion comparisons).
VOLCANO_OBJECTS = (
    configmap_path(SCHED_NS, SCHED_CM),
    configmap_path(PLUGIN_NS, DEVICE_CM),
    configmap_path(PLUGIN_NS, NODE_CM),
    configmap_path(SCHED_NS, DEVICE_CM),
    configmap_path(PLUGIN_NS, "hami-device-node-config"),
    configmap_path(PLUGIN_NS, "hami-scheduler-device"),
    workload_path("Deployment", SCHED_NS, SCHED_DEPLOY),
    workload_path("DaemonSet", PLUGIN_NS, PLUGIN_DS),
)


fixture = obj  # a YAML object from tests/data/volcano/


def managed_node(released: NodeConfig) -> dict[str, Any]:
    """Labels, taints and annotations of a node a policy manages (as the controller writes)."""
    labels = {
        contract.LABEL_POLICY: released.policy or "pool",
        contract.LABEL_MODE: released.mode,
        **contract.DEFAULT_NODE_LABELS,
    }
    # the record holds the policy's labels and taints, not the operator's own policy/mode labels
    owned = Owned(
        labels=dict(contract.DEFAULT_NODE_LABELS), taints=[Taint.model_validate(POLICY_TAINT)]
    )
    if released.device_plugin is not None:
        labels[contract.LABEL_DEVICE_PLUGIN] = released.device_plugin
    return {
        "labels": labels,
        "taints": [POLICY_TAINT],
        "annotations": {
            contract.ANN_CONFIG: released.to_annotation(),
            contract.ANN_TARGET: released.to_annotation(),
            contract.ANN_OWNED: owned.to_annotation(),
        },
    }


def pod(
    namespace: str,
    name: str,
    *,
    node: str | None = None,
    labels: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    image: str = "nvidia/cuda:12.2.0-base-ubuntu22.04",
) -> dict[str, Any]:
    """A workload pod scheduled by Volcano (Pending here: no Volcano runs), or bound to `node`
    as Volcano would have bound it."""
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "containers": [{"name": "main", "image": image, "resources": {"limits": limits or {}}}],
        "tolerations": [{"operator": "Exists"}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


@dataclass
class VolcanoEnv:
    api: client.ApiClient
    make_nodes: NodeFactory
    config: OperatorConfig = field(default_factory=OperatorConfig)
    pool: str = field(default_factory=lambda: unique("vpool"))
    nodes: dict[str, NodeConfig | None] = field(default_factory=dict)
    control: str = ""
    sim: PluginSimulator | None = None

    # -- nodes ------------------------------------------------------------------------------
    async def add_nodes(
        self,
        model: str,
        count: int,
        *,
        gpus: int,
        released: NodeConfig | None,
        labels: dict[str, str] | None = None,
    ) -> list[str]:
        """GPU nodes in the pool; `released`: as if a policy managed them already."""
        extra = managed_node(released) if released else {"labels": {}, "annotations": {}}
        names = await self.make_nodes(
            model,
            count,
            gpus=gpus,
            labels={"test/pool": self.pool, **extra["labels"], **(labels or {})},
            taints=extra.get("taints"),
            annotations=extra["annotations"],
            prefix="vg",
        )
        self.nodes.update({n: released for n in names})
        return names

    async def add_control_node(self) -> str:
        [self.control] = await self.make_nodes(
            None, 1, labels={"test/pool": self.pool, "test/role": "control"}, prefix="vc"
        )
        return self.control

    # -- objects ----------------------------------------------------------------------------
    async def put_configmap(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        annotations: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "data": data,
        }
        return await kubeapi.request(
            self.api, "POST", configmap_path(namespace), body=body, field_manager="kubectl-create"
        )

    async def edit_configmap(
        self, namespace: str, name: str, change: Callable[[str], str], key: str
    ) -> None:
        cm = await kubeapi.request(self.api, "GET", configmap_path(namespace, name))
        cm["data"][key] = change(cm["data"][key])
        await kubeapi.request(
            self.api, "PUT", configmap_path(namespace, name), body=cm, field_manager="kubectl-edit"
        )

    async def patch(self, path: str, body: dict[str, Any], strategic: bool = False) -> None:
        await kubeapi.request(
            self.api,
            "PATCH",
            path,
            body=body,
            content_type="application/strategic-merge-patch+json"
            if strategic
            else kubeapi.MERGE_PATCH,
            field_manager="kubectl-edit",
        )

    def plugin_daemonset(self, source: str = "manifest_plugin_daemonset.yaml") -> dict[str, Any]:
        """The plugin DaemonSet on the pool's GPU nodes; when every node is managed already,
        placed as the operator places it (on the nodes labelled for HAMi's plugin)."""
        ds = fixture(source)
        ds["metadata"]["namespace"] = PLUGIN_NS
        spec = ds["spec"]["template"]["spec"]
        spec["nodeSelector"] = {"test/pool": self.pool, "nvidia.com/gpu.present": "true"}
        if self.nodes and all(r is not None for r in self.nodes.values()):
            spec["nodeSelector"][contract.LABEL_DEVICE_PLUGIN] = "hami"
        tolerations = spec.setdefault("tolerations", [])
        if not any(t.get("key") == "volcano.sh/vgpu" for t in tolerations):
            tolerations.append(
                {"key": "volcano.sh/vgpu", "operator": "Exists", "effect": "NoSchedule"}
            )
        spec.pop("serviceAccount", None)
        spec["serviceAccountName"] = PLUGIN_DS
        return ds

    def scheduler_deployment(self, version: str) -> dict[str, Any]:
        dep = fixture("scheduler_deployment.yaml")
        spec = dep["spec"]["template"]["spec"]
        spec["containers"][0]["image"] = f"docker.io/volcanosh/vc-scheduler:{version}"
        spec["nodeSelector"] = {"test/pool": self.pool, "test/role": "control"}
        dep["spec"]["replicas"] = 1
        return dep

    async def install(
        self,
        *,
        scheduler_conf: str = "seed000_scheduler.conf",
        scheduler_version: str = "v1.15.0",
        plugin: dict[str, Any] | None = None,
        consistent: bool = True,
        device_config: str = "manifest_device_config.yaml",
    ) -> None:
        """Create the Volcano/HAMi objects (ConfigMaps first, then the workloads)."""
        with contextlib.suppress(kubeapi.Conflict):
            await kubeapi.request(
                self.api, "POST", "/api/v1/namespaces", body={"metadata": {"name": SCHED_NS}}
            )
        with contextlib.suppress(kubeapi.Conflict):
            await kubeapi.request(
                self.api,
                "POST",
                f"/api/v1/namespaces/{PLUGIN_NS}/serviceaccounts",
                body={"metadata": {"name": PLUGIN_DS}},
            )
        now = timestamp(datetime.now(UTC))
        device = {"device-config.yaml": text(device_config)}
        node = {"config.json": text("manifest_node_config.json")}
        device_ann: dict[str, str] = {}
        node_ann: dict[str, str] = {}
        if consistent:
            mig = [n for n, r in self.nodes.items() if r is not None and r.mode == "mig"]
            models = ["NVIDIA A100-SXM4-40GB"] if mig else []
            rendered = render_device_config({"data": device}, self.config, now, mig_models=models)
            device = rendered.data
            rendered = render_node_config({"data": node}, self.nodes, self.config, now)
            node, node_ann = rendered.data, rendered.annotations
        await self.put_configmap(PLUGIN_NS, DEVICE_CM, device, device_ann)
        await self.put_configmap(PLUGIN_NS, NODE_CM, node, node_ann)
        await self.put_configmap(
            SCHED_NS, SCHED_CM, {"volcano-scheduler.conf": text(scheduler_conf)}
        )
        await kubeapi.request(
            self.api,
            "POST",
            workload_path("Deployment", SCHED_NS),
            body=self.scheduler_deployment(scheduler_version),
            field_manager="kubectl-create",
        )
        await kubeapi.request(
            self.api,
            "POST",
            workload_path("DaemonSet", PLUGIN_NS),
            body=plugin or self.plugin_daemonset(),
            field_manager="kubectl-create",
        )
        self.sim = PluginSimulator(self.api, namespace=PLUGIN_NS, name=PLUGIN_DS).start()

    async def teardown(self) -> None:
        if self.sim is not None:
            await self.sim.stop()
        for path in VOLCANO_OBJECTS:
            with contextlib.suppress(kubeapi.NotFound):
                await kubeapi.request(
                    self.api, "DELETE", path, query={"propagationPolicy": "Background"}
                )
        for ds in ("ascend-device-plugin-daemonset", "hami-ascend-device-plugin"):
            with contextlib.suppress(kubeapi.NotFound):
                await kubeapi.request(
                    self.api,
                    "DELETE",
                    workload_path("DaemonSet", PLUGIN_NS, ds),
                    query={"propagationPolicy": "Background"},
                )

        async def gone() -> bool:
            plugin = await self.pods(PLUGIN_NS, f"name={PLUGIN_DS}", live=False)
            sched = await self.pods(SCHED_NS, "app=volcano-scheduler", live=False)
            return not plugin and not sched

        await eventually(gone, timeout=60)

    # -- reading ----------------------------------------------------------------------------
    async def pods(
        self, namespace: str, selector: str, *, live: bool = True
    ) -> list[dict[str, Any]]:
        body = await kubeapi.request(
            self.api,
            "GET",
            f"/api/v1/namespaces/{namespace}/pods",
            query={"labelSelector": selector},
        )
        items = body.get("items") or []
        if live:
            items = [
                p
                for p in items
                if not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") == "Running"
            ]
        return list(items)

    async def plugin_pods(self) -> dict[str, str]:
        """node -> uid of its live, Running plugin pod."""
        return {
            p["spec"]["nodeName"]: p["metadata"]["uid"]
            for p in await self.pods(PLUGIN_NS, f"name={PLUGIN_DS}")
        }

    async def scheduler_pods(self) -> set[str]:
        return {p["metadata"]["uid"] for p in await self.pods(SCHED_NS, "app=volcano-scheduler")}

    async def placed_nodes(self) -> set[str]:
        """The pool's GPU nodes the plugin DaemonSet places a pod on now (its nodeSelector,
        affinity and tolerations, which the operator may have changed)."""
        ds = await kubeapi.request(
            self.api, "GET", workload_path("DaemonSet", PLUGIN_NS, PLUGIN_DS)
        )
        view = workload_view(ds)
        out = set()
        for name in self.nodes:
            node = await kubeapi.request(self.api, "GET", kubeapi.node_path(name))
            if reaches(view, node):
                out.add(name)
        return out

    async def wait_running(self, timeout: float = 90) -> None:
        """Every GPU node of the pool the plugin DaemonSet places a pod on has one Running plugin
        pod the simulator registered, and the scheduler runs."""

        async def running() -> bool:
            gpu_nodes = await self.placed_nodes()
            pods = await self.pods(PLUGIN_NS, f"name={PLUGIN_DS}", live=False)
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            mine = {p["spec"].get("nodeName"): p for p in live}
            if set(mine) != gpu_nodes or len(live) != len(gpu_nodes):
                return False
            if any((p.get("status") or {}).get("phase") != "Running" for p in live):
                return False
            assert self.sim is not None
            done = {r.pod_uid for r in self.sim.registrations}
            if any(p["metadata"]["uid"] not in done for p in live):
                return False
            return (
                len(await self.scheduler_pods()) == 1
                and len(await self.pods(SCHED_NS, "app=volcano-scheduler", live=False)) == 1
            )

        await eventually(running, timeout=timeout, interval=0.3)

    async def snapshot(self) -> ClusterSnapshot:
        return await read_snapshot(self.api, self.config)

    async def findings(self, rule_id: str | None = None) -> list[Finding]:
        results = run_rules(await self.snapshot(), only=[rule_id] if rule_id else None)
        return results.findings

    async def resource_versions(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for path in VOLCANO_OBJECTS:
            with contextlib.suppress(kubeapi.NotFound):
                obj = await kubeapi.request(self.api, "GET", path)
                out[path] = obj["metadata"]["resourceVersion"]
        return out


def json_entries(data: str) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in json.loads(data)["nodeconfig"]}


@pytest.fixture
async def volcano_env(api: client.ApiClient, make_nodes: NodeFactory) -> AsyncIterator[VolcanoEnv]:
    """An empty VolcanoEnv (add nodes, then `install()`); everything removed afterwards."""
    env = VolcanoEnv(api, make_nodes)
    yield env
    await env.teardown()


STEADY_RULES = {
    "restart-needed",
    "node-config-rendered",
    "device-config-rendered",
    "node-registration",
}


def hami(group: str, **extra: object) -> dict[str, object]:
    return {"nodeSelector": {"matchLabels": {"test/group": group}}, "mode": "hami-core", **extra}


async def steady(env: VolcanoEnv, managed: list[str], timeout: float = 90) -> None:
    """The `managed` nodes have their node-config entries, pods are running and registered, and
    nothing is left to render or restart."""

    async def rendered() -> bool:
        cm = await kubeapi.request(env.api, "GET", configmap_path(PLUGIN_NS, NODE_CM))
        return set(managed) <= set(json_entries(cm["data"]["config.json"]))

    await eventually(rendered, timeout=timeout, interval=0.3)
    await env.wait_running(timeout=timeout)

    left: list[str] = []

    async def clean() -> bool:
        left[:] = [f"{f.id}: {f.message}" for f in await env.findings() if f.id in STEADY_RULES]
        return not left

    try:
        await eventually(clean, timeout=timeout, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; left: {left}") from None
    await env.wait_running(timeout=timeout)


async def consistent_condition(api: client.ApiClient, policy: str) -> dict[str, Any]:
    obj = await kubeapi.request(api, "GET", policy_path(policy))
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "ConfigConsistent"), {})

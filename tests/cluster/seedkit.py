"""The seed procedures' end states on the local control plane
(docs/from-a-hand-configured-cluster.md): `SeedCluster` builds what a seed's write-up leaves behind
(its ConfigMaps in its
namespaces, the scheduler Deployment and the device plugin DaemonSet running on simulated nodes,
hand-set labels and taints, running GPU pods) and removes it afterwards. The README's way onto
it (observe, enforce, a deliberate change): tests/cluster/seedkit_phases.py.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory, eventually, unique
from tests.cluster.rbackit import session_values
from tests.cluster.volcano_env import pod, text
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.agentproc import FakeGpus, fake_model
from vgpu_devcluster.install import (
    OPERATOR_ADMISSION_POLICY,
    apply,
    install_operator_roles,
    render_chart,
)
from vgpu_devcluster.pluginsim import PluginSimulator
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path, workload_path

SCHED_CM, SCHED_KEY = "volcano-scheduler-configmap", "volcano-scheduler.conf"
DEVICE_CM, DEVICE_KEY = "volcano-vgpu-device-config", "device-config.yaml"
NODE_CM, NODE_KEY = "volcano-vgpu-node-config", "config.json"
PLUGIN, SCHEDULER = "volcano-device-plugin", "volcano-scheduler"
WORKLOADS = "default"  # where the seeds' GPU pods run


def operator_admission(values: Mapping[str, str]) -> list[dict[str, Any]]:
    """The chart's admission policy for the operator (and its binding) for `values` (with the
    session's policyKeys, as the session installed it: `rbackit.session_values`)."""
    docs = render_chart("admission-policies.yaml", values={**session_values(), **values})
    return [d for d in docs if d["metadata"]["name"] == OPERATOR_ADMISSION_POLICY]


@dataclass(frozen=True)
class Where:
    """The namespaces a seed keeps things in (seed 002: all in volcano-system)."""

    scheduler: str = "volcano-system"
    plugin: str = "kube-system"


@dataclass
class SeedCluster:
    api: client.ApiClient
    make_nodes: NodeFactory
    where: Where = field(default_factory=Where)
    pool: str = field(default_factory=lambda: unique("seed"))
    nodes: list[str] = field(default_factory=list)  # the GPU nodes
    control: str = ""
    sim: PluginSimulator | None = None
    created: list[str] = field(default_factory=list)  # paths, deleted afterwards
    workloads: list[str] = field(default_factory=list)  # GPU pod names in WORKLOADS
    restore_admission: bool = False

    # -- building ---------------------------------------------------------------------------
    async def create(self, path: str, body: dict[str, Any], *, keep: bool = False) -> None:
        """POST as a person's `kubectl create` would; deleted afterwards unless `keep`."""
        try:
            await kubeapi.request(self.api, "POST", path, body=body, field_manager="kubectl")
        except kubeapi.Conflict:
            if not keep:
                raise
            return
        if not keep:
            self.created.append(f"{path}/{body['metadata']['name']}")

    async def namespaces(self, *, grant_values: Mapping[str, str] | None = None) -> None:
        """The seed's namespaces, the plugin's ServiceAccount, and the operator's Roles as the
        chart renders them for `grant_values` (the objects named in the operator config)."""
        for ns in {self.where.scheduler, self.where.plugin}:
            await self.create("/api/v1/namespaces", {"metadata": {"name": ns}}, keep=True)
        await self.create(
            f"/api/v1/namespaces/{self.where.plugin}/serviceaccounts",
            {"metadata": {"name": PLUGIN}},
            keep=True,
        )
        if grant_values:
            # applied and waited for until the RBAC authorizer grants them (it reads Roles
            # from an informer: an operator started at once would be refused its first calls)
            mine = (self.where.scheduler, self.where.plugin)
            await install_operator_roles(self.api, dict(grant_values), mine)
            # the admission policy names the objects and plugin pods the operator may write:
            # rendered for these values, as their `helm install` renders it (the defaults are
            # put back afterwards: it is cluster-wide, the other tests run with them)
            for doc in operator_admission(grant_values):
                await apply(self.api, doc)
            self.restore_admission = True

    async def add_control_node(self) -> str:
        [self.control] = await self.make_nodes(
            None, 1, labels={"test/pool": self.pool, "test/role": "control"}, prefix="sc"
        )
        return self.control

    async def add_gpu_nodes(self, model: str, count: int, **kwargs: Any) -> list[str]:
        labels = {"test/pool": self.pool, **kwargs.pop("labels", {})}
        names = await self.make_nodes(model, count, labels=labels, prefix="sg", **kwargs)
        self.nodes += names
        return names

    async def configmap(self, namespace: str, name: str, data: dict[str, str]) -> None:
        body = {"metadata": {"name": name, "namespace": namespace}, "data": data}
        await self.create(configmap_path(namespace), body)

    async def scheduler(self, conf: str, fixture: dict[str, Any]) -> None:
        """The scheduler ConfigMap (`conf`: its text) and Deployment, on the control node."""
        await self.configmap(self.where.scheduler, SCHED_CM, {SCHED_KEY: conf})
        fixture["spec"]["replicas"] = 1
        spec = fixture["spec"]["template"]["spec"]
        spec["nodeSelector"] = {"test/pool": self.pool, "test/role": "control"}
        await self.create(workload_path("Deployment", self.where.scheduler), fixture)

    async def plugin(self, daemonset: dict[str, Any], *, simulate: bool = True) -> None:
        """The device plugin DaemonSet, kept to this seed's GPU nodes (`test/pool` and GFD's
        `nvidia.com/gpu.present`: the shared test cluster has other tests' nodes); `simulate`:
        HAMi's plugin process is played by the simulator (it registers each node's GPUs)."""
        await self.create(workload_path("DaemonSet", self.where.plugin), self._kept(daemonset))
        if simulate:
            self.simulate()

    def simulate(self) -> None:
        """From now on the simulator plays HAMi's plugin process in the plugin DaemonSet's pods."""
        self.sim = PluginSimulator(self.api, namespace=self.where.plugin, name=PLUGIN).start()

    async def replace_plugin(self, daemonset: dict[str, Any]) -> None:
        """Another manifest's plugin DaemonSet of the same name applied over the running one (a
        person's `kubectl apply`: its controller rolls the pods over to the new template)."""
        path = workload_path("DaemonSet", self.where.plugin, daemonset["metadata"]["name"])
        body = self._kept(daemonset)
        live = await kubeapi.request(self.api, "GET", path)
        body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
        await kubeapi.request(self.api, "PUT", path, body=body, field_manager="kubectl")

    def _kept(self, daemonset: dict[str, Any]) -> dict[str, Any]:
        """`daemonset` kept to this seed's GPU nodes, with the seed's ServiceAccount."""
        daemonset["metadata"]["namespace"] = self.where.plugin
        spec = daemonset["spec"]["template"]["spec"]
        spec["nodeSelector"] = {
            **(spec.get("nodeSelector") or {}),
            "test/pool": self.pool,
            contract.GFD_PRESENT: "true",
        }
        spec.pop("serviceAccount", None)
        spec["serviceAccountName"] = PLUGIN
        return daemonset

    async def gpu_pod(
        self, node: str, limits: dict[str, str], annotations: dict[str, str] | None = None
    ) -> str:
        """A GPU pod bound to `node` as Volcano binds it (with its device pick)."""
        name = f"{self.pool}-{len(self.workloads)}"
        body = pod(WORKLOADS, name, node=node, limits=limits, annotations=annotations)
        await self.create(f"/api/v1/namespaces/{WORKLOADS}/pods", body)
        self.workloads.append(name)
        return name

    async def wait_running(self, *, plugin_nodes: int | None = None) -> None:
        """The scheduler, a plugin pod per GPU node (registered, when simulated) and every GPU
        pod run."""
        want = len(self.nodes) if plugin_nodes is None else plugin_nodes

        async def running() -> bool:
            plugin = await self.pods(self.where.plugin, f"name={PLUGIN}")
            if len(plugin) != want or len(await self.scheduler_pods()) != 1:
                return False
            if self.sim is not None:
                done = {r.pod_uid for r in self.sim.registrations}
                if not set(plugin.values()) <= done:
                    return False
            pods = await self.gpu_pods()
            return len(pods) == len(self.workloads) and all(
                phase == "Running" for _, phase in pods.values()
            )

        await eventually(running, timeout=90, interval=0.3)

    async def teardown(self) -> None:
        if self.sim is not None:
            await self.sim.stop()
        if self.restore_admission:
            for doc in operator_admission({}):
                await apply(self.api, doc)
        for path in reversed(self.created):
            with contextlib.suppress(kubeapi.NotFound):
                await kubeapi.request(
                    self.api,
                    "DELETE",
                    path,
                    query={"propagationPolicy": "Background", "gracePeriodSeconds": "0"},
                )

    # -- reading ----------------------------------------------------------------------------
    async def pods(self, namespace: str, selector: str) -> dict[str, str]:
        """name -> uid of the pods matching `selector` that are not being deleted."""
        body = await kubeapi.request(
            self.api,
            "GET",
            f"/api/v1/namespaces/{namespace}/pods",
            query={"labelSelector": selector},
        )
        return {
            p["metadata"]["name"]: p["metadata"]["uid"]
            for p in body.get("items") or []
            if not p["metadata"].get("deletionTimestamp")
        }

    async def plugin_pods(self) -> dict[str, str]:
        """node -> uid of its live plugin pod."""
        body = await kubeapi.request(
            self.api,
            "GET",
            f"/api/v1/namespaces/{self.where.plugin}/pods",
            query={"labelSelector": f"name={PLUGIN}"},
        )
        return {
            p["spec"].get("nodeName", ""): p["metadata"]["uid"]
            for p in body.get("items") or []
            if not p["metadata"].get("deletionTimestamp")
        }

    async def scheduler_pods(self) -> dict[str, str]:
        return await self.pods(self.where.scheduler, "app=volcano-scheduler")

    async def gpu_pods(self) -> dict[str, tuple[str, str]]:
        """name -> (uid, phase) of the seed's GPU pods that are not being deleted."""
        body = await kubeapi.request(self.api, "GET", f"/api/v1/namespaces/{WORKLOADS}/pods")
        return {
            p["metadata"]["name"]: (p["metadata"]["uid"], (p.get("status") or {}).get("phase"))
            for p in body.get("items") or []
            if p["metadata"]["name"] in self.workloads
            and not p["metadata"].get("deletionTimestamp")
        }

    async def configmaps(self) -> dict[str, dict[str, str]]:
        """ "namespace/name" -> data of every ConfigMap this seed created."""
        out = {}
        for path in self.created:
            if "/configmaps/" in path:
                ns, name = path.split("/namespaces/")[1].split("/configmaps/")
                cm = await kubeapi.request(self.api, "GET", configmap_path(ns, name))
                out[f"{ns}/{name}"] = dict(cm.get("data") or {})
        return out

    async def node_state(self) -> dict[str, tuple[dict[str, str], list[dict[str, Any]]]]:
        """node -> (labels, taints) of the GPU nodes."""
        out = {}
        for name in self.nodes:
            node = await kubeapi.request(self.api, "GET", kubeapi.node_path(name))
            out[name] = (
                dict(node["metadata"].get("labels") or {}),
                node["spec"].get("taints") or [],
            )
        return out

    async def before(self) -> Before:
        return Before(
            configmaps=await self.configmaps(),
            nodes=await self.node_state(),
            plugin=await self.plugin_pods(),
            scheduler=await self.scheduler_pods(),
            gpu_pods=await self.gpu_pods(),
        )


@dataclass(frozen=True)
class Before:
    configmaps: dict[str, dict[str, str]]
    nodes: dict[str, tuple[dict[str, str], list[dict[str, Any]]]]
    plugin: dict[str, str]
    scheduler: dict[str, str]
    gpu_pods: dict[str, tuple[str, str]]


@pytest.fixture
async def seed_cluster(
    api: client.ApiClient, make_nodes: NodeFactory
) -> AsyncIterator[SeedCluster]:
    """An empty SeedCluster (build it in the test); everything it created is removed after."""
    env = SeedCluster(api, make_nodes)
    yield env
    await env.teardown()


def fixture_yaml(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load(text(name))
    assert isinstance(loaded, dict)
    return loaded


# One policy per kind of node, on the labels the person set first
# (docs/from-a-hand-configured-cluster.md, seed 001).
HAMI_POLICY = {"mode": "hami-core", "nodeLabels": {}, "nodeTaints": []}


MIG_POLICY = {"mode": "mig", "mig": {"partitioning": "dynamic"}, "nodeLabels": {}, "nodeTaints": []}


MIG_MODEL = "A100-SXM4-80GB"


PROFILE_1G_10GB = "19"  # the A100 80GB's 1g.10gb GPU instance profile


def effects_since(gpus: FakeGpus, start: int) -> list[dict[str, object]]:
    """The fake nvidia-smi's calls since entry `start` that changed the hardware."""
    return [e for e in gpus.log()[start:] if e.get("effects")]


async def build_seed001(
    env: SeedCluster,
    workdir: Path,
    hami_nodes: int = 2,
    mig_nodes: int = 2,
    scheduler_conf: str | None = None,
    device_config: str | None = None,
    scheduler_version: str | None = None,
) -> dict[str, FakeGpus]:
    """Seed 001's end state (`scheduler_conf`, `device_config`: other texts, seed 004's;
    `scheduler_version`: another vc-scheduler image tag than the fixture's); returns the MIG
    nodes' fake GPUs."""
    await env.namespaces()
    await env.add_control_node()
    hami = await env.add_gpu_nodes("RTX-4090", hami_nodes, gpus=4, labels={"pool": "hami"})
    mig = await env.add_gpu_nodes(MIG_MODEL, mig_nodes, gpus=2, labels={"pool": "mig"})
    gpus: dict[str, FakeGpus] = {}
    for name in mig:  # `sudo nvidia-smi -mig 1` on each MIG node
        gpus[name] = FakeGpus.create(workdir / name, name, fake_model(MIG_MODEL), 2, mig=True)
    ns = env.where.plugin
    device = device_config or text("manifest_device_config.yaml")
    await env.configmap(ns, DEVICE_CM, {DEVICE_KEY: device})
    # HAMi's doc/config.md: the MIG nodes' entries say `operatingmode: mig`
    node_config = text("manifest_node_config.json").rstrip().removesuffix("}").rstrip()
    node_config = node_config.removesuffix("]").rstrip()
    extra = "".join(f',\n        {{"name": "{n}", "operatingmode": "mig"}}' for n in mig)
    await env.configmap(ns, NODE_CM, {NODE_KEY: f"{node_config}{extra}\n    ]\n}}\n"})
    conf = scheduler_conf or text("seed001_scheduler.conf")
    scheduler = fixture_yaml("scheduler_deployment.yaml")
    if scheduler_version is not None:
        container = scheduler["spec"]["template"]["spec"]["containers"][0]
        container["image"] = container["image"].rsplit(":", 1)[0] + f":{scheduler_version}"
    await env.scheduler(conf, scheduler)
    await env.plugin(fixture_yaml("manifest_plugin_daemonset.yaml"))
    for name in hami:
        await env.gpu_pod(
            name,
            {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"},
            {
                "volcano.sh/vgpu-mode": "hami-core",
                "volcano.sh/vgpu-ids-new": f"GPU-{name}-0,NVIDIA,3000,0:",
            },
        )
    for name, fake in gpus.items():
        # HAMi's plugin carved the instance for the pod at allocation time (nvidia-mig-parted)
        env_vars = {**os.environ, fs.ENV_STATE: str(fake.state)}
        subprocess.run(
            [str(fake.binary), "mig", "-i", "0", "-cgi", PROFILE_1G_10GB, "-C"],
            env=env_vars,
            check=True,
            capture_output=True,
        )
        await env.gpu_pod(
            name,
            {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"},
            {"volcano.sh/vgpu-mode": "mig"},
        )
    await env.wait_running()
    return gpus

"""Builders for the Volcano/HAMi tests: cluster objects as the API returns them, made from the
seeds' real configurations (tests/data/volcano/), and a consistent cluster the rule tests break
one thing at a time. The consistent cluster is itself produced by the renderers and the simulated
device plugin, so it is what `enforce` mode converges to."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from vgpu_devcluster import upstream
from vgpu_devcluster.fakeplugin import simulate_registration
from vgpu_devcluster.nodes import GPU_MODELS, NodeSpec, gpu_node_manifest
from vgpu_operator import contract
from vgpu_operator.core.volcano.render import (
    render_device_config,
    render_node_config,
    render_scheduler_conf,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.node import NodeConfig, Owned
from vgpu_operator.models.policy import Taint
from vgpu_operator.models.volcano_views import Version

FIXTURES = Path(__file__).parents[1] / "data" / "volcano"
T_CREATED = "2026-01-01T00:00:00Z"
T_CHANGED = "2026-01-02T00:00:00Z"
T_STARTED = "2026-01-03T00:00:00Z"
PLUGIN_V1_12 = Version(1, 12, 0)
POLICY_TAINT = {"key": "volcano.sh/vgpu", "value": "hami", "effect": "NoSchedule"}


KEY = "device-config.yaml"
MANIFEST = "manifest_device_config.yaml"


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def rendered_manifest() -> str:
    """The plugin manifest's device config as the default operator config renders it for
    `healthy()`'s cluster (an A100-40GB in MIG mode): the same but for its MIG memory, lowered to
    what the instances have (core.volcano.mig_memory)."""
    out = render_device_config(
        configmap("kube-system", "volcano-vgpu-device-config", {KEY: text(MANIFEST)}),
        OperatorConfig(),
        "t",
        mig_models=["NVIDIA A100-SXM4-40GB"],
    )
    return out.data[KEY]


def without_memory(doc: Any) -> Any:
    """A parsed document with every `memory:` key dropped (to compare all but MIG memory)."""
    if isinstance(doc, dict):
        return {k: without_memory(v) for k, v in doc.items() if k != "memory"}
    if isinstance(doc, list):
        return [without_memory(v) for v in doc]
    return doc


def obj(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load(text(name))
    assert isinstance(loaded, dict)
    return loaded


def configmap(
    namespace: str,
    name: str,
    data: dict[str, str],
    annotations: dict[str, str] | None = None,
    changed: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "creationTimestamp": T_CREATED,
        "annotations": dict(annotations or {}),
    }
    if changed:
        meta["managedFields"] = [
            {
                "manager": "kubectl-edit",
                "operation": "Update",
                "time": changed,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {".": {}}},
            }
        ]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}


def scheduler_cm(conf: str) -> dict[str, Any]:
    return configmap(
        "volcano-system", "volcano-scheduler-configmap", {"volcano-scheduler.conf": conf}
    )


def deployment(version: str = "v1.15.0") -> dict[str, Any]:
    dep = obj("scheduler_deployment.yaml")
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = (
        f"docker.io/volcanosh/vc-scheduler:{version}"
    )
    return dep


def pod(
    namespace: str,
    name: str,
    *,
    node: str | None = None,
    labels: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str = "volcano",
    started: str = T_STARTED,
    phase: str = "Running",
    reason: str | None = None,
    image: str = "nvidia/cuda:12.2.0-base-ubuntu22.04",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {"name": "main", "image": image, "resources": {"limits": dict(limits or {})}}
        ],
    }
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase, "startTime": started}
    if reason:
        status["reason"] = reason
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
            "creationTimestamp": started,
        },
        "spec": spec,
        "status": status,
    }


def gpu_node(
    name: str,
    model: str,
    gpus: int,
    *,
    released: NodeConfig | None = None,
    tainted: bool = True,
) -> dict[str, Any]:
    """A simulated GPU node (devcluster's manifest); managed when `released` is given."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    taints: tuple[dict[str, str], ...] = ()
    if released is not None:
        labels = {
            contract.LABEL_POLICY: "pool",
            contract.LABEL_MODE: released.mode,
            **contract.DEFAULT_NODE_LABELS,
        }
        if released.device_plugin is not None:
            labels[contract.LABEL_DEVICE_PLUGIN] = released.device_plugin
        annotations[contract.ANN_CONFIG] = released.to_annotation()
        annotations[contract.ANN_TARGET] = released.to_annotation()
        if tainted:
            taints = (POLICY_TAINT,)
            annotations[contract.ANN_OWNED] = Owned(
                labels=dict(contract.DEFAULT_NODE_LABELS),  # the policy/mode labels are not in it
                taints=[Taint(**POLICY_TAINT)],  # type: ignore[arg-type]
            ).to_annotation()
    return gpu_node_manifest(
        NodeSpec(
            name=name, model=model, gpus=gpus, labels=labels, taints=taints, annotations=annotations
        )
    )


def register(
    node: dict[str, Any],
    node_config: str | None,
    device_config: str | None,
    *,
    version: Version | None = PLUGIN_V1_12,
    args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The node after the simulated plugin registered it (annotations and allocatable)."""
    out = copy.deepcopy(node)
    reg = simulate_registration(
        out, node_config, device_config, version=version, args=args, now=T_STARTED
    )
    out["metadata"].setdefault("annotations", {}).update(reg.annotations)
    out["status"]["allocatable"].update(reg.allocatable)
    out["status"]["capacity"].update(reg.allocatable)
    return out


def plugin_pod(
    node: str, *, namespace: str = "kube-system", started: str = T_STARTED
) -> dict[str, Any]:
    return pod(
        namespace,
        f"volcano-device-plugin-{node}",
        node=node,
        labels={"name": "volcano-device-plugin"},
        started=started,
        image="docker.io/projecthami/volcano-vgpu-device-plugin:v1.12.0",
    )


def healthy_daemonset() -> dict[str, Any]:
    """The shipped DaemonSet as the operator places it: on the nodes labelled for HAMi's
    plugin, tolerating the policy taint."""
    ds = obj("manifest_plugin_daemonset.yaml")
    spec = ds["spec"]["template"]["spec"]
    spec["tolerations"].append(
        {"key": "volcano.sh/vgpu", "operator": "Exists", "effect": "NoSchedule"}
    )
    spec["nodeSelector"] = {contract.LABEL_DEVICE_PLUGIN: "hami"}
    return ds


def ascend_daemonset() -> dict[str, Any]:
    """HAMi's Ascend plugin DaemonSet, as v1.4.0 ships it."""
    [ds] = upstream.FILES["hami-ascend-v1.4.0-ascend-device-plugin.yaml"].documents()[3:]
    assert ds["kind"] == "DaemonSet"
    return ds


HAMI_NODE = NodeConfig(mode="hami-core", policy="pool", generation=1)
MIG_NODE = NodeConfig(mode="mig", policy="pool", generation=1)


def healthy(config: OperatorConfig | None = None) -> ClusterSnapshot:
    """A consistent cluster: every ConfigMap as the operator renders it (from the seeds'
    configurations), the plugin registered on each node, every pod started after the change."""
    cfg = config or OperatorConfig()
    nodes = [
        gpu_node("gpu-a", "RTX-4090", 2, released=HAMI_NODE),
        gpu_node("gpu-b", "A100-SXM4-40GB", 1, released=MIG_NODE),
    ]
    device_cm = configmap(
        "kube-system",
        "volcano-vgpu-device-config",
        {"device-config.yaml": text("manifest_device_config.yaml")},
    )
    rendered = render_device_config(device_cm, cfg, T_CHANGED, mig_models=["NVIDIA A100-SXM4-40GB"])
    # the manifest already matches the defaults: its last edit (managedFields) dates it
    device_cm = configmap(
        "kube-system",
        "volcano-vgpu-device-config",
        rendered.data,
        rendered.annotations,
        changed=T_CHANGED,
    )
    node_cm = configmap(
        "kube-system",
        "volcano-vgpu-node-config",
        {"config.json": text("manifest_node_config.json")},
    )
    released = {"gpu-a": HAMI_NODE, "gpu-b": MIG_NODE}
    rendered = render_node_config(node_cm, released, cfg, T_CHANGED)
    node_cm = configmap(
        "kube-system", "volcano-vgpu-node-config", rendered.data, rendered.annotations
    )
    sched = scheduler_cm(text("seed000_scheduler.conf"))
    sched["data"] = render_scheduler_conf(sched, cfg, T_CHANGED).data
    nodes = [
        register(n, node_cm["data"]["config.json"], device_cm["data"]["device-config.yaml"])
        for n in nodes
    ]
    return ClusterSnapshot(
        config=cfg,
        configmaps=[device_cm, node_cm, sched],
        deployments=[deployment()],
        daemonsets=[healthy_daemonset()],
        nodes=nodes,
        pods=[
            plugin_pod("gpu-a"),
            plugin_pod("gpu-b"),
            pod("volcano-system", "volcano-scheduler-0", labels={"app": "volcano-scheduler"}),
            pod(
                "default",
                "vgpu-job",
                node="gpu-a",
                limits={"volcano.sh/vgpu-number": "1"},
                annotations={"volcano.sh/vgpu-ids-new": "GPU-x,NVIDIA,3000,0:"},
            ),
        ],
    )


def edit(
    snapshot: ClusterSnapshot, kind: str, name: str, change: Callable[[dict[str, Any]], None]
) -> ClusterSnapshot:
    """A copy of the snapshot with one object (`kind` = field name, e.g. "configmaps") changed."""
    items = copy.deepcopy(getattr(snapshot, kind))
    hits = [o for o in items if o["metadata"]["name"] == name]
    assert hits, f"no {kind} named {name}"
    for item in hits:
        change(item)
    return dataclasses.replace(snapshot, **{kind: items})


def replace(snapshot: ClusterSnapshot, **changes: Any) -> ClusterSnapshot:
    return dataclasses.replace(snapshot, **changes)


def model_names() -> dict[str, str]:
    return {k: m.nvml_name for k, m in GPU_MODELS.items()}


def findings(snapshot: ClusterSnapshot, rule_id: str) -> list[Any]:
    """The findings of one rule."""
    from vgpu_operator.core.rules import run_rules

    return run_rules(snapshot, only=[rule_id]).findings


def seed002(*, fixed: bool, scheduler_version: str = "v1.13.0") -> ClusterSnapshot:
    """Seed 002 (docs/from-a-hand-configured-cluster.md) as deployed: plugin v1.11.0 with
    --resource-name=nvidia.com/gpu, the device
    config (resourceCountName: nvidia.com/gpu) in volcano-system, one 8 x RTX 4090 node, and the
    pod that failed with UnexpectedAdmissionError. `fixed`: the scheduler conf has the seed's
    `KnownGeometriesCMNamespace: volcano-system`; without it, the state the seed's write-up
    reports first (deviceshare reads the device config from kube-system, where there is none, and
    pods fail with UnexpectedAdmissionError, "device request not found")."""
    cfg = OperatorConfig.model_validate(
        {"devicePlugin": {"namespace": "volcano-system", "name": "volcano-device-plugin"}}
    )
    conf = text("seed002_scheduler.conf")
    if not fixed:
        conf = conf.replace("      deviceshare.KnownGeometriesCMNamespace: volcano-system\n", "")
    node = gpu_node("dev-app-2-150-master-1", "RTX-4090", 8)
    node["metadata"]["labels"].update(contract.DEFAULT_NODE_LABELS)
    node["spec"]["taints"] = [{"key": "volcano.sh/vgpu", "value": "hami", "effect": "NoSchedule"}]
    node = register(
        node,
        None,
        text("seed002_device_config.yaml"),
        version=Version(1, 11, 0),
        args=("--device-split-count=10", "--resource-name=nvidia.com/gpu"),
    )
    return ClusterSnapshot(
        config=cfg,
        configmaps=[
            scheduler_cm(conf),
            configmap(
                "volcano-system",
                "volcano-vgpu-device-config",
                {"device-config.yaml": text("seed002_device_config.yaml")},
            ),
            configmap(
                "volcano-system", "volcano-vgpu-node-config", {"config.json": '{"nodeconfig": []}'}
            ),
        ],
        deployments=[deployment(scheduler_version)],
        daemonsets=[obj("seed002_plugin_daemonset.yaml")],
        nodes=[node],
        pods=[
            pod(
                "volcano-system",
                "test-vgpu-compatible",
                node="dev-app-2-150-master-1",
                limits={"nvidia.com/gpu": "2"},
                phase="Failed",
                reason="UnexpectedAdmissionError",
            ),
            plugin_pod("dev-app-2-150-master-1", namespace="volcano-system"),
        ],
    )

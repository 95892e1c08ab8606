"""A cluster for `core.plan`: Volcano's and HAMi's own install manifests (unmodified, from
`vgpu_devcluster.upstream`), nodes of several GPU models, and a converged A100 pool whose nodes
run GPU pods and their plugin pods."""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.kit.nodekit import node, policy
from vgpu_devcluster import upstream
from vgpu_operator import contract
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.core.plan import Plan, plan, proposed
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import load_config

NOW = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)  # the plugin and GPU pods started between NOW and LATER
PRESENT = {"nvidia.com/gpu.present": "true"}
CONFIG = load_config("gpuMemoryFactor: 11\n")  # what 8 x 80 GB GPUs need (<= 60000 entries)
# HAMi's Ascend plugin only where an example has an Ascend pool (its ConfigMaps are large)
ASCEND = load_config("gpuMemoryFactor: 11\nascendVnpu:\n  enabled: true\n")


@functools.cache
def _manifests(ascend: bool) -> str:
    """The install manifests' ConfigMaps and workloads (parsed once: the files are large)."""
    docs = [*upstream.volcano_documents(), *upstream.hami_vgpu_documents("v1.12.0")]
    docs += upstream.ascend_documents() if ascend else []
    return json.dumps([d for d in docs if d["kind"] in ("ConfigMap", "Deployment", "DaemonSet")])


def installed_objects(ascend: bool) -> dict[str, list[dict[str, Any]]]:
    docs = json.loads(_manifests(ascend))
    return {
        k: [d for d in docs if d["kind"] == k] for k in ("ConfigMap", "Deployment", "DaemonSet")
    }


def snapshot(nodes: list[dict[str, Any]], *, ascend: bool = False) -> ClusterSnapshot:
    objects = installed_objects(ascend)
    return ClusterSnapshot(
        config=ASCEND if ascend else CONFIG,
        configmaps=objects["ConfigMap"],
        deployments=objects["Deployment"],
        daemonsets=objects["DaemonSet"],
        nodes=nodes,
    )


def run(s: ClusterSnapshot, raws: list[dict[str, Any]], at: datetime = NOW) -> Plan:
    return plan(s, [parse_policy(proposed({}, r)) for r in raws], at)


def gpu_pod(name: str, on: str, started: datetime) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": {
            "nodeName": on,
            "schedulerName": "volcano",
            "containers": [
                {"name": "main", "resources": {"limits": {"volcano.sh/vgpu-number": "1"}}}
            ],
        },
        "status": {"phase": "Running", "startTime": started.isoformat()},
    }


def plugin_pod(on: str, started: datetime) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"volcano-device-plugin-{on}",
            "namespace": "kube-system",
            "labels": {"name": "volcano-device-plugin"},
            "uid": f"uid-plugin-{on}",
        },
        "spec": {"nodeName": on, "containers": [{"name": "volcano-device-plugin"}]},
        "status": {"phase": "Running", "startTime": started.isoformat()},
    }


A100_POOL = {
    "nodeSelector": {"matchLabels": {contract.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB"}},
    "mode": "hami-core",
    "rollout": {"maxUnavailable": 2},
}


# What `plan` prints for the live policy of `a100_cluster` as it is: nothing to change, and
# (always) what a vgpu-memory request means under CONFIG's factor (core.volcano.memory_unit).
NOTHING_TO_DO = (
    "Plan for a100-pool:\n  nothing would change.\n\nNotes:\n  volcano.sh/vgpu-memory: a request "
    "of N means N x 11 MiB (gpuMemoryFactor 11, from ConfigMap "
    "kube-system/volcano-vgpu-device-config)\n"
)


def a100_cluster() -> tuple[ClusterSnapshot, dict[str, Any]]:
    """Three A100 nodes in a hami-core pool, converged at NOW; two run GPU pods and every one
    its plugin pod, started after the configuration (plan at LATER)."""
    nodes = [node(f"a100-{i}", PRESENT) for i in range(3)]
    live = policy("a100-pool", A100_POOL)
    first = run(snapshot(nodes), [live])
    assert first.after is not None
    started = NOW + timedelta(minutes=10)
    pods = [gpu_pod("train-0", "a100-0", started), gpu_pod("train-1", "a100-2", started)]
    pods += [plugin_pod(f"a100-{i}", started) for i in range(3)]
    steady = replace(first.after, pods=pods)
    assert not run(steady, [live], LATER).changes
    return steady, live


def with_scheduler(s: ClusterSnapshot, tag: str) -> ClusterSnapshot:
    """`s` with the scheduler Deployment's image at `tag`."""
    ref = s.config.scheduler.deployment
    deployments = copy.deepcopy(s.deployments)
    for d in deployments:
        if (d["metadata"].get("namespace"), d["metadata"]["name"]) == (ref.namespace, ref.name):
            for c in d["spec"]["template"]["spec"]["containers"]:
                c["image"] = f"{c['image'].rsplit(':', 1)[0]}:{tag}"
    return replace(s, deployments=deployments)

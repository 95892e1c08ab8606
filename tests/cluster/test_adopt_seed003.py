"""Seed 003's cluster (Volcano's deprecated GPU sharing) and what the README says for it ("From
a hand-configured cluster", seed 003): `deviceshare.GPUSharingEnable: true`, the legacy
volcano-sh/devices plugin as `kube-system/volcano-device-plugin`, nodes registering
`volcano.sh/gpu-memory`/`gpu-number`, pods asking `volcano.sh/gpu-memory`. Volcano's deviceshare
exits when GPU sharing and vGPU are both on in one scheduler, so there is no "as it is" policy
for the sharing nodes: observe with the policy for the nodes to move
(examples/legacy-gpu-sharing-migration) shows the cut-over enforce would make, and writes
nothing; `doctor` names the legacy scheduler argument and the pods that still use it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, PolicyFactory
from tests.cluster.seedkit import (
    SeedCluster,
    fixture_yaml,
    seed_cluster,
)
from tests.cluster.seedkit_phases import observed, planned
from tests.cluster.volcano_env import text
from tests.cluster.volcano_ops import OperatorFactory, run_doctor, volcano_operator
from vgpu_operator import kubeapi

pytestmark = pytest.mark.cluster

__all__ = ["seed_cluster", "volcano_operator"]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "legacy-gpu-sharing-migration"
LEGACY_LABEL = {"gpu-sharing.example.com/pool": "legacy"}  # the example's step 1


def legacy_plugin() -> dict[str, Any]:
    """volcano-sh/devices' DaemonSet as its quick start applies it
    (https://github.com/volcano-sh/devices/blob/master/volcano-device-plugin.yml), with the
    image of a release: the same name and namespace as HAMi's plugin."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "volcano-device-plugin", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"name": "volcano-device-plugin"}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": {"name": "volcano-device-plugin"}},
                "spec": {
                    "tolerations": [
                        {"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {
                            "key": "volcano.sh/gpu-memory",
                            "operator": "Exists",
                            "effect": "NoSchedule",
                        },
                    ],
                    "priorityClassName": "system-node-critical",
                    "containers": [
                        {
                            "image": "volcanosh/volcano-device-plugin:v1.10.0",
                            "name": "volcano-device-plugin",
                            "env": [
                                {
                                    "name": "NODE_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                }
                            ],
                        }
                    ],
                },
            },
        },
    }


async def build_seed003(env: SeedCluster) -> None:
    """Seed 003 as its write-up leaves it (Volcano > v1.8.2: `deviceshare.GPUSharingEnable`),
    and the legacy nodes labelled as the migration example's step 1 says."""
    await env.namespaces()
    await env.add_control_node()
    await env.add_gpu_nodes("RTX-4090", 2, gpus=8, labels=LEGACY_LABEL)
    for name in env.nodes:  # what the legacy plugin registers: 8 x 24564 MiB
        capacity = {"volcano.sh/gpu-memory": str(8 * 24564), "volcano.sh/gpu-number": "8"}
        await kubeapi.request(
            env.api,
            "PATCH",
            kubeapi.node_path(name) + "/status",
            body={"status": {"capacity": capacity, "allocatable": capacity}},
            content_type=kubeapi.MERGE_PATCH,
        )
    await env.scheduler(text("seed003_gpu_sharing.conf"), fixture_yaml("scheduler_deployment.yaml"))
    await env.plugin(legacy_plugin(), simulate=False)
    for name in env.nodes:
        limits = {"volcano.sh/gpu-memory": "1024"}
        await env.gpu_pod(name, limits, {"volcano.sh/gpu-index": "0"})
    await env.wait_running()


async def test_seed003_observe_shows_the_cut_over_and_doctor_names_legacy_sharing(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    kubeconfig: Path,
    tmp_path: Path,
    seed_cluster: SeedCluster,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    env = seed_cluster
    await build_seed003(env)
    before = await env.before()

    policy = yaml.safe_load((EXAMPLE / "policies.yaml").read_text())
    spec = policy["spec"]
    spec["nodeSelector"]["matchLabels"]["test/pool"] = env.pool
    said = await observed(
        api, local, volcano_operator, "mode: observe\n", policies, {"seed003": spec}
    )
    [(name, message)] = said.items()
    # enforce would be the cut-over itself: the nodes labelled and tainted, HAMi's ConfigMaps
    # created, the scheduler conf switched and the scheduler restarted while legacy pods run,
    # so the README says to observe only, before the window
    assert message.startswith(
        "observe mode: enforce would write 2 node(s) (0 refused), 4 Volcano/HAMi object(s) and "
        "restart 2"
    ), message
    plan = await planned(kubeconfig, "mode: enforce\n", name, tmp_path)
    # plan shows the switch: legacy sharing off, vGPU on, in one scheduler conf edit
    [sched] = [c for c in plan["configMaps"] if c["name"] == "volcano-scheduler-configmap"]
    assert "+      deviceshare.GPUSharingEnable: false" in sched["diff"], sched["diff"]
    assert "+      deviceshare.VGPUEnable: true" in sched["diff"], sched["diff"]
    scheduler = "volcano-system/volcano-scheduler"  # due now, or deferred by the interval
    assert any(scheduler in r for r in plan["restarts"]), plan["restarts"]
    # and it would patch kube-system/volcano-device-plugin, which is still the legacy plugin
    # (the same name as HAMi's): the example replaces it with HAMi's manifest before enforcing
    assert [(w["kind"], w["name"]) for w in plan["workloads"]] == [
        ("DaemonSet", "volcano-device-plugin")
    ]
    # doctor, as the example's step 1 runs it, names the legacy switch and every legacy pod
    code, out, err = await run_doctor(
        kubeconfig,
        "--discover",
        "--rule",
        "legacy-gpu-sharing",
        "--rule",
        "scheduler-fatal-combination",
        "-o",
        "json",
    )
    assert code == 1, err
    report = json.loads(out)
    messages = " ".join(f["message"] for f in report["findings"])
    assert "deviceshare.GPUSharingEnable is on" in messages, messages
    named = {o["name"] for f in report["findings"] for o in f["objects"]}
    assert set(before.gpu_pods) <= named, named
    # nothing changed: the legacy pods run on, the scheduler was not restarted
    after = await env.before()
    assert after.scheduler == before.scheduler and after.gpu_pods == before.gpu_pods
    assert after.nodes == before.nodes

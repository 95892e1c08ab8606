"""Seed 003's cluster (Volcano's deprecated GPU sharing) and what the README says for it ("From
a hand-configured cluster", seed 003): `deviceshare.GPUSharingEnable: true`, the legacy
volcano-sh/devices plugin as `kube-system/volcano-device-plugin`, nodes registering
`volcano.sh/gpu-memory`/`gpu-number`, pods asking `volcano.sh/gpu-memory`. Volcano's deviceshare
exits when GPU sharing and vGPU are both on in one scheduler, so there is no "as it is" policy
for the sharing nodes: observe with the policy for the nodes to move
(examples/legacy-gpu-sharing-migration) shows the cut-over enforce would make, and writes
nothing; `doctor` names the legacy scheduler argument and the pods that still use it.

Then the deliberate change is the example's cut-over window: the legacy pods drained (step 2:
`doctor` names none), HAMi's manifest applied over the legacy plugin (step 3: its pods roll over
to HAMi's, which registers the nodes), enforce with the example's policy (step 4): the scheduler
conf ends with vGPU on and GPU sharing off, every other plugin kept, the scheduler restarted
once, the nodes labelled and tainted as the policy says, HAMi's plugin pinned to them and
registering them in hami-core; `doctor` then finds neither legacy sharing nor a fatal
combination."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually
from tests.cluster.seedkit import (
    DEVICE_CM,
    DEVICE_KEY,
    NODE_CM,
    NODE_KEY,
    PLUGIN,
    WORKLOADS,
    SeedCluster,
    fixture_yaml,
    seed_cluster,
)
from tests.cluster.seedkit_phases import observed, planned
from tests.cluster.volcano_env import text
from tests.cluster.volcano_ops import (
    OperatorFactory,
    pods_created,
    run_doctor,
    volcano_operator,
)
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path, workload_path
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, parse_register

pytestmark = pytest.mark.cluster

__all__ = ["seed_cluster", "volcano_operator"]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "legacy-gpu-sharing-migration"
LEGACY_LABEL = {"gpu-sharing.example.com/pool": "legacy"}  # the example's step 1
LEGACY_RULES = ("--rule", "legacy-gpu-sharing", "--rule", "scheduler-fatal-combination")


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
        "observe mode: enforce would write 2 node(s) (0 refused), 3 Volcano/HAMi object(s) and "
        "restart 1"
    ), message
    plan = await planned(kubeconfig, "mode: enforce\n", name, tmp_path)
    # plan shows the switch: legacy sharing off, vGPU on, in one scheduler conf edit
    [sched] = [c for c in plan["configMaps"] if c["name"] == "volcano-scheduler-configmap"]
    assert "+      deviceshare.GPUSharingEnable: false" in sched["diff"], sched["diff"]
    assert "+      deviceshare.VGPUEnable: true" in sched["diff"], sched["diff"]
    scheduler = "volcano-system/volcano-scheduler"  # due now, or deferred by the interval
    assert any(f"{r['namespace']}/{r['name']}" == scheduler for r in plan["restarts"]), plan[
        "restarts"
    ]
    # kube-system/volcano-device-plugin is still the legacy plugin (HAMi's plugin's name, not
    # its image): left alone, no args, placement or restart; the example replaces it with
    # HAMi's manifest in the window (step 3)
    assert plan["workloads"] == [], plan["workloads"]
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

    await cut_over(env, local, volcano_operator, kubeconfig, name)


def deviceshare_arguments(conf: str) -> tuple[list[str], dict[str, Any]]:
    """The scheduler conf's plugin names in order, and deviceshare's arguments."""
    doc = yaml.safe_load(conf)
    plugins = [p for tier in doc["tiers"] for p in tier["plugins"]]
    [share] = [p for p in plugins if p["name"] == "deviceshare"]
    return [p["name"] for p in plugins], dict(share.get("arguments") or {})


async def cut_over(
    env: SeedCluster,
    local: Any,
    start: OperatorFactory,
    kubeconfig: Path,
    policy: str,
) -> None:
    """The example's window, steps 2 to 5, on the seed's cluster with its policy applied."""
    api = env.api
    # step 2: the legacy jobs drained (their queue closed, their pods done and gone); doctor
    # still names the scheduler's legacy switch, and no pod any more
    for pod_name in env.workloads:
        await kubeapi.request(
            api,
            "DELETE",
            f"/api/v1/namespaces/{WORKLOADS}/pods/{pod_name}",
            query={"gracePeriodSeconds": "0"},
        )

    async def drained() -> bool:
        return await env.gpu_pods() == {}

    await eventually(drained, timeout=30, interval=0.3)
    code, out, err = await run_doctor(kubeconfig, "--discover", *LEGACY_RULES, "-o", "json")
    assert code == 1, err
    said = " ".join(f["message"] for f in json.loads(out)["findings"])
    assert "deviceshare.GPUSharingEnable is on" in said and "the pod requests" not in said, said

    # step 3: HAMi's manifest over the legacy one (its ConfigMaps in kube-system, its DaemonSet
    # of the same name): the DaemonSet controller rolls the plugin pods over to HAMi's image
    legacy = await env.plugin_pods()
    ns = env.where.plugin
    await env.configmap(ns, DEVICE_CM, {DEVICE_KEY: text("manifest_device_config.yaml")})
    await env.configmap(ns, NODE_CM, {NODE_KEY: text("manifest_node_config.json")})
    await env.replace_plugin(fixture_yaml("manifest_plugin_daemonset.yaml"))

    async def rolled_over() -> bool:
        now = await env.plugin_pods()
        return set(now) == set(env.nodes) and not set(now.values()) & set(legacy.values())

    await eventually(rolled_over, timeout=60, interval=0.3)
    env.simulate()  # the pods run HAMi's plugin from here on

    # step 4: enforce with the example's policy (already applied)
    offset = local.audit_offset()
    scheduler_before = await env.scheduler_pods()
    op = start("mode: enforce\n", restart_settle_seconds=1.0)
    ds_path = workload_path("DaemonSet", ns, PLUGIN)

    async def switched() -> bool:
        conf = await kubeapi.request(
            api, "GET", configmap_path(env.where.scheduler, "volcano-scheduler-configmap")
        )
        _, args = deviceshare_arguments(conf["data"]["volcano-scheduler.conf"])
        if args.get("deviceshare.VGPUEnable") is not True:
            return False
        sched = await env.scheduler_pods()
        if not sched or set(sched.values()) & set(scheduler_before.values()):
            return False
        ds = await kubeapi.request(api, "GET", ds_path)
        status = ds.get("status") or {}
        if status.get("updatedNumberScheduled") != len(env.nodes) or status.get(
            "numberReady"
        ) != len(env.nodes):
            return False
        for node in env.nodes:
            obj = await kubeapi.request(api, "GET", kubeapi.node_path(node))
            if obj["metadata"]["labels"].get(contract.LABEL_POLICY) != policy:
                return False
            raw = (obj["metadata"].get("annotations") or {}).get(REGISTER_ANNOTATION, "")
            pods = await env.plugin_pods()
            if node not in pods or not any(
                r.pod_uid == pods[node] and not r.problem
                for r in (env.sim.registered(node) if env.sim else [])
            ):
                return False
            if {(g.mode, g.count) for g in parse_register(raw)} != {("hami-core", 10)}:
                return False
        return True

    await eventually(switched, timeout=90, interval=0.5)
    op.stop()

    # the scheduler conf: vGPU on, legacy sharing (and GPU number) off: never both, which
    # deviceshare refuses with klog.Fatal; every other plugin kept, in order
    conf = await kubeapi.request(
        api, "GET", configmap_path(env.where.scheduler, "volcano-scheduler-configmap")
    )
    names, args = deviceshare_arguments(conf["data"]["volcano-scheduler.conf"])
    was, _ = deviceshare_arguments(text("seed003_gpu_sharing.conf"))
    assert names == was, names
    assert args.get("deviceshare.VGPUEnable") is True, args
    assert not args.get("deviceshare.GPUSharingEnable") and not args.get(
        "deviceshare.GPUNumberEnable"
    ), args
    assert pods_created(local, offset, env.where.scheduler) == 1  # restarted once
    # the nodes: the policy's label and taint; HAMi's plugin pinned to them and tolerating it
    taint = {
        "key": contract.DEFAULT_TAINT_KEY,
        "value": contract.DEFAULT_TAINT_VALUE,
        "effect": contract.DEFAULT_TAINT_EFFECT,
    }
    for node, (labels, taints) in (await env.node_state()).items():
        assert labels.get("volcano.sh/vgpu.enabled") == "true", (node, labels)
        assert labels.get(contract.LABEL_DEVICE_PLUGIN) == "hami", (node, labels)
        assert taint in [{k: t.get(k) for k in taint} for t in taints], (node, taints)
    ds = await kubeapi.request(api, "GET", ds_path)
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"].get(contract.LABEL_DEVICE_PLUGIN) == "hami", spec["nodeSelector"]
    assert any(t.get("key") == contract.DEFAULT_TAINT_KEY for t in spec.get("tolerations") or []), (
        spec.get("tolerations")
    )
    assert "volcano-vgpu-device-plugin" in spec["containers"][0]["image"]
    # step 5: nothing legacy is left, and nothing fatal
    code, out, err = await run_doctor(kubeconfig, "--discover", *LEGACY_RULES, "-o", "json")
    assert code == 0, (out, err)

"""`vgpu-operator doctor` as a person runs it (a subprocess with a kubeconfig), against the real
apiserver: a consistent Volcano/HAMi install exits 0; a deliberately broken one names every
break."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.cluster.volcano_env import (
    DEVICE_CM,
    HAMI,
    MIG,
    NODE_CM,
    PLUGIN_DS,
    PLUGIN_NS,
    POLICY_TAINT,
    SCHED_CM,
    SCHED_DEPLOY,
    SCHED_NS,
    VolcanoEnv,
    fixture,
    managed_node,
    pod,
    text,
    volcano_env,
)
from tests.cluster.volcano_ops import (
    run_doctor,
)
from vgpu_operator import kubeapi
from vgpu_operator.controller.snapshot import workload_path
from vgpu_operator.core.rules import RULES

__all__ = ["volcano_env"]


async def test_doctor_on_a_consistent_cluster_exits_0(
    volcano_env: VolcanoEnv, kubeconfig: Path
) -> None:
    env = volcano_env
    await env.add_control_node()
    await env.add_nodes("RTX-4090", 1, gpus=2, released=HAMI)
    await env.add_nodes("A100-SXM4-40GB", 1, gpus=1, released=MIG)
    await env.install()
    await env.wait_running()
    code, out, err = await run_doctor(kubeconfig, "-o", "json")
    report = json.loads(out)
    assert code == 0, (report["findings"], err)
    assert report["summary"]["error"] == report["summary"]["warning"] == 0
    assert {r["status"] for r in report["rules"]} <= {"ok", "info"}
    assert len(report["rules"]) == len(RULES)


ALL_BUT_VERSION_PAIRS = {
    "scheduler-vgpu-enabled",
    "scheduler-predicates",
    "scheduler-fatal-combination",
    "scheduler-ascend-hami",
    "device-config-location",
    "vnpus-mirror",
    "device-config-rendered",
    "node-config-rendered",
    "plugin-resource-name-flags",
    "plugin-config-flags-override",
    "plugin-placement",
    "plugin-node-config-mounted",
    "nvidia-device-plugin-conflict",
    "version-handshake",
    "node-registration",
    "mig-geometry-coverage",
    "gpu-memory-factor",
    "restart-needed",
    "stranded-pods",
    "legacy-gpu-sharing",
    "ascend-mindcluster",
}


async def test_doctor_on_a_broken_cluster_names_every_break(
    volcano_env: VolcanoEnv, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    env = volcano_env
    await env.add_control_node()
    [gpu_a] = await env.add_nodes("RTX-4090", 1, gpus=2, released=HAMI)
    [gpu_b] = await env.add_nodes("A100-SXM4-40GB", 1, gpus=1, released=MIG)
    await env.install()
    await env.wait_running()

    # The plugin as in seed 002: v1.11.0 with --resource-name=nvidia.com/gpu and a split count
    # flag, and (a second mistake) the device config mounted at /config instead of the node config.
    await env.patch(
        workload_path("DaemonSet", PLUGIN_NS, PLUGIN_DS),
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "volcano-device-plugin",
                                "image": "docker.io/projecthami/volcano-vgpu-device-plugin:v1.11.0",
                                "args": [
                                    "--device-split-count=4",
                                    "--resource-name=nvidia.com/gpu",
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "deviceconfig", "configMap": {"name": DEVICE_CM}},
                        ],
                    }
                }
            }
        },
        strategic=True,
    )
    await env.wait_running()
    await asyncio.sleep(1.1)  # the edits below are later than the pods' start (1 s resolution)

    # A big node the plugin cannot reach (an extra taint): unregistered, too many memory entries.
    [big] = await env.make_nodes(
        "H200",
        1,
        gpus=8,
        labels={"test/pool": env.pool, **managed_node(HAMI)["labels"]},
        taints=[
            POLICY_TAINT,
            {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"},
        ],
        annotations=managed_node(HAMI)["annotations"],
        prefix="vbig",
    )
    # Scheduler conf of seed 002 (it points at volcano-system, where no device config is),
    # without predicates, with the legacy number switch and deviceshare's predicate off.
    conf = (
        text("seed002_scheduler.conf")
        .replace("  - name: predicates\n", "")
        .replace(
            "  - name: deviceshare\n",
            "  - name: deviceshare\n    enablePredicate: false\n",
        )
        .replace(
            "deviceshare.VGPUEnable: true",
            "deviceshare.VGPUEnable: true\n      deviceshare.GPUNumberEnable: true",
        )
    )
    await env.edit_configmap(SCHED_NS, SCHED_CM, lambda _: conf, "volcano-scheduler.conf")
    await env.edit_configmap(
        PLUGIN_NS,
        DEVICE_CM,
        lambda t: t.replace(
            "resourceCountName: volcano.sh/vgpu-number", "resourceCountName: nvidia.com/gpu"
        ),
        "device-config.yaml",
    )

    def flip(data: str) -> str:
        doc = json.loads(data)
        for entry in doc["nodeconfig"]:
            if entry["name"] == gpu_a:
                entry["operatingmode"] = "mig"
        return json.dumps(doc)

    await env.edit_configmap(PLUGIN_NS, NODE_CM, flip, "config.json")
    await kubeapi.request(
        env.api,
        "POST",
        workload_path("DaemonSet", PLUGIN_NS),
        body=fixture("mindcluster_plugin_daemonset.yaml"),
    )
    pods = [
        pod(
            namespace,
            "nvidia-device-plugin-daemonset-vx6fk",
            node=gpu_a,
            labels={"app": "nvidia-device-plugin-daemonset"},
            image="nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
        ),
        pod(namespace, "train-0", node=gpu_a, limits={"volcano.sh/vgpu-number": "1"}),
        pod(namespace, "legacy-share", limits={"volcano.sh/gpu-memory": "1024"}),
    ]
    for body in pods:
        await kubeapi.request(env.api, "POST", f"/api/v1/namespaces/{namespace}/pods", body=body)
    config = tmp_path / "operator.yaml"
    config.write_text("ascendVnpu: {enabled: true}\n")

    code, out, err = await run_doctor(kubeconfig, "--config", str(config), "-o", "json")
    report = json.loads(out)
    fired = {f["id"] for f in report["findings"] if f["severity"] in ("error", "warning")}
    assert code == 1, err
    assert fired == ALL_BUT_VERSION_PAIRS, sorted(fired ^ ALL_BUT_VERSION_PAIRS)
    named = {o["name"] for f in report["findings"] for o in f["objects"]}
    assert {gpu_a, gpu_b, big, "train-0", "nvidia-device-plugin-daemonset-vx6fk"} <= named
    assert {"legacy-share", SCHED_CM, DEVICE_CM, NODE_CM, PLUGIN_DS} <= named
    stranded = [f for f in report["findings"] if f["id"] == "stranded-pods"]
    assert [f["objects"][0]["name"] for f in stranded] == ["train-0"]
    assert "UnexpectedAdmissionError" in stranded[0]["message"]

    # The table a person reads names the same rules and objects.
    code, table, _ = await run_doctor(kubeconfig, "--config", str(config))
    assert code == 1
    for rule_id in ALL_BUT_VERSION_PAIRS:
        assert rule_id in table
    assert f"Pod {namespace}/train-0" in table

    # The two version-dependent rules the versions above cannot show at once: a plugin that
    # prefixes names (v1.12+) and a Volcano that needs the default names in allocatable.
    await env.patch(
        workload_path("DaemonSet", PLUGIN_NS, PLUGIN_DS),
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "volcano-device-plugin",
                                "image": "docker.io/projecthami/volcano-vgpu-device-plugin:v1.13.0",
                            }
                        ]
                    }
                }
            }
        },
        strategic=True,
    )
    await env.patch(
        workload_path("Deployment", SCHED_NS, SCHED_DEPLOY),
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "volcano-scheduler",
                                "image": "docker.io/volcanosh/vc-scheduler:v1.15.1",
                            }
                        ]
                    }
                }
            }
        },
        strategic=True,
    )
    code, out, _ = await run_doctor(
        kubeconfig,
        "--rule",
        "plugin-resource-name-prefix",
        "--rule",
        "scheduler-default-resource-names",
        "-o",
        "json",
    )
    report = json.loads(out)
    assert code == 1
    by_rule = {f["id"]: f for f in report["findings"]}
    assert set(by_rule) == {"plugin-resource-name-prefix", "scheduler-default-resource-names"}
    assert "volcano.sh/nvidia.com/gpu" in by_rule["plugin-resource-name-prefix"]["message"]
    assert any(
        o["name"] == big
        for f in report["findings"]
        if f["id"] == "scheduler-default-resource-names"
        for o in f["objects"]
    )

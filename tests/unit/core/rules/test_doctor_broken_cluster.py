"""One cluster broken in many ways at once: every break is named by its rule, and the rules the
operator can fix are marked so."""

from __future__ import annotations

import json
from typing import Any

from tests.kit.volcano_fixtures import (
    T_CREATED,
    deployment,
    edit,
    healthy,
    obj,
    pod,
    replace,
    scheduler_cm,
    text,
)
from vgpu_operator.core.report import exit_code, format_table
from vgpu_operator.core.rules import run_rules
from vgpu_operator.models.config import load_config
from vgpu_operator.models.volcano import REGISTER_ANNOTATION


def broken() -> Any:
    cfg = load_config("ascendVnpu: {enabled: true}")
    snap = healthy(cfg)
    # scheduler: seed 002's conf (KnownGeometriesCMNamespace: volcano-system, where no copy is),
    # plus the legacy number switch, without predicates
    conf = (
        text("seed002_scheduler.conf")
        .replace("  - name: predicates\n", "")
        .replace(
            "deviceshare.VGPUEnable: true",
            "deviceshare.VGPUEnable: true\n      deviceshare.GPUNumberEnable: true",
        )
    )
    snap = edit(
        snap,
        "configmaps",
        "volcano-scheduler-configmap",
        lambda c: c.update(data=scheduler_cm(conf)["data"]),
    )
    # device config: a name outside volcano.sh/
    snap = edit(
        snap,
        "configmaps",
        "volcano-vgpu-device-config",
        lambda c: c["data"].update(
            {
                "device-config.yaml": c["data"]["device-config.yaml"].replace(
                    "resourceCountName: volcano.sh/vgpu-number", "resourceCountName: nvidia.com/gpu"
                )
            }
        ),
    )

    def flip(c: dict[str, Any]) -> None:  # gpu-b's entry says hami-core, later than its plugin
        doc = json.loads(c["data"]["config.json"])
        doc["nodeconfig"][2]["operatingmode"] = "hami-core"
        c["data"]["config.json"] = json.dumps(doc)
        c["metadata"]["annotations"]["vgpu.volcano.sh/owned-entries"] = json.dumps(
            {"gpu-a": "2026-01-02T00:00:00Z", "gpu-b": "2026-01-09T00:00:00Z"}
        )

    snap = edit(snap, "configmaps", "volcano-vgpu-node-config", flip)

    def plugin(d: dict[str, Any]) -> None:
        spec = d["spec"]["template"]["spec"]
        spec["tolerations"].pop()
        spec["volumes"][0]["configMap"]["name"] = "volcano-vgpu-device-config"
        spec["containers"][0]["args"] = ["--device-split-count=4"]
        spec["containers"][0]["image"] = "docker.io/projecthami/volcano-vgpu-device-plugin:v1.13.0"

    snap = edit(snap, "daemonsets", "volcano-device-plugin", plugin)
    snap = edit(
        snap, "nodes", "gpu-a", lambda n: n["metadata"]["annotations"].pop(REGISTER_ANNOTATION)
    )
    mindcluster = obj("mindcluster_plugin_daemonset.yaml")
    extra_pods = [
        pod(
            "kube-system",
            "nvidia-device-plugin-daemonset-vx6fk",
            node="gpu-a",
            labels={"app": "nvidia-device-plugin-daemonset"},
        ),
        pod("default", "gpu-pod1", node="gpu-b", limits={"volcano.sh/gpu-memory": "1024"}),
        pod("team-a", "train-0", node="gpu-a", limits={"volcano.sh/vgpu-number": "1"}),
    ]
    snap = replace(
        snap,
        daemonsets=[*snap.daemonsets, mindcluster],
        pods=[*snap.pods, *extra_pods],
        deployments=[deployment("v1.15.0")],
    )
    # the device config changed after the plugin pods started
    snap = edit(
        snap,
        "pods",
        "volcano-device-plugin-gpu-a",
        lambda p: p["status"].update(startTime=T_CREATED),
    )
    return snap


def test_every_break_is_named() -> None:
    results = run_rules(broken())
    fired = {f.id for f in results.findings if f.severity != "info"}  # not the unit's note
    assert fired == {
        "scheduler-predicates",
        "scheduler-fatal-combination",
        "scheduler-ascend-hami",
        "device-config-location",
        "vnpus-mirror",
        "device-config-rendered",
        "node-config-rendered",
        "plugin-config-flags-override",
        "plugin-resource-name-prefix",
        "plugin-placement",
        "plugin-node-config-mounted",
        "nvidia-device-plugin-conflict",
        "version-handshake",
        "node-registration",
        "mig-geometry-coverage",
        "restart-needed",
        "stranded-pods",
        "legacy-gpu-sharing",
        "ascend-mindcluster",
    }
    assert exit_code(results) == 1
    table = format_table(results)
    for rule_id in fired:
        assert rule_id in table
    fixable = {f.id for f in results.findings if f.fixable_by_operator}
    assert {
        "scheduler-predicates",
        "scheduler-fatal-combination",
        "scheduler-ascend-hami",
        "device-config-location",
        "device-config-rendered",
        "node-config-rendered",
        "restart-needed",
        "plugin-placement",  # the toleration for the policy taint
    } <= fixable
    # versions and user pods are only ever reported
    assert not fixable & {
        "version-handshake",
        "stranded-pods",
        "nvidia-device-plugin-conflict",
        "vnpus-mirror",  # hami-scheduler-device itself is missing: the user's to deploy
    }

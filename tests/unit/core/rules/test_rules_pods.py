"""Pods: restarts after a change of what is read once, and pods bound without devices."""

from __future__ import annotations

from typing import Any

from tests.kit.volcano_fixtures import (
    T_CREATED,
    deployment,
    edit,
    findings,
    healthy,
    pod,
    replace,
    seed002,
)
from vgpu_operator.core.rules.base import Finding, ObjectRef
from vgpu_operator.models.config import load_config


def test_a_scheduler_pod_older_than_the_device_config() -> None:
    snap = edit(
        healthy(), "pods", "volcano-scheduler-0", lambda p: p["status"].update(startTime=T_CREATED)
    )
    got = findings(snap, "restart-needed")
    assert got == [
        Finding(
            id="restart-needed",
            severity="warning",
            objects=(
                ObjectRef(kind="Deployment", name="volcano-scheduler", namespace="volcano-system"),
                ObjectRef(kind="Pod", name="volcano-scheduler-0", namespace="volcano-system"),
            ),
            message="1 scheduler pod(s) started before kube-system/volcano-vgpu-device-config "
            "changed at 2026-01-02T00:00:00Z; the scheduler reads it once per process and still "
            "works with the old content",
            fix="kubectl -n volcano-system rollout restart deployment/volcano-scheduler (then "
            "look for stranded-pods: pending vGPU pods can be bound without devices right after "
            "a restart)",
            fixable_by_operator=True,
        )
    ]
    assert findings(healthy(), "restart-needed") == []


def test_only_the_plugin_pod_of_the_changed_node_is_stale() -> None:
    # gpu-b's entry changed after its plugin pod started; gpu-a's did not.
    def later_entry(c: dict[str, object]) -> None:
        ann = c["metadata"]["annotations"]  # type: ignore[index]
        ann["vgpu.volcano.sh/owned-entries"] = (  # type: ignore[index]
            '{"gpu-a":"2026-01-02T00:00:00Z","gpu-b":"2026-01-04T00:00:00Z"}'
        )

    snap = edit(healthy(), "configmaps", "volcano-vgpu-node-config", later_entry)
    got = findings(snap, "restart-needed")
    assert [(f.objects, f.message, f.fix) for f in got] == [
        (
            (
                ObjectRef(kind="DaemonSet", name="volcano-device-plugin", namespace="kube-system"),
                ObjectRef(kind="Pod", name="volcano-device-plugin-gpu-b", namespace="kube-system"),
                ObjectRef(kind="Node", name="gpu-b"),
            ),
            "device plugin pod volcano-device-plugin-gpu-b on gpu-b started at "
            "2026-01-03T00:00:00Z, before its node-config entry changed at "
            "2026-01-04T00:00:00Z; it reads its configuration only at start",
            "kubectl -n kube-system delete pod volcano-device-plugin-gpu-b (the DaemonSet "
            "recreates it)",
        )
    ]
    no_restarts = replace(snap, config=load_config("restarts: {allowed: false}"))
    assert not findings(no_restarts, "restart-needed")[0].fixable_by_operator


def test_seed002_the_pod_that_hit_unexpected_admission_error() -> None:
    got = findings(seed002(fixed=False), "stranded-pods")
    assert got == [
        Finding(
            id="stranded-pods",
            severity="error",
            objects=(
                ObjectRef(kind="Pod", name="test-vgpu-compatible", namespace="volcano-system"),
                ObjectRef(kind="Node", name="dev-app-2-150-master-1"),
            ),
            message="pod volcano-system/test-vgpu-compatible is bound to dev-app-2-150-master-1 "
            "without volcano.sh/vgpu-ids-new; kubelet rejected it with UnexpectedAdmissionError. "
            "Cause: it requests nvidia.com/gpu, but the scheduler counts vGPU pods by "
            "volcano.sh/vgpu-number (its built-in default), so deviceshare never treated it as "
            "a vGPU pod",
            fix="make the resource names agree (see plugin-resource-name-flags and "
            "device-config-location), then recreate the pod",
        )
    ]


def test_a_pod_stranded_by_a_scheduler_restart() -> None:
    stranded = pod(
        "team-a",
        "train-0",
        node="gpu-a",
        limits={"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"},
    )
    snap = replace(healthy(), pods=[*healthy().pods, stranded])
    got = findings(snap, "stranded-pods")
    assert [(f.objects[0].name, f.message, f.fix) for f in got] == [
        (
            "train-0",
            "pod team-a/train-0 is bound to gpu-a without volcano.sh/vgpu-ids-new; kubelet will "
            "reject it with UnexpectedAdmissionError (the plugin finds no devices for it). Cause: "
            "the scheduler bound it without allocating devices: this happens to vGPU pods that "
            "were pending while vc-scheduler restarted",
            "delete the pod so its owner recreates it; it is then scheduled with devices",
        )
    ]
    assert findings(healthy(), "stranded-pods") == []


def test_a_vgpu_pod_scheduled_by_the_default_scheduler() -> None:
    other = pod(
        "team-a",
        "by-default",
        node="gpu-a",
        scheduler="default-scheduler",
        limits={"volcano.sh/vgpu-number": "1"},
    )
    finished = pod(
        "team-a", "done", node="gpu-a", phase="Succeeded", limits={"volcano.sh/vgpu-number": "1"}
    )
    pending = pod("team-a", "pending", limits={"volcano.sh/vgpu-number": "1"})
    snap = replace(healthy(), pods=[*healthy().pods, other, finished, pending])
    got = findings(snap, "stranded-pods")
    assert [(f.objects[0].name, f.fix) for f in got] == [
        ("by-default", "set schedulerName: volcano and recreate the pod")
    ]
    assert "scheduled by default-scheduler, not volcano" in got[0].message


def test_a_custom_scheduler_name_is_honoured() -> None:
    def renamed(d: dict[str, object]) -> None:
        c = d["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
        c["args"].append("--scheduler-name=vc")  # type: ignore[index]

    other = pod(
        "team-a",
        "by-vc",
        node="gpu-a",
        scheduler="vc",
        limits={"volcano.sh/vgpu-number": "1"},
        annotations={"volcano.sh/vgpu-ids-new": "GPU-1,NVIDIA,0,0:"},
    )
    snap = edit(
        replace(healthy(), deployments=[deployment()], pods=[*healthy().pods, other]),
        "deployments",
        "volcano-scheduler",
        renamed,
    )
    assert findings(snap, "stranded-pods") == []


def test_a_stranded_pod_points_at_the_scheduler_conf_when_that_is_the_cause() -> None:
    stranded = pod("team-a", "train-1", node="gpu-a", limits={"volcano.sh/vgpu-number": "1"})
    snap = replace(healthy(), pods=[*healthy().pods, stranded])

    def no_predicates(c: dict[str, Any]) -> None:
        c["data"]["volcano-scheduler.conf"] = c["data"]["volcano-scheduler.conf"].replace(
            "  - name: predicates\n", ""
        )

    got = findings(
        edit(snap, "configmaps", "volcano-scheduler-configmap", no_predicates), "stranded-pods"
    )
    assert got[0].message.endswith(
        "Cause: the scheduler bound it without allocating devices: the scheduler conf has no "
        "predicates plugin (see scheduler-predicates)"
    )
    assert got[0].fix == (
        "fix the scheduler conf first, then delete the pod so its owner recreates it"
    )

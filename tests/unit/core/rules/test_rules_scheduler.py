"""Scheduler conf rules, on the seeds' scheduler confs."""

from __future__ import annotations

from tests.kit.volcano_fixtures import (
    deployment,
    edit,
    findings,
    healthy,
    replace,
    scheduler_cm,
    text,
)
from vgpu_operator.core.rules.base import Finding, ObjectRef
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import load_config

CONF = ObjectRef(kind="ConfigMap", name="volcano-scheduler-configmap", namespace="volcano-system")
UAE_TAIL = (
    "pods requesting vGPU resources are bound without device annotations and kubelet rejects "
    "them with UnexpectedAdmissionError (the device plugin finds no devices to allocate)"
)


def with_conf(conf: str, snapshot: ClusterSnapshot | None = None) -> ClusterSnapshot:
    base = snapshot or healthy()

    def change(cm: dict[str, object]) -> None:
        cm["data"] = scheduler_cm(conf)["data"]

    return edit(base, "configmaps", "volcano-scheduler-configmap", change)


def test_vgpu_off_in_the_gpu_sharing_seed() -> None:
    got = findings(with_conf(text("seed003_gpu_sharing.conf")), "scheduler-vgpu-enabled")
    assert got == [
        Finding(
            id="scheduler-vgpu-enabled",
            severity="error",
            objects=(CONF,),
            message=f"deviceshare.VGPUEnable is not true: {UAE_TAIL}",
            fix="set `deviceshare.VGPUEnable: true` in the deviceshare arguments",
            fixable_by_operator=True,
        )
    ]


def test_no_deviceshare_at_all_in_the_old_predicates_seed() -> None:
    got = findings(with_conf(text("seed003_legacy_predicates.conf")), "scheduler-vgpu-enabled")
    assert [(f.severity, f.message) for f in got] == [
        ("error", f"no deviceshare plugin in any tier: {UAE_TAIL}")
    ]


def on_scheduler(version: str, conf: str) -> ClusterSnapshot:
    return with_conf(conf, replace(healthy(), deployments=[deployment(version)]))


def quoted(conf: str, key: str, value: str) -> str:
    return conf.replace(
        "deviceshare.VGPUEnable: true", f'deviceshare.VGPUEnable: true\n      {key}: "{value}"'
    )


def test_a_quoted_true_is_off_up_to_v1_14_and_on_from_v1_15() -> None:
    conf = text("seed000_scheduler.conf").replace(
        "deviceshare.VGPUEnable: true", 'deviceshare.VGPUEnable: "true"'
    )
    got = findings(on_scheduler("v1.14.4", conf), "scheduler-vgpu-enabled")
    assert [f.message for f in got] == [
        "deviceshare.VGPUEnable is 'true', a string: Volcano v1.14.4 reads only YAML booleans "
        f"(strings are parsed from v1.15.0) and ignores it, so vGPU stays off: {UAE_TAIL}"
    ]
    # no error on v1.15.x, where strconv.ParseBool reads it as true
    assert findings(on_scheduler("v1.15.0", conf), "scheduler-vgpu-enabled") == []
    assert findings(on_scheduler("v1.15.1", conf), "scheduler-vgpu-enabled") == []
    unknown = on_scheduler("latest", conf)
    [got_unknown] = findings(unknown, "scheduler-vgpu-enabled")
    assert "the scheduler's version is unknown from its image tag" in got_unknown.message
    spelled = conf.replace('"true"', '"yes"')  # not a ParseBool spelling: off everywhere
    [bad] = findings(on_scheduler("v1.15.1", spelled), "scheduler-vgpu-enabled")
    assert bad.message.startswith(
        "deviceshare.VGPUEnable is 'yes', which Volcano cannot read as a boolean"
    )


def test_a_quoted_gpu_sharing_switch_is_fatal_from_v1_15() -> None:
    conf = quoted(text("seed000_scheduler.conf"), "deviceshare.GPUSharingEnable", "true")
    # Volcano v1.15 parses "true" and exits (klog.Fatal)
    [got] = findings(on_scheduler("v1.15.1", conf), "scheduler-fatal-combination")
    assert got.message.startswith(
        "deviceshare enables VGPUEnable and GPUSharingEnable together: vc-scheduler exits"
    )
    assert findings(on_scheduler("v1.14.4", conf), "scheduler-fatal-combination") == []
    # unknown version: it may be fatal, so it is reported
    assert findings(on_scheduler("latest", conf), "scheduler-fatal-combination") != []
    off = quoted(text("seed000_scheduler.conf"), "deviceshare.GPUSharingEnable", "false")
    assert findings(on_scheduler("v1.15.1", off), "scheduler-fatal-combination") == []


def test_a_quoted_ascend_switch_counts_from_v1_15() -> None:
    cfg = load_config("ascendVnpu: {enabled: true}")
    conf = quoted(text("seed000_scheduler.conf"), "deviceshare.AscendHAMiVNPUEnable", "true")
    base = with_conf(conf, healthy(cfg))
    new = replace(base, deployments=[deployment("v1.15.1")])
    old = replace(base, deployments=[deployment("v1.14.4")])
    assert findings(new, "scheduler-ascend-hami") == []
    [got] = findings(old, "scheduler-ascend-hami")
    assert "'true', a string: Volcano v1.14.4 reads only YAML booleans" in got.message


def test_vgpu_enabled_passes_on_the_vgpu_seeds() -> None:
    for seed in ("seed000_scheduler.conf", "seed001_scheduler.conf", "seed002_scheduler.conf"):
        assert findings(with_conf(text(seed)), "scheduler-vgpu-enabled") == []


def test_deviceshare_without_predicates() -> None:
    conf = text("seed000_scheduler.conf").replace("  - name: predicates\n", "")
    got = findings(with_conf(conf), "scheduler-predicates")
    assert got == [
        Finding(
            id="scheduler-predicates",
            severity="error",
            objects=(CONF,),
            message="no predicates plugin: the device allocation that writes "
            "volcano.sh/vgpu-ids-new and devices-to-allocate runs in its allocate handler, so "
            "vGPU pods are bound without them and fail with UnexpectedAdmissionError "
            "(volcano #4501)",
            fix="add `- name: predicates` to the tier that has deviceshare",
            fixable_by_operator=True,
        )
    ]
    assert findings(with_conf(text("seed001_scheduler.conf")), "scheduler-predicates") == []


def test_vgpu_with_legacy_sharing_makes_the_scheduler_exit() -> None:
    conf = text("seed003_gpu_sharing.conf").replace(
        "      deviceshare.GPUSharingEnable: true # 启用 GPU Sharing\n",
        "      deviceshare.GPUSharingEnable: true\n      deviceshare.VGPUEnable: true\n",
    )
    got = findings(with_conf(conf), "scheduler-fatal-combination")
    assert got == [
        Finding(
            id="scheduler-fatal-combination",
            severity="error",
            objects=(CONF,),
            message="deviceshare enables VGPUEnable and GPUSharingEnable together: vc-scheduler "
            "exits at start (klog.Fatal), so nothing is scheduled",
            fix="keep deviceshare.VGPUEnable: true and set GPUSharingEnable/GPUNumberEnable to "
            "false (see legacy-gpu-sharing for pods that still use them)",
            fixable_by_operator=True,
        )
    ]
    assert findings(healthy(), "scheduler-fatal-combination") == []


def test_ascend_on_needs_the_hami_vnpu_switch() -> None:
    on = load_config("ascendVnpu: {enabled: true}")
    got = findings(with_conf(text("seed000_scheduler.conf"), healthy(on)), "scheduler-ascend-hami")
    assert got == [
        Finding(
            id="scheduler-ascend-hami",
            severity="error",
            objects=(CONF,),
            message="Ascend vNPU is enabled in the operator config but "
            "deviceshare.AscendHAMiVNPUEnable is not true: the scheduler registers no Ascend "
            "device and vNPU pods stay pending",
            fix="set `deviceshare.AscendHAMiVNPUEnable: true` (or turn ascendVnpu.enabled off)",
            fixable_by_operator=True,
        )
    ]
    assert (
        findings(with_conf(text("seed004_hami_ascend.conf"), healthy(on)), "scheduler-ascend-hami")
        == []
    )
    assert findings(healthy(), "scheduler-ascend-hami") == []


def test_a_missing_scheduler_configmap_is_reported_not_guessed() -> None:
    snap = healthy()
    snap = replace(snap, configmaps=snap.configmaps[:2])
    got = findings(snap, "scheduler-vgpu-enabled")
    assert [(f.severity, f.message) for f in got] == [
        (
            "error",
            "the scheduler conf cannot be checked: ConfigMap "
            "volcano-system/volcano-scheduler-configmap not found",
        )
    ]

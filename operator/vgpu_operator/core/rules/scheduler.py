"""Rules on the Volcano scheduler conf (reference §0, §4, §7; volcano #4501, vvdp #2)."""

from __future__ import annotations

from collections.abc import Iterator

from vgpu_operator.core.rules.base import Issue, ObjectRef, cm_ref, error, rule, warning
from vgpu_operator.core.rules.snapshot import ClusterSnapshot
from vgpu_operator.models.volcano_views import SchedulerConfView

UAE = "UnexpectedAdmissionError"


def _conf_ref(s: ClusterSnapshot) -> ObjectRef:
    ref = s.config.scheduler.config_map
    return cm_ref(ref.namespace, ref.name)


def _unreadable(s: ClusterSnapshot) -> Issue:
    ref = s.config.scheduler.config_map
    if s.scheduler_cm is None:
        problem = f"ConfigMap {ref.namespace}/{ref.name} not found"
        fix = "point scheduler.configMap of the operator config at the scheduler's ConfigMap"
    else:
        problem = f"key {ref.key!r} of {ref.namespace}/{ref.name} is missing or not YAML"
        fix = f"restore a valid {ref.key}"
    return error(_conf_ref(s), f"the scheduler conf cannot be checked: {problem}", fix=fix)


def _conf(s: ClusterSnapshot) -> SchedulerConfView | None:
    return s.scheduler_conf


@rule("scheduler-vgpu-enabled", "deviceshare is enabled with VGPUEnable: true")
def check_vgpu_enabled(s: ClusterSnapshot) -> Iterator[Issue]:
    conf = _conf(s)
    if conf is None:
        yield _unreadable(s)
        return
    obj = _conf_ref(s)
    consequence = (
        "pods requesting vGPU resources are bound without device annotations and kubelet "
        f"rejects them with {UAE} (the device plugin finds no devices to allocate)"
    )
    plugins = conf.plugins_named("deviceshare")
    if not plugins:
        yield error(
            obj,
            f"no deviceshare plugin in any tier: {consequence}",
            fix="add `- name: deviceshare` with `arguments: {deviceshare.VGPUEnable: true}` to "
            "the tier that has predicates",
            fixable=True,
        )
        return
    args = conf.deviceshare
    if args.mistyped("VGPUEnable"):
        value = args.raw["deviceshare.VGPUEnable"]
        yield error(
            obj,
            f"deviceshare.VGPUEnable is {value!r}, not a YAML boolean; Volcano ignores it and "
            f"vGPU stays off: {consequence}",
            fix="write `deviceshare.VGPUEnable: true` without quotes",
            fixable=True,
        )
    elif not args.vgpu_enable:
        yield error(
            obj,
            f"deviceshare.VGPUEnable is not true: {consequence}",
            fix="set `deviceshare.VGPUEnable: true` in the deviceshare arguments",
            fixable=True,
        )
    if plugins[0].options.get("enablePredicate") is False:
        yield error(
            obj,
            "deviceshare has `enablePredicate: false`: nodes are picked without checking free "
            "GPU memory and cores",
            fix="remove `enablePredicate: false` from the deviceshare plugin",
            fixable=True,
        )
    if len(plugins) > 1:
        tiers = ", ".join(str(p.tier) for p in plugins)
        yield warning(
            obj,
            f"deviceshare is listed {len(plugins)} times (tiers {tiers}); the operator and this "
            "check use the first",
            fix="keep one deviceshare entry",
        )


@rule("scheduler-predicates", "the predicates plugin is enabled next to deviceshare")
def check_predicates(s: ClusterSnapshot) -> Iterator[Issue]:
    conf = _conf(s)
    if conf is None:
        yield _unreadable(s)
    elif conf.plugin("predicates") is None:
        yield error(
            _conf_ref(s),
            "no predicates plugin: the device allocation that writes volcano.sh/vgpu-ids-new "
            "and devices-to-allocate runs in its allocate handler, so vGPU pods are bound "
            f"without them and fail with {UAE} (volcano #4501)",
            fix="add `- name: predicates` to the tier that has deviceshare",
            fixable=True,
        )


@rule("scheduler-fatal-combination", "VGPUEnable is not combined with legacy GPU sharing")
def check_fatal_combination(s: ClusterSnapshot) -> Iterator[Issue]:
    conf = _conf(s)
    if conf is None:
        return
    args = conf.deviceshare
    on = [
        k
        for k, v in (
            ("VGPUEnable", args.vgpu_enable),
            ("GPUSharingEnable", args.gpu_sharing_enable),
            ("GPUNumberEnable", args.gpu_number_enable),
        )
        if v
    ]
    if len(on) >= 2:
        yield error(
            _conf_ref(s),
            f"deviceshare enables {' and '.join(on)} together: vc-scheduler exits at start "
            "(klog.Fatal), so nothing is scheduled",
            fix="keep deviceshare.VGPUEnable: true and set GPUSharingEnable/GPUNumberEnable to "
            "false (see legacy-gpu-sharing for pods that still use them)",
            fixable=True,
        )


@rule("scheduler-ascend-hami", "AscendHAMiVNPUEnable is on when Ascend vNPU (HAMi) is used")
def check_ascend_hami(s: ClusterSnapshot) -> Iterator[Issue]:
    conf = _conf(s)
    if conf is None or not s.config.ascend_vnpu.enabled:
        return
    if not conf.deviceshare.ascend_hami_vnpu_enable:
        yield error(
            _conf_ref(s),
            "Ascend vNPU is enabled in the operator config but deviceshare.AscendHAMiVNPUEnable "
            "is not true: the scheduler registers no Ascend device and vNPU pods stay pending",
            fix="set `deviceshare.AscendHAMiVNPUEnable: true` (or turn ascendVnpu.enabled off)",
            fixable=True,
        )

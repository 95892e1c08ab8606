"""Rules on the Volcano scheduler conf (volcano-sh/volcano@v1.15.1:
pkg/scheduler/plugins/deviceshare/deviceshare.go, pkg/scheduler/plugins/predicates/predicates.go;
volcano-sh/volcano#4501, Project-HAMi/volcano-vgpu-device-plugin#2). Switches
are read as the scheduler's version reads them: from v1.15.0 a quoted "true" is true
(`strconv.ParseBool`, volcano-sh/volcano@v1.15.0:pkg/scheduler/framework/arguments.go), so
`GPUSharingEnable: "true"` next to `VGPUEnable: true` is fatal there
(volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/deviceshare/deviceshare.go `klog.Fatal`)."""

from __future__ import annotations

from collections.abc import Iterator

from vgpu_operator.core.rules.base import Issue, ObjectRef, cm_ref, error, rule, warning
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.volcano_views import SchedulerConfView, go_parse_bool

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


def _not_read(s: ClusterSnapshot, key: str) -> str:
    """Why the scheduler does not read a switch's value as a boolean (`mistyped`)."""
    value = (s.scheduler_conf.deviceshare.raw if s.scheduler_conf else {}).get(f"deviceshare.{key}")
    sc = s.scheduler_container
    version = sc.version if sc else None
    if isinstance(value, str) and go_parse_bool(value) is not None:
        if version is None:
            return (
                f"deviceshare.{key} is {value!r}, a string: Volcano up to v1.14 reads only YAML "
                "booleans and ignores it (v1.15.0 and later parse it; the scheduler's version "
                "is unknown from its image tag)"
            )
        return (
            f"deviceshare.{key} is {value!r}, a string: Volcano {version} reads only YAML "
            "booleans (strings are parsed from v1.15.0) and ignores it"
        )
    return (
        f"deviceshare.{key} is {value!r}, which Volcano cannot read as a boolean; it keeps the "
        "default (false)"
    )


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
        yield error(
            obj,
            f"{_not_read(s, 'VGPUEnable')}, so vGPU stays off: {consequence}",
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
    # as the scheduler's version reads them: from v1.15.0 a quoted "true" counts
    on = [k for k in ("VGPUEnable", "GPUSharingEnable", "GPUNumberEnable") if args.maybe(k)]
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
        how = (
            _not_read(s, "AscendHAMiVNPUEnable")
            if conf.deviceshare.mistyped("AscendHAMiVNPUEnable")
            else "deviceshare.AscendHAMiVNPUEnable is not true"
        )
        yield error(
            _conf_ref(s),
            f"Ascend vNPU is enabled in the operator config but {how}: the scheduler registers "
            "no Ascend device and vNPU pods stay pending",
            fix="set `deviceshare.AscendHAMiVNPUEnable: true` (or turn ascendVnpu.enabled off)",
            fixable=True,
        )

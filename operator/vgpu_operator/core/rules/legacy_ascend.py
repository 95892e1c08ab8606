"""Legacy GPU sharing (deprecated since Volcano v1.9:
volcano-sh/volcano@v1.15.1:docs/user-guide/how_to_use_gpu_sharing.md;
docs/from-a-hand-configured-cluster.md's seed 003
section) and Ascend vNPU in MindCluster mode (its seed 004 section,
`异构设备虚拟化`): both configured in the scheduler conf and a device plugin."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from vgpu_operator.core.rules.base import Issue, ObjectRef, cm_ref, error, info, rule, warning
from vgpu_operator.core.volcano.placement import reaches
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, Obj, name_of, pod_done, requested
from vgpu_operator.models.volcano import LEGACY_GPU_MEMORY, LEGACY_GPU_NUMBER
from vgpu_operator.models.volcano_views import WorkloadView, workload_view

MIGRATION = (
    "request volcano.sh/vgpu-number (and volcano.sh/vgpu-memory in MiB) instead; drain the "
    "legacy pods before switching a node, because the vGPU accounting does not see GPUs they "
    "hold (volcano #4573: such GPUs can be allocated twice)"
)


@rule("legacy-gpu-sharing", "no legacy GPU sharing configured or requested")
def check_legacy(s: ClusterSnapshot) -> Iterator[Issue]:
    conf = s.scheduler_conf
    ref = s.config.scheduler.config_map
    if conf is not None:
        args = conf.deviceshare
        for key, on in (
            ("deviceshare.GPUSharingEnable", args.maybe("GPUSharingEnable")),
            ("deviceshare.GPUNumberEnable", args.maybe("GPUNumberEnable")),
        ):
            if on:
                yield warning(
                    cm_ref(ref.namespace, ref.name),
                    f"{key} is on: GPU sharing is deprecated since Volcano v1.9",
                    fix=f"migrate to vGPU ({MIGRATION}), then set {key}: false",
                    fixable=args.vgpu_enable,
                )
        predicates = conf.plugin("predicates")
        for key in ("predicate.GPUSharingEnable", "predicate.GPUNumberEnable"):
            if predicates is not None and predicates.arguments.get(key) is True:
                yield warning(
                    cm_ref(ref.namespace, ref.name),
                    f"predicates has {key}: true, the Volcano ≤ v1.8.2 form of GPU sharing "
                    "(deprecated since v1.9)",
                    fix=f"remove {key} and migrate to vGPU ({MIGRATION})",
                )
    for pod in s.pods:
        if pod_done(pod):
            continue
        legacy = sorted(set(requested(pod)) & {LEGACY_GPU_MEMORY, LEGACY_GPU_NUMBER})
        if legacy:
            yield warning(
                ObjectRef.of("Pod", pod),
                f"the pod requests {', '.join(legacy)} (legacy GPU sharing, deprecated since "
                "Volcano v1.9)",
                fix=MIGRATION[0].upper() + MIGRATION[1:],
            )


def mindcluster_plugins(s: ClusterSnapshot) -> list[tuple[Obj, WorkloadView, str | None]]:
    """DaemonSets running the Ascend (MindCluster) device plugin, with their
    `-presetVirtualDevice` value."""
    out = []
    for ds in s.daemonsets:
        view = workload_view(ds)
        for c in view.containers:
            flags = c.flags
            if "presetVirtualDevice" in flags or "volcanoType" in flags:
                preset = flags.get("presetVirtualDevice")
                out.append((ds, view, preset.value if preset else None))
                break
    return out


def _is_false(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() == "false")


@rule("ascend-mindcluster", "Ascend MindCluster vNPU is switched on consistently")
def check_mindcluster(s: ClusterSnapshot) -> Iterator[Issue]:
    conf = s.scheduler_conf
    if conf is None:
        return
    ref = s.config.scheduler.config_map
    conf_obj = cm_ref(ref.namespace, ref.name)
    args = conf.deviceshare
    enabled = args.ascend_mindcluster_vnpu_enable
    init = conf.configuration("init-params") or {}
    init_false = _is_false(init.get("presetVirtualDevice"))
    plugins = mindcluster_plugins(s)
    if args.mistyped("AscendMindClusterVNPUEnable"):
        yield error(
            conf_obj,
            "deviceshare.AscendMindClusterVNPUEnable is not a boolean this Volcano reads (a "
            "quoted value counts from v1.15.0 only); it stays off",
            fix="write `deviceshare.AscendMindClusterVNPUEnable: true`",
        )
    if enabled and not init_false:
        yield error(
            conf_obj,
            "AscendMindClusterVNPUEnable is on but the init-params configuration does not set "
            'presetVirtualDevice: "false": 310P chips are not virtualized dynamically',
            fix='add presetVirtualDevice: "false" to the arguments of the `init-params` entry '
            "under configurations",
        )
    if enabled and not plugins:
        yield warning(
            conf_obj,
            "AscendMindClusterVNPUEnable is on but no Ascend device plugin DaemonSet (with "
            "-presetVirtualDevice) was found",
            fix="deploy the MindCluster Ascend device plugin with -presetVirtualDevice=false",
        )
    for ds, _, preset in plugins:
        ds_ref = ObjectRef.of("DaemonSet", ds)
        plugin_false = _is_false(preset)
        if enabled and not plugin_false:
            yield error(
                (conf_obj, ds_ref),
                "the scheduler virtualizes 310P chips dynamically but the device plugin runs "
                f"with -presetVirtualDevice={preset or 'true'}",
                fix="set -presetVirtualDevice=false in the device plugin's args",
            )
        elif not enabled and plugin_false:
            yield warning(
                (conf_obj, ds_ref),
                "the device plugin runs with -presetVirtualDevice=false but "
                "deviceshare.AscendMindClusterVNPUEnable is off: nothing creates the virtual "
                "devices",
                fix="set deviceshare.AscendMindClusterVNPUEnable: true (and init-params "
                'presetVirtualDevice: "false"), or drop the flag',
            )
    if not enabled and init_false and not plugins:
        yield warning(
            conf_obj,
            'init-params sets presetVirtualDevice: "false" but AscendMindClusterVNPUEnable is off',
            fix="switch both on together, or neither",
        )
    if enabled and args.ascend_hami_vnpu_enable:
        hami = s.ascend_plugin
        both = sorted(
            name_of(n)
            for n in s.nodes
            if hami is not None and reaches(hami, n) and any(reaches(v, n) for _, v, _ in plugins)
        )
        if both:
            yield error(
                conf_obj,
                "HAMi mode and MindCluster mode are both on and both device plugins serve the "
                f"same chips on {', '.join(both[:10])}",
                fix="keep each Ascend node in one mode: restrict one plugin's nodeSelector",
            )
        else:
            yield info(
                conf_obj,
                "HAMi and MindCluster vNPU modes are both on (no node is served by both plugins "
                "now)",
                fix="keep their node sets apart",
            )

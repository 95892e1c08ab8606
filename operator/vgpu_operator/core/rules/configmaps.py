"""Rules on the ConfigMaps: where each component reads the device config and drift of what the
operator renders (the Ascend `vnpus:` mirror: rules.vnpus) (volcano-sh/volcano@v1.15.1:
pkg/scheduler/plugins/deviceshare/deviceshare.go and pkg/scheduler/api/devices/config/config.go,
Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/util/util.go)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.rules.base import Issue, ObjectRef, cm_ref, error, info, rule, warning
from vgpu_operator.core.volcano.geometry import build_known_geometries, catalog_for
from vgpu_operator.core.volcano.mig_memory import (
    describe,
    hardware_memory,
    memory_corrections,
    provably_above,
)
from vgpu_operator.core.volcano.render import (
    RenderError,
    desired_nvidia,
    render_ascend_node_config,
    render_device_config,
    render_node_config,
    vnpus_section,
)
from vgpu_operator.core.volcano.render.common import Rendered, plain
from vgpu_operator.core.volcano.render.device_config import existing_geometries
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, DeviceConfigSource, annotations_of
from vgpu_operator.models.config_refs import ConfigMapRef
from vgpu_operator.models.volcano import (
    DEFAULT_DEVICE_CONFIG_NAME,
    PLUGIN_CM_NAMESPACES,
    NvidiaConfig,
)

ID_LOCATION = "device-config-location"
FALLBACK = (
    "it then runs on built-in defaults for the life of the process: no knownMigGeometries "
    "(every MIG node is treated as hami-core) and no memory-percentage resource"
)


def _ref(src: DeviceConfigSource) -> ObjectRef:
    return cm_ref(src.namespace, src.name)


def _nvidia_dump(n: NvidiaConfig | None) -> dict[str, Any]:
    return plain(n.model_dump(by_alias=True, exclude_none=True)) if n else {}


def _differing_keys(a: NvidiaConfig | None, b: NvidiaConfig | None) -> list[str]:
    da, db = _nvidia_dump(a), _nvidia_dump(b)
    return sorted(k for k in set(da) | set(db) if da.get(k) != db.get(k))


@rule(ID_LOCATION, "the scheduler and the device plugin read the same device ConfigMap")
def check_location(s: ClusterSnapshot) -> Iterator[Issue]:
    cfg = s.config.device_config
    sched, plug = s.scheduler_device_config, s.plugin_device_config
    conf_ref = cm_ref(s.config.scheduler.config_map.namespace, s.config.scheduler.config_map.name)
    plugin_reads = f"{DEFAULT_DEVICE_CONFIG_NAME} in {' then '.join(s.plugin_namespaces)}"
    if cfg.name != DEFAULT_DEVICE_CONFIG_NAME or cfg.namespace not in s.plugin_namespaces:
        yield error(
            cm_ref(cfg.namespace, cfg.name),
            f"the operator renders {cfg.namespace}/{cfg.name}, but the device plugin only reads "
            f"{plugin_reads} (the name is fixed in the plugin)",
            fix=f"set deviceConfig in the operator config to {PLUGIN_CM_NAMESPACES[0]}/"
            f"{DEFAULT_DEVICE_CONFIG_NAME}",
        )
    conf_ok = s.scheduler_conf is not None
    where = f"{sched.namespace}/{sched.name}"
    if sched.cm is None or sched.parsed is None:
        problem = "does not exist" if sched.cm is None else f"cannot be read ({sched.error})"
        yield error(
            (conf_ref, _ref(sched)),
            f"the scheduler loads the device config from {where}, which {problem}; " + FALLBACK,
            fix=f"point deviceshare.KnownGeometriesCMName/Namespace at the ConfigMap the plugin "
            f"reads ({plugin_reads}) and restart the scheduler",
            fixable=conf_ok,
        )
    elif sched.nvidia is None:
        yield error(
            (conf_ref, _ref(sched)),
            f"the scheduler loads {where}, which has no nvidia: section: its resource names are "
            "empty, so no pod is seen as a vGPU pod (with Ascend, the nvidia: and vnpus: "
            "sections must be in one ConfigMap)",
            fix=f"point the scheduler at {cfg.namespace}/{cfg.name} (the operator mirrors "
            "vnpus: into it)",
            fixable=conf_ok,
        )
    if plug.cm is None:
        yield error(
            _ref(plug),
            f"the device plugin finds no {plugin_reads}: from v1.12 it then has no resource "
            "names and a split count of 0",
            fix=f"create {PLUGIN_CM_NAMESPACES[0]}/{DEFAULT_DEVICE_CONFIG_NAME}",
            fixable=(cfg.namespace, cfg.name)
            in {(ns, DEFAULT_DEVICE_CONFIG_NAME) for ns in s.plugin_namespaces},
        )
    same = (sched.namespace, sched.name) == (plug.namespace, plug.name)
    if sched.nvidia is not None and plug.cm is not None and not same:
        diff = _differing_keys(sched.nvidia, plug.nvidia)
        what = (
            f"and their nvidia: sections differ in {', '.join(diff)}: the scheduler and the "
            "plugin disagree (e.g. on resource names: pods fail with UnexpectedAdmissionError)"
            if diff
            else "(same nvidia: content today, but an edit to one is never seen by the other)"
        )
        yield (error if diff else warning)(
            (conf_ref, _ref(sched), _ref(plug)),
            f"the scheduler reads {where} but the plugin reads {plug.namespace}/{plug.name} {what}",
            fix=f"set deviceshare.KnownGeometriesCMNamespace: {plug.namespace} and "
            f"KnownGeometriesCMName: {plug.name}, then restart the scheduler",
            fixable=conf_ok,
        )
    copies = [ns for ns in PLUGIN_CM_NAMESPACES if s.configmap(ns, DEFAULT_DEVICE_CONFIG_NAME)]
    if len(copies) > 1:
        first, second = (
            s.plugin_device_config,
            next(
                s.device_source(ns, DEFAULT_DEVICE_CONFIG_NAME)
                for ns in copies
                if ns != s.plugin_device_config.namespace
            ),
        )
        differ = _differing_keys(first.nvidia, second.nvidia)
        yield warning(
            (cm_ref(ns, DEFAULT_DEVICE_CONFIG_NAME) for ns in copies),
            f"{DEFAULT_DEVICE_CONFIG_NAME} exists in {' and '.join(copies)}; the plugin reads "
            f"only {first.namespace}, so edits to the {second.namespace} copy do nothing for it"
            + (f" (the copies differ in {', '.join(differ)})" if differ else ""),
            fix=f"delete the {second.namespace} copy and keep one ConfigMap",
        )


def _operator_manages(s: ClusterSnapshot) -> bool:
    cm = s.configmap(s.config.device_config.namespace, s.config.device_config.name)
    return any(contract.ANN_CONFIG in annotations_of(n) for n in s.nodes) or (
        cm is not None and contract.ANN_DATA_CHANGED_AT in annotations_of(cm)
    )


@rule("device-config-rendered", "the device ConfigMap holds what the operator renders")
def check_device_rendered(s: ClusterSnapshot) -> Iterator[Issue]:
    if not _operator_manages(s):
        return
    ref = s.config.device_config
    cm = s.configmap(ref.namespace, ref.name)
    obj = cm_ref(ref.namespace, ref.name)
    src = s.configmap(
        s.config.ascend_vnpu.scheduler_device.namespace, s.config.ascend_vnpu.scheduler_device.name
    )
    vnpus = vnpus_section(src, s.config.ascend_vnpu.scheduler_device.key)
    try:
        rendered = render_device_config(
            cm,
            s.config,
            "",
            mig_models=s.mig_gpu_names,
            reported=s.reported_models,
            vnpus=vnpus,
            scheduler_version=s.scheduler_container.version if s.scheduler_container else None,
        )
    except RenderError as exc:
        yield error(
            obj,
            f"the operator cannot render it: {exc}",
            fix="repair the YAML by hand; the operator does not overwrite it",
        )
        return
    if not rendered.changed:
        return
    current = s.device_source(ref.namespace, ref.name).nvidia
    have = _nvidia_dump(current)
    keys = [k for k, v in desired_nvidia(s.config).items() if have.get(k) != v]
    geometries = existing_geometries(have) or []
    plan = build_known_geometries(
        geometries,
        s.mig_gpu_names,
        catalog_for(s.config),
        s.reported_models,
        from_inventory=s.config.mig_geometries.from_inventory,
        builtins=s.config.mig_geometries.builtins,
    )
    if plan.appended:
        keys.append(
            "knownMigGeometries (models to add: "
            + ", ".join(m for e in plan.appended for m in e.models)
            + ")"
        )
    elif "knownMigGeometries" not in have:
        keys.append("knownMigGeometries (missing)")
    lowered = list(
        filter(provably_above, memory_corrections(geometries, hardware_memory(s.reported_models)))
    )
    if lowered:
        keys.append(
            "knownMigGeometries memory (above the instances': "
            + "; ".join(describe(c) for c in lowered)
            + ")"
        )
    if cm is None:
        keys = ["the ConfigMap does not exist"]
    elif not keys:
        keys = ["vnpus (not the copy of hami-scheduler-device)"]
    yield warning(
        obj,
        "differs from the operator config in: " + "; ".join(keys),
        fix="let the operator render it (enforce mode), or change the operator config",
        fixable=True,
    )


@rule("node-config-rendered", "each managed node's node-config entry matches its released config")
def check_node_rendered(s: ClusterSnapshot) -> Iterator[Issue]:
    released = {n["metadata"]["name"]: s.released(n) for n in s.nodes if s.released(n)}
    renders: tuple[tuple[ConfigMapRef, Callable[..., Rendered]], ...] = (
        (s.config.node_config, partial(render_node_config, gpus=s.gpus_by_node)),
        (
            s.config.ascend_node_config,
            partial(render_ascend_node_config, hami_vnpu_core=s.hami_vnpu_core),
        ),
    )
    for ref, render in renders:
        cm = s.configmap(ref.namespace, ref.name)
        try:
            rendered = render(cm, released, s.config, "")
        except RenderError as exc:
            yield error(
                cm_ref(ref.namespace, ref.name),
                f"the operator cannot render it: {exc}",
                fix="repair it by hand; the operator does not overwrite it",
            )
            continue
        for node in sorted(rendered.changed_entries):
            yield warning(
                (cm_ref(ref.namespace, ref.name), ObjectRef(kind="Node", name=node)),
                f"the {ref.key} entry for {node} does not match its released configuration "
                "(vgpu.volcano.sh/config)"
                + ("" if node in released else "; the node is no longer managed"),
                fix="let the operator render it (enforce mode); the node's plugin pod must then "
                "restart",
                fixable=True,
            )


@rule("settings-without-effect", "no setting is given that no component acts on")
def check_no_effect(s: ClusterSnapshot) -> Iterator[Issue]:
    """Settings the components read but that change nothing (notes, not errors):
    - `deviceMemoryScaling`: the plugin loads it (and the per-node value) but no released plugin
      version uses it (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/util/util.go only
      assigns it); registered memory is the GPU's MiB / gpuMemoryFactor;
    - `deviceCoreScaling` > 1: the plugin registers more core units, but the scheduler caps a
      GPU at 100 (volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/utils.go);
    - `deviceshare.SchedulePolicy` without an integer `ScheduleWeight` > 0: it orders GPUs
      inside a node, but the device score is added to node scores only with a weight
      (volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/deviceshare/deviceshare.go; `GetInt`
      takes YAML integers only)."""
    src = s.plugin_device_config
    n = src.nvidia
    if n is not None:
        if n.device_memory_scaling is not None and float(n.device_memory_scaling) != 1.0:
            yield info(
                _ref(src),
                f"deviceMemoryScaling is {n.device_memory_scaling:g}: no device plugin version "
                "applies it (registered memory is the GPU's MiB / gpuMemoryFactor)",
                fix="leave deviceMemoryScaling at 1 (deviceDefaults.deviceMemoryScaling in the "
                "operator config); to overcommit memory there is no supported setting",
            )
        if n.device_core_scaling is not None and float(n.device_core_scaling) > 1.0:
            yield info(
                _ref(src),
                f"deviceCoreScaling is {n.device_core_scaling:g}: the scheduler still gives each "
                "GPU at most 100 cores, so it adds no scheduling capacity",
                fix="leave deviceCoreScaling at 1 (deviceDefaults.deviceCoreScaling)",
            )
    policies: dict[str, set[str]] = {}
    for node in s.vgpu_nodes:
        rc = s.released(node)
        hc = rc.hami_core if rc is not None else None
        if rc is None or hc is None:
            continue
        if hc.device_memory_scaling is not None and hc.device_memory_scaling != 1.0:
            policies.setdefault(rc.policy or "?", set()).add(
                f"hamiCore.deviceMemoryScaling {hc.device_memory_scaling:g} (no plugin version "
                "applies it)"
            )
        if hc.device_core_scaling is not None and hc.device_core_scaling > 1.0:
            policies.setdefault(rc.policy or "?", set()).add(
                f"hamiCore.deviceCoreScaling {hc.device_core_scaling:g} (the scheduler caps a "
                "GPU at 100 cores)"
            )
    for policy, texts in sorted(policies.items()):
        yield info(
            ObjectRef(kind=contract.POLICY_KIND, name=policy),
            f"policy {policy} sets {'; '.join(sorted(texts))}: no effect on scheduling",
            fix="remove the setting from the policy (or set it to 1)",
        )
    conf = s.scheduler_conf
    if conf is None or conf.plugin("deviceshare") is None:
        return
    args = conf.deviceshare.raw
    order = args.get("deviceshare.SchedulePolicy")
    weight = args.get("deviceshare.ScheduleWeight")
    if order and not (isinstance(weight, int) and not isinstance(weight, bool) and weight > 0):
        ref = s.config.scheduler.config_map
        yield info(
            cm_ref(ref.namespace, ref.name),
            f"deviceshare.SchedulePolicy is {order!r} but ScheduleWeight is "
            f"{'unset' if weight is None else repr(weight)}: it orders GPUs inside a node only; "
            "nodes get no device score, so pods are not bin-packed or spread across nodes by GPU "
            "use",
            fix="set deviceshare.ScheduleWeight to an integer > 0 (e.g. 10)",
        )

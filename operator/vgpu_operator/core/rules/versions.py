"""Rules that depend on the scheduler and plugin versions, read from the image tags (the
registration annotations of Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/util/types.go and
volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/device_info.go, and the plugin
docs/compatibility.md): per-node values the plugin ignores before
v1.12, the registration handshake, and the resource names Volcano can see."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from vgpu_operator.core.rules.base import Issue, ObjectRef, error, info, rule, warning
from vgpu_operator.core.rules.plugin import plugin_ref
from vgpu_operator.core.volcano import component_versions
from vgpu_operator.core.volcano.placement import reaches
from vgpu_operator.core.volcano.plugin_identity import foreign_vgpu_plugin
from vgpu_operator.core.volcano.plugin_refusal import flag_values
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, annotations_of, name_of
from vgpu_operator.models.config_refs import (
    DEFAULT_CORES_NAME,
    DEFAULT_COUNT_NAME,
    DEFAULT_MEMORY_NAME,
)
from vgpu_operator.models.volcano import (
    HANDSHAKE_ANNOTATION,
    HARDCODED_ALLOCATABLE,
    REGISTER_ANNOTATION,
)


def _refs(s: ClusterSnapshot) -> tuple[ObjectRef, ObjectRef]:
    d, p = s.config.scheduler.deployment, s.config.device_plugin
    return (
        ObjectRef(kind="Deployment", name=d.name, namespace=d.namespace),
        ObjectRef(kind="DaemonSet", name=p.name, namespace=p.namespace),
    )


@rule("plugin-node-overrides", "plugin ≤ v1.11: per-node split counts and core scaling agree")
def check_node_overrides(s: ClusterSnapshot) -> Iterator[Issue]:
    """Up to v1.11 the plugin registers every GPU with its flags' split count and core scaling:
    a policy's `hamiCore` values reach config.json but change nothing (`component_versions`). The
    operator
    refuses such a change (`plugin_refusal`); this finds nodes released with such values before
    (by hand, an older operator, or a plugin downgraded since)."""
    c = s.plugin_container
    if c is None or c.version is None or component_versions.plugin_reads_node_overrides(c.version):
        return
    values = flag_values(c)
    ignored: dict[str, tuple[set[str], list[str]]] = {}
    for node in s.vgpu_nodes:
        rc = s.released(node)
        hc = rc.hami_core if rc is not None else None
        if rc is None or hc is None:
            continue
        what: list[str] = []
        if hc.device_split_count and hc.device_split_count != values["device-split-count"]:
            what.append(
                f"deviceSplitCount {hc.device_split_count} (the plugin uses "
                f"--device-split-count={values['device-split-count']:g})"
            )
        if hc.device_core_scaling and hc.device_core_scaling != values["device-cores-scaling"]:
            what.append(
                f"deviceCoreScaling {hc.device_core_scaling:g} (the plugin uses "
                f"--device-cores-scaling={values['device-cores-scaling']:g})"
            )
        if hc.filter_devices and (hc.filter_devices.uuid or hc.filter_devices.index):
            what.append("filterDevices (every GPU is registered)")
        if what:
            nodes, texts = ignored.setdefault(rc.policy or "?", (set(), []))
            nodes.add(name_of(node))
            texts.extend(t for t in what if t not in texts)
    for policy, (nodes, texts) in sorted(ignored.items()):
        shown = sorted(nodes)
        yield warning(
            (plugin_ref(s), *(ObjectRef(kind="Node", name=n) for n in shown[:5])),
            f"plugin {c.version} ignores the per-node values of policy {policy} on "
            f"{len(shown)} node(s) ({', '.join(shown[:5])}): {'; '.join(texts)}; only plugin "
            "v1.12.0 and later read them from config.json",
            fix="upgrade the device plugin to v1.12.0 or later, or make the policy's hamiCore "
            "values equal to the flags (the operator sets the flags to deviceDefaults)",
        )


@rule("version-handshake", "plugin and scheduler versions agree on node registration")
def check_handshake(s: ClusterSnapshot) -> Iterator[Issue]:
    sched_ref, plugin_ref = _refs(s)
    both = (sched_ref, plugin_ref)
    sc, pc = s.scheduler_container, s.plugin_container
    if sc is None or pc is None:
        missing = [str(r) for r, c in ((sched_ref, sc), (plugin_ref, pc)) if c is None]
        yield warning(
            both,
            f"{' and '.join(missing)} not found: versions cannot be compared",
            fix="point scheduler.deployment / devicePlugin in the operator config at them",
        )
        return
    sv, pv = sc.version, pc.version
    if sv is None or pv is None:
        unknown = [f"{c.image}" for c, v in ((sc, sv), (pc, pv)) if v is None]
        yield info(
            both,
            f"no version in the image tag of {', '.join(unknown)}: version checks are skipped",
            fix="use images tagged with their version (vX.Y.Z)",
        )
    if pv is not None and sv is not None:
        if not component_versions.plugin_writes_handshake(
            pv
        ) and component_versions.scheduler_requires_handshake(sv):
            yield error(
                both,
                f"plugin {pv} no longer writes {HANDSHAKE_ANNOTATION}, but Volcano {sv} ignores "
                "every node without it: no node gets any vGPU device, and nothing says so",
                fix="upgrade Volcano to v1.14.3+/v1.15.1+ or use plugin v1.12.0",
            )
        elif component_versions.plugin_writes_handshake(
            pv
        ) and not component_versions.scheduler_requires_handshake(sv):
            yield info(
                both,
                f"plugin {pv} with Volcano {sv} is outside the plugin's compatibility table "
                "(plugin v1.12.0 and below go with Volcano v1.15.0 and below); registration "
                "works through allocatable",
                fix="use the plugin release built for this Volcano",
            )
        if not component_versions.plugin_writes_mode(
            pv
        ) and component_versions.scheduler_rejects_five_fields(sv):
            yield error(
                both,
                f"plugin {pv} writes 5-field register records; Volcano {sv} rejects them "
                "('wrong Node GPU info')",
                fix="upgrade the plugin to v1.10.0 or later",
            )
    if sv is not None and component_versions.scheduler_requires_handshake(sv):
        for node in s.vgpu_nodes:
            if HANDSHAKE_ANNOTATION not in annotations_of(node):
                yield error(
                    ObjectRef(kind="Node", name=name_of(node)),
                    f"Volcano {sv} ignores {name_of(node)}: it has no {HANDSHAKE_ANNOTATION} (no "
                    "plugin of v1.12.0 or earlier reports there)",
                    fix="make sure a device plugin pod (≤ v1.12.0) runs on the node",
                )


def _allocatable(node: Mapping[str, Any], key: str) -> int:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    try:
        return int(str(alloc.get(key, "0")))
    except ValueError:
        return 0


@rule("scheduler-default-resource-names", "names Volcano v1.14.3+/v1.15.1+ can see")
def check_default_names(s: ClusterSnapshot) -> Iterator[Issue]:
    sc = s.scheduler_container
    sv = sc.version if sc else None
    if sv is None or not component_versions.scheduler_requires_default_names(sv):
        return
    sched_ref, _ = _refs(s)
    defaults = (DEFAULT_COUNT_NAME, DEFAULT_MEMORY_NAME, DEFAULT_CORES_NAME)
    n = s.scheduler_nvidia
    sources = {
        "the scheduler's ConfigMap": (
            n.resource_count_name,
            n.resource_memory_name,
            n.resource_core_name,
        ),
        "the operator config": (
            s.config.resource_names.count,
            s.config.resource_names.memory,
            s.config.resource_names.cores,
        ),
    }
    for where, names in sources.items():
        odd = [
            f"{got} (not {want})"
            for got, want in zip(names, defaults, strict=True)
            if got and got != want
        ]
        if odd:
            yield error(
                sched_ref,
                f"{where} names {', '.join(odd)}, but Volcano {sv} only sees nodes whose "
                f"allocatable has {', '.join(HARDCODED_ALLOCATABLE)}",
                fix="use the default volcano.sh/vgpu-* names"
                + (
                    " in resourceNames of the operator config"
                    if where.endswith("config")
                    else " (the operator renders them)"
                ),
                fixable=where.endswith("ConfigMap") and s.config.resource_names.is_default(),
            )
    for node in s.vgpu_nodes:
        missing = [k for k in HARDCODED_ALLOCATABLE if _allocatable(node, k) <= 0]
        if missing:
            yield error(
                ObjectRef(kind="Node", name=name_of(node)),
                f"Volcano {sv} ignores {name_of(node)}: its allocatable lacks {', '.join(missing)}",
                fix="make sure the device plugin runs there and registers the default names",
            )


@rule("plugin-static-mig", "plugin ≤ v1.11 stays off static-MIG nodes (it ignores filterdevices)")
def check_static_mig(s: ClusterSnapshot) -> Iterator[Issue]:
    """A static-MIG node's node-config entry filters every GPU, which keeps plugin v1.12.0 and
    later from registering any (core.volcano.render.node_config); up to v1.11 `filterdevices` is
    read into a struct nothing uses (`component_versions.plugin_reads_node_overrides`), so a plugin
    pod there registers the node's MIG-enabled GPUs in hami-core mode, and Volcano places vGPU
    pods on them beside NVIDIA's plugin, which serves their MIG instances. Only the placement
    keeps it off; the operator patches it in `enforce` mode with restarts allowed (the
    plugin-placement rule), so this speaks where it does not: `report`, `observe`, or restarts
    off. Static-MIG nodes are those released so (in `observe` mode a node not yet released is
    not known as one; the Observed condition lists the placement patch `enforce` would send)."""
    c, view = s.plugin_container, s.plugin
    if c is None or view is None or c.version is None or foreign_vgpu_plugin(s) is not None:
        return
    if component_versions.plugin_reads_node_overrides(c.version):
        return
    if s.config.mode == "enforce" and s.config.restarts.allowed:
        return  # the placement patch keeps the plugin off (plugin-placement)
    reached = []
    for node in s.nodes:
        rc = s.released(node)
        if rc is None or rc.mig is None or rc.mig.partitioning != "static":
            continue
        if reaches(view, node) or REGISTER_ANNOTATION in annotations_of(node):
            reached.append(name_of(node))
    if not reached:
        return
    shown = reached[:5]
    more = f" and {len(reached) - 5} more" if len(reached) > 5 else ""
    registered = [n for n in shown if REGISTER_ANNOTATION in annotations_of(s.node(n) or {})]
    why = (
        "restarts.allowed is false (the placement patch restarts the plugin pods)"
        if s.config.mode == "enforce"
        else f"the operator config's mode is {s.config.mode}"
    )
    yield error(
        (plugin_ref(s), *(ObjectRef(kind="Node", name=n) for n in shown)),
        f"plugin {c.version} reaches {len(reached)} static-MIG node(s) ({', '.join(shown)}{more})"
        + (f", and its {REGISTER_ANNOTATION} is on {', '.join(registered)}" if registered else "")
        + ": up to v1.11 it registers every GPU whatever the node's filterdevices entry says, so "
        "it registers their MIG-enabled GPUs in hami-core mode and Volcano places vGPU pods on "
        f"them; the operator does not keep it off, as {why}",
        fix="upgrade the device plugin to v1.12.0 or later (the static node's filterdevices entry "
        "then keeps it from registering), or apply the placement patch the plugin-placement "
        "finding names (a nodeSelector on vgpu.volcano.sh/device-plugin=hami)",
    )

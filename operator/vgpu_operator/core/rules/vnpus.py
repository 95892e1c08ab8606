"""Rules on the Ascend `vnpus:` section the scheduler reads from its device config: that it is the
Ascend plugin's (`hami-scheduler-device`), and that the scheduler's version parses its form
(component_versions.scheduler_vnpus_form; the parsers:
volcano-sh/volcano@v1.15.0:pkg/scheduler/api/devices/config/config.go for the list-only versions,
volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/vnpu.go for those that read both)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from vgpu_operator.core.rules.base import Issue, ObjectRef, cm_ref, error, rule, warning
from vgpu_operator.core.volcano.component_versions import VnpusForm, scheduler_vnpus_form
from vgpu_operator.core.volcano.render import vnpus_section
from vgpu_operator.core.volcano.render.vnpus import (
    scheduler_parses,
    scheduler_reads,
    vnpus_for_scheduler,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, name_of
from vgpu_operator.core.volcano.soft_slicing import (
    SOFT_SLICING_SOURCE,
    arch_blocks,
    ascend_scheduler,
    soft_slicing_on,
    version_blocks,
)

DEVICE_CONFIG_KEY = "device-config.yaml"  # the scheduler's fixed key (`deviceConfigFileName`)
FALLBACK = (
    "it fails to parse the whole device config and runs on built-in defaults for the life of the "
    "process (no knownMigGeometries, only the Ascend310P vNPU), logged at V(3) only"
)


def _form(s: ClusterSnapshot) -> tuple[VnpusForm, str]:
    """The scheduler's `vnpus:` form and how to name its version."""
    c = s.scheduler_container
    version = c.version if c else None
    tag = (c.tag if c and c.version else None) or ""
    return scheduler_vnpus_form(version), f"Volcano {tag}" if tag else "the scheduler"


def _shape(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping (the {hamiVnpuCore, configs} wrapper)"
    return f"a {type(value).__name__}"


@rule("vnpus-mirror", "the scheduler's vnpus: equals the Ascend plugin's")
def check_vnpus(s: ClusterSnapshot) -> Iterator[Issue]:
    if not s.config.ascend_vnpu.enabled:
        return
    ref = s.config.ascend_vnpu.scheduler_device
    source_cm = s.configmap(ref.namespace, ref.name)
    source = vnpus_section(source_cm, ref.key)
    sched = s.scheduler_device_config
    if source is None:
        yield error(
            cm_ref(ref.namespace, ref.name),
            f"{ref.namespace}/{ref.name} (the Ascend plugin's source) "
            + ("does not exist" if source_cm is None else "has no vnpus: section"),
            fix="deploy hami-scheduler-device (ascend-device-configmap.yaml) or turn "
            "ascendVnpu.enabled off",
        )
        return
    mirrored = vnpus_section(sched.cm, DEVICE_CONFIG_KEY)
    form, version = _form(s)
    # compared as the scheduler reads them: a list-only version reads the chips alone, so the
    # list form of the wrapper's configs is the right copy there (its form: vnpus-form)
    wanted = scheduler_reads(vnpus_for_scheduler(source, form), form)
    if mirrored is None or scheduler_reads(mirrored, form) != wanted:
        as_list = f" as the list of its configs ({version} reads no other form)"
        yield error(
            (cm_ref(ref.namespace, ref.name), cm_ref(sched.namespace, sched.name)),
            f"the scheduler reads vnpus: from {sched.namespace}/{sched.name}, and it "
            + ("is missing there" if mirrored is None else "differs from")
            + f" the Ascend plugin's {ref.namespace}/{ref.name}: they disagree on chips, "
            "templates or resource names",
            fix=f"copy the vnpus: section of {ref.name} into {sched.name}"
            + (as_list if form == "list" else ""),
            fixable=True,
        )


@rule("vnpus-form", "the scheduler's version parses the form of its vnpus:")
def check_vnpus_form(s: ClusterSnapshot) -> Iterator[Issue]:
    """A form the scheduler cannot parse makes it drop the whole device config, silently."""
    sched = s.scheduler_device_config
    live = vnpus_section(sched.cm, DEVICE_CONFIG_KEY)
    form, version = _form(s)
    if scheduler_parses(live, form):
        return
    where = f"{sched.namespace}/{sched.name}"
    ours = (sched.namespace, sched.name) == s.config.device_config.ref()
    enforce = " (enforce mode does, with ascendVnpu.enabled)" if ours else ""
    fixable = ours and s.config.ascend_vnpu.enabled
    if form == "unknown":
        c = s.scheduler_container
        image = f"its image {c.image} has no version tag" if c else "its Deployment is not found"
        yield error(
            cm_ref(sched.namespace, sched.name),
            f"the operator cannot know the scheduler's version ({image}), and {where} has "
            f"vnpus: as {_shape(live)}: Volcano v1.14.0 to v1.14.3 and v1.15.0 parse only a "
            f"list; there {FALLBACK}",
            fix="run the scheduler from a version-tagged image (e.g. vc-scheduler:v1.15.1), or "
            f"write vnpus: as the list of its configs{enforce}, then restart the scheduler",
            fixable=fixable and not _core_on(live),
        )
        return
    parses = "a list only" if form == "list" else "a list or the wrapper mapping"
    yield error(
        cm_ref(sched.namespace, sched.name),
        f"{version} parses vnpus: as {parses}, but {where} has it as {_shape(live)}: {FALLBACK}",
        fix=(
            f"write vnpus: as the list of its configs{enforce} and restart the scheduler; "
            "Volcano v1.14.4 and v1.15.1 or later also read the wrapper"
            if form == "list"
            else f"write vnpus: as the list or the wrapper of hami-scheduler-device{enforce}"
        ),
        fixable=fixable,
    )


def _core_on(value: Any) -> bool:
    return bool(scheduler_reads(value, "both")[0])


@rule("ascend-soft-slicing", "hami-vnpu-core soft slicing only where Volcano and the node allow it")
def check_soft_slicing(s: ClusterSnapshot) -> Iterator[Issue]:
    """A node whose Ascend entry turns on `hami-vnpu-core` (its policy's `hamiVnpuCore`, else the
    Ascend plugin's global `vnpus.hamiVnpuCore`) needs Volcano 1.16 or later and an arm64 node
    (`core.volcano.soft_slicing`, whose predicate also refuses the policies that would turn it
    on there); elsewhere soft-slicing pods never get devices. A node released before the
    refusal keeps its entry: this reports it. A scheduler version the operator cannot read
    refuses nothing, so the rule warns of it."""
    scheduler = ascend_scheduler(s)
    old = version_blocks(scheduler)
    for node in s.managed(("ascend-vnpu",)):
        rc = s.released(node)
        if not soft_slicing_on(rc.ascend_vnpu if rc is not None else None, scheduler.default_on):
            continue
        name = name_of(node)
        labels = (node.get("metadata") or {}).get("labels") or {}
        why = [x for x in (old, arch_blocks(labels)) if x is not None]
        if why:
            yield error(
                ObjectRef(kind="Node", name=name),
                f"{name} has hami-vnpu-core soft slicing on, but "
                + " and ".join(why)
                + f" ({SOFT_SLICING_SOURCE}): its soft-slicing pods get no devices",
                fix="set ascendVnpu.hamiVnpuCore: false in the node's policy (template-based "
                "vNPU works everywhere)" + (", or upgrade Volcano to v1.16" if old else ""),
            )
        elif scheduler.version is None:
            yield warning(
                ObjectRef(kind="Node", name=name),
                f"{name} has hami-vnpu-core soft slicing on, and the operator cannot read the "
                "scheduler's version (no version-tagged image): soft slicing needs Volcano 1.16 "
                f"or later ({SOFT_SLICING_SOURCE}); no policy is refused for it",
                fix="run the scheduler from a version-tagged image (e.g. vc-scheduler:v1.16.0), "
                "or set ascendVnpu.hamiVnpuCore: false in the node's policy",
            )

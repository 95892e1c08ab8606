"""Where HAMi's Ascend soft slicing (`hami-vnpu-core`) can run: the one predicate the rule that
reports a node running it where it cannot (`core.rules.vnpus`) and the refusal of a policy that
would turn it on there (`core.refusals`) both decide with. Pure.

HAMi's Ascend plugin: "Volcano: >= 1.14 (>= 1.16 required for `hami-core` soft slicing)" and
"`hami-core` soft slicing currently only supports ARM platforms"
(Project-HAMi/ascend-device-plugin@v1.4.0:docs/volcano.md). Volcano v1.16.0-alpha.0 is the first
release whose scheduler handles `hami-vnpu-core` devices; `Version` drops a pre-release suffix, so
v1.16.0-alpha.0 and later pre-releases count as 1.16.

A scheduler whose version the operator cannot read (no Deployment, an image without a version
tag, no configuration reconciler running) refuses nothing for its version: the rule reports it
instead. A node without a `kubernetes.io/arch` label (the kubelet always sets it) refuses nothing
either.

A scheduler not read *yet* (`NOT_READ_YET`: the controller's configuration reconciler runs, its
first pass has not published) decides nothing: a policy that may turn soft slicing on (its
`hamiVnpuCore` true, or unset: the global switch is not read either) waits
(`WAITING_FOR_SCHEDULER`: held as if suspended, no node is written for it) and is refused or
accepted once the pass has read the version. A policy whose `hamiVnpuCore` is false, or of another
mode, never waits.

A policy is refused (`SOFT_SLICING_REFUSED`: held as if suspended, its nodes keep what they carry,
a node newly selected waits) when it is an `ascend-vnpu` pool whose nodes would get soft slicing:
its `spec.ascendVnpu.hamiVnpuCore` is true, or unset while the Ascend plugin's global
`vnpus.hamiVnpuCore` is true (the node-config entry then carries the global value,
`core.volcano.render.node_config.ascend_entry`), and the scheduler is older than 1.16 or a node the
policy owns is not arm64. A policy being deleted, or invalid, is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.selection import nodes_of, select
from vgpu_operator.core.nodes.validate import ParsedPolicy, Problem
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.policy import VGPUNodePolicy
from vgpu_operator.models.policy_modes import AscendVnpuSpec
from vgpu_operator.models.volcano_views import Version

__all__ = [
    "ARCH_LABEL",
    "NOT_READ_YET",
    "SOFT_SLICING_FROM",
    "SOFT_SLICING_REFUSED",
    "SOFT_SLICING_SOURCE",
    "WAITING_FOR_SCHEDULER",
    "AscendScheduler",
    "arch_blocks",
    "ascend_scheduler",
    "refuse_soft_slicing",
    "soft_slicing_on",
    "soft_slicing_refusals",
    "soft_slicing_waits",
    "version_blocks",
]

SOFT_SLICING_FROM = Version(1, 16, 0)
SOFT_SLICING_SOURCE = "Project-HAMi/ascend-device-plugin@v1.4.0:docs/volcano.md"
SOFT_SLICING_REFUSED = "SoftSlicingUnsupported"  # the refusal's reason (status, Event, plan)
WAITING_FOR_SCHEDULER = "WaitingForScheduler"  # the wait's reason (status, once it lasts)
ARCH_LABEL = "kubernetes.io/arch"
_ARCH = "arm64"
_KEEP = "(no node is taken, its nodes keep their configuration)"


@dataclass(frozen=True)
class AscendScheduler:
    """What decides soft slicing beside the nodes: the scheduler's version (None: unknown) as
    its image tag names it (`tag`), and the Ascend plugin's global `vnpus.hamiVnpuCore`; `read`
    False: neither is read yet, a read is under way (`NOT_READ_YET`)."""

    version: Version | None = None
    tag: str = ""
    default_on: bool = False
    switch: str = "the Ascend plugin's vnpus.hamiVnpuCore"  # where `default_on` is set
    read: bool = True


NOT_READ_YET = AscendScheduler(read=False)  # the configuration pass that reads it is to come


def ascend_scheduler(s: ClusterSnapshot) -> AscendScheduler:
    """The scheduler's version and the global switch, as the snapshot `s` shows them."""
    c = s.scheduler_container
    version = c.version if c is not None else None
    tag = (c.tag or "") if c is not None and version is not None else ""
    ref = s.config.ascend_vnpu.scheduler_device
    return AscendScheduler(
        version=version,
        tag=tag,
        default_on=s.hami_vnpu_core,
        switch=f"vnpus.hamiVnpuCore of {ref.namespace}/{ref.name}",
    )


def soft_slicing_on(spec: AscendVnpuSpec | None, default_on: bool) -> bool:
    """Whether a node with this `ascendVnpu` spec gets `hami-vnpu-core`: its own value, else the
    global switch."""
    own = spec.hami_vnpu_core if spec is not None else None
    return own if own is not None else default_on


def version_blocks(scheduler: AscendScheduler) -> str | None:
    """Why this scheduler cannot serve soft slicing (None: it can, or its version is unknown)."""
    v = scheduler.version
    if v is None or v >= SOFT_SLICING_FROM:
        return None
    return f"the scheduler runs Volcano {scheduler.tag or v} (soft slicing needs 1.16 or later)"


def arch_blocks(labels: Mapping[str, str]) -> str | None:
    """Why a node with these labels cannot run soft slicing (None: it can, or its architecture
    is not labelled)."""
    arch = labels.get(ARCH_LABEL)
    if arch is None or arch == _ARCH:
        return None
    return f"the node's {ARCH_LABEL} is {arch} (soft slicing runs on {_ARCH} only)"


def soft_slicing_refusals(
    policy: VGPUNodePolicy,
    scheduler: AscendScheduler | None,
    owned: Iterable[NodeFacts],
) -> list[Problem]:
    """Why `policy` may not turn soft slicing on (empty: it may, or does not): `scheduler`
    (None: nothing known of it), `owned`: the nodes the policy owns."""
    spec = policy.spec
    if spec.mode != "ascend-vnpu" or (scheduler is not None and not scheduler.read):
        return []  # (not read yet: `soft_slicing_waits`)
    known = scheduler if scheduler is not None else AscendScheduler()
    if not soft_slicing_on(spec.ascend_vnpu, known.default_on):
        return []
    set_here = spec.ascend_vnpu is not None and spec.ascend_vnpu.hami_vnpu_core is not None
    turned_on = (
        "spec.ascendVnpu.hamiVnpuCore is true"
        if set_here
        else f"spec.ascendVnpu.hamiVnpuCore is unset and {known.switch} is true"
    )
    why: list[str] = []
    if (old := version_blocks(known)) is not None:
        why.append(old)
    by_arch: dict[str, list[str]] = {}
    for node in owned:
        if arch_blocks(node.labels) is not None:
            by_arch.setdefault(node.labels[ARCH_LABEL], []).append(node.name)
    for arch, names in sorted(by_arch.items()):
        why.append(f"its node(s) {', '.join(sorted(names))} have {ARCH_LABEL} {arch}")
    if not why:
        return []
    fixes = ["set spec.ascendVnpu.hamiVnpuCore: false (template-based vNPU works everywhere)"]
    if old is not None:
        fixes.append("upgrade Volcano to v1.16.0 or later")
    if by_arch:
        fixes.append(f"narrow spec.nodeSelector to {_ARCH} nodes ({ARCH_LABEL}: {_ARCH})")
    return [
        Problem(
            field="spec.ascendVnpu.hamiVnpuCore",
            reason=SOFT_SLICING_REFUSED,
            message=f"{turned_on}, so its nodes would get hami-vnpu-core soft slicing, but "
            + " and ".join(why)
            + f": soft slicing needs Volcano 1.16 or later on {_ARCH} nodes "
            f"({SOFT_SLICING_SOURCE}), elsewhere its pods get no devices; the policy is refused "
            f"{_KEEP}",
            fix="; or ".join(fixes),
        )
    ]


def soft_slicing_waits(policy: VGPUNodePolicy, scheduler: AscendScheduler | None) -> list[Problem]:
    """What `policy` waits for before soft slicing can be refused or accepted (empty: nothing):
    an `ascend-vnpu` pool that may turn it on while `scheduler` is not read yet."""
    spec = policy.spec
    if spec.mode != "ascend-vnpu" or scheduler is None or scheduler.read:
        return []
    own = spec.ascend_vnpu.hami_vnpu_core if spec.ascend_vnpu is not None else None
    if own is False:
        return []  # template-based vNPU: nothing depends on the version
    turned_on = (
        "spec.ascendVnpu.hamiVnpuCore is true"
        if own
        else f"spec.ascendVnpu.hamiVnpuCore is unset ({scheduler.switch} decides)"
    )
    return [
        Problem(
            field="spec.ascendVnpu.hamiVnpuCore",
            reason=WAITING_FOR_SCHEDULER,
            message=f"{turned_on}: whether its nodes may get hami-vnpu-core soft slicing depends "
            f"on the scheduler's Volcano version (1.16 or later, {SOFT_SLICING_SOURCE}), not "
            f"read yet; the policy waits for the operator's configuration pass to read it "
            f"{_KEEP}",
            fix="none while the operator starts; if it lasts, the operator's log says why its "
            "configuration pass has not completed",
        )
    ]


def refuse_soft_slicing(
    policies: Iterable[ParsedPolicy],
    scheduler: AscendScheduler | None,
    nodes: Iterable[NodeFacts],
) -> list[ParsedPolicy]:
    """The policies, each `ascend-vnpu` pool that would turn soft slicing on where it cannot run
    marked refused (its problems added to any it has); while `scheduler` is not read yet
    (`NOT_READ_YET`), each that may turn it on marked waiting instead. Which nodes a policy owns
    is selection's answer over every usable policy (`core.nodes.selection.select`), as the
    planner's."""
    parsed = list(policies)
    if scheduler is not None and not scheduler.read:
        return [p.wait_for(lambda policy: soft_slicing_waits(policy, scheduler)) for p in parsed]
    if not any(
        p.policy is not None and p.policy.spec.mode == "ascend-vnpu" and not p.deleting
        for p in parsed
    ):
        return parsed
    facts = {n.name: n for n in nodes}
    selectable = [p.policy for p in parsed if p.usable and p.policy is not None]
    assignments = select(facts.values(), selectable)
    return [
        p.refuse_for(
            lambda policy: soft_slicing_refusals(
                policy, scheduler, (facts[n] for n in nodes_of(policy.name, assignments))
            )
        )
        for p in parsed
    ]

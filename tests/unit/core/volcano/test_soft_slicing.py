"""Where hami-vnpu-core soft slicing may be turned on (`core.volcano.soft_slicing`): an ascend-vnpu
policy that would turn it on under a Volcano older than 1.16 or on a node that is not arm64 is
refused (Project-HAMi/ascend-device-plugin@v1.4.0:docs/volcano.md: ">= 1.16 required for
`hami-core` soft slicing", "currently only supports ARM platforms")."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kit.nodekit import policy
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.validate import ParsedPolicy, parse_policy
from vgpu_operator.core.volcano.soft_slicing import (
    NOT_READ_YET,
    SOFT_SLICING_REFUSED,
    SOFT_SLICING_SOURCE,
    WAITING_FOR_SCHEDULER,
    AscendScheduler,
    refuse_soft_slicing,
)
from vgpu_operator.models.volcano_views import Version

NPU = {"matchLabels": {"pool": "npu"}}


def scheduler(tag: str | None, *, default_on: bool = False) -> AscendScheduler:
    return AscendScheduler(Version.parse(tag), tag or "", default_on, "vnpus.hamiVnpuCore of x/y")


def npu(name: str, arch: str | None = "arm64", pool: str = "npu") -> NodeFacts:
    labels = {"pool": pool}
    if arch is not None:
        labels["kubernetes.io/arch"] = arch
    return NodeFacts(name=name, labels=labels)


def ascend(name: str = "npu", core: bool | None = True, **spec: Any) -> dict[str, Any]:
    vnpu: dict[str, Any] = {"vDeviceCount": 4}
    if core is not None:
        vnpu["hamiVnpuCore"] = core
    return policy(name, {"nodeSelector": NPU, "mode": "ascend-vnpu", "ascendVnpu": vnpu, **spec})


def refused(
    raws: list[dict[str, Any]], sched: AscendScheduler | None, nodes: list[NodeFacts]
) -> dict[str, ParsedPolicy]:
    out = refuse_soft_slicing([parse_policy(r) for r in raws], sched, nodes)
    return {p.name: p for p in out}


@pytest.mark.parametrize(
    ("tag", "arch", "why"),
    [
        ("v1.15.1", "arm64", ["Volcano v1.15.1 (soft slicing needs 1.16 or later)"]),
        ("v1.14.4", "amd64", ["Volcano v1.14.4", "npu-0 have kubernetes.io/arch amd64"]),
        ("v1.16.0-alpha.1", "amd64", ["npu-0 have kubernetes.io/arch amd64"]),
        ("v1.16.0-alpha.0", "arm64", []),  # a 1.16 pre-release counts as 1.16
        ("v1.16.0", "arm64", []),
    ],
)
def test_refused_below_volcano_1_16_and_off_arm64(tag: str, arch: str, why: list[str]) -> None:
    [p] = refused([ascend()], scheduler(tag), [npu("npu-0", arch)]).values()
    if not why:
        assert p.refused == ()
        return
    [problem] = p.refused
    assert problem.field == "spec.ascendVnpu.hamiVnpuCore"
    assert problem.reason == SOFT_SLICING_REFUSED
    assert SOFT_SLICING_SOURCE in problem.message and "the policy is refused" in problem.message
    assert all(w in problem.message for w in why), problem.message
    assert "set spec.ascendVnpu.hamiVnpuCore: false" in problem.fix
    assert ("upgrade Volcano" in problem.fix) == ("Volcano" in why[0])
    assert ("narrow spec.nodeSelector to arm64" in problem.fix) == (arch != "arm64")
    assert p.suspended  # held as a suspended policy is


def test_the_global_switch_counts_where_the_policy_leaves_it_unset() -> None:
    """An unset `hamiVnpuCore` takes the Ascend plugin's global `vnpus.hamiVnpuCore` on the node
    (core.volcano.render.node_config.ascend_entry): refused when that is on."""
    old = scheduler("v1.15.1", default_on=True)
    got = refused([ascend("unset", core=None), ascend("off", core=False)], old, [npu("npu-0")])
    [problem] = got["unset"].refused
    assert "hamiVnpuCore is unset and vnpus.hamiVnpuCore of x/y is true" in problem.message
    assert got["off"].refused == ()  # template-based vNPU: nothing to refuse
    assert refused([ascend(core=None)], scheduler("v1.15.1"), [npu("npu-0")])["npu"].refused == ()


def test_an_unknown_scheduler_refuses_nothing_for_its_version() -> None:
    nodes = [npu("npu-0"), npu("npu-1", arch=None)]  # no label: the architecture is not known
    for sched in (None, scheduler(None), scheduler("latest")):
        assert refused([ascend()], sched, nodes)["npu"].refused == ()
    [problem] = refused([ascend()], None, [npu("npu-0", "amd64")])["npu"].refused
    assert "the scheduler runs" not in problem.message and "amd64" in problem.message


def test_only_the_nodes_the_policy_owns_count() -> None:
    """An amd64 node a higher-priority policy takes is not the ascend pool's."""
    x86 = NodeFacts(
        name="x86-0", labels={"pool": "npu", "kind": "x86", "kubernetes.io/arch": "amd64"}
    )
    nodes = [npu("npu-0"), x86]
    alone = refused([ascend()], scheduler("v1.16.0"), nodes)["npu"].refused
    assert len(alone) == 1 and "x86-0" in alone[0].message and "npu-0" not in alone[0].message
    other = policy(
        "x86",
        {"nodeSelector": {"matchLabels": {"kind": "x86"}}, "mode": "hami-core", "priority": 10},
    )
    assert refused([ascend(), other], scheduler("v1.16.0"), nodes)["npu"].refused == ()


def test_a_deleting_or_other_mode_policy_is_not_refused() -> None:
    old, amd = scheduler("v1.15.1"), [npu("npu-0", "amd64")]
    deleting = ascend()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    hami = policy("hami", {"nodeSelector": NPU, "mode": "hami-core"})
    got = refused([deleting, hami], old, amd)
    assert got["npu"].refused == () and got["hami"].refused == ()


def test_a_scheduler_not_read_yet_holds_the_pools_that_may_turn_soft_slicing_on() -> None:
    """Before the controller's first configuration pass has read the scheduler (`NOT_READ_YET`)
    neither its version nor the global switch is known: a pool whose `hamiVnpuCore` is true or
    unset waits (held, no refusal yet, even on an amd64 node: it is decided once, with the
    version); one with `hamiVnpuCore: false` or of another mode needs no version and is planned
    at once; a policy being deleted leaves as any deletion does."""
    deleting = ascend("deleting", nodeSelector={"matchLabels": {"pool": "gone"}})
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    raws = [
        ascend("on"),
        ascend("unset", core=None, nodeSelector={"matchLabels": {"pool": "unset"}}),
        ascend("off", core=False, nodeSelector={"matchLabels": {"pool": "off"}}),
        policy("hami", {"nodeSelector": {"matchLabels": {"pool": "gpu"}}, "mode": "hami-core"}),
        deleting,
    ]
    pools = ("unset", "off", "gpu")
    nodes = [npu("npu-0", "amd64"), *(npu(f"{pool}-0", pool=pool) for pool in pools)]
    got = refused(raws, NOT_READ_YET, nodes)
    assert {n for n, p in got.items() if p.waiting} == {"on", "unset"}
    assert all(p.refused == () for p in got.values())  # nothing refused before the read
    assert {n for n, p in got.items() if p.suspended} == {"on", "unset"}  # held until then
    [on], [unset] = got["on"].waiting, got["unset"].waiting
    assert on.reason == unset.reason == WAITING_FOR_SCHEDULER
    assert on.field == "spec.ascendVnpu.hamiVnpuCore" and SOFT_SLICING_SOURCE in on.message
    assert "hamiVnpuCore is true" in on.message and "not read yet" in on.message
    assert "unset (the Ascend plugin's vnpus.hamiVnpuCore decides)" in unset.message
    # once read, the same policies are refused or accepted, and none waits
    read = refused(raws, scheduler("v1.16.0-alpha.1"), nodes)
    assert all(p.waiting == () for p in read.values())
    assert {n for n, p in read.items() if p.refused} == {"on"}  # npu-0 is amd64

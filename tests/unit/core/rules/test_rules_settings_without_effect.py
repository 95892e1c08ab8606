"""`settings-without-effect`: settings no component acts on (the operator config's device
scaling defaults, a policy's hamiCore scaling, a schedule policy without a weight) are notes."""

from __future__ import annotations

import pytest

from tests.kit.volcano_fixtures import edit, findings, healthy, text
from vgpu_operator import contract
from vgpu_operator.models.config import load_config
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import HamiCoreSpec

HAMI = NodeConfig(mode="hami-core", policy="rtx4090-hami-core", generation=1)


def test_settings_no_component_acts_on_are_notes() -> None:
    cfg = load_config("deviceDefaults: {deviceMemoryScaling: 2, deviceCoreScaling: 2}")
    snap = healthy(cfg)
    got = findings(snap, "settings-without-effect")
    assert [(f.severity, f.message.split(":")[0]) for f in got] == [
        ("info", "deviceMemoryScaling is 2"),
        ("info", "deviceCoreScaling is 2"),
    ]
    rc = HAMI.model_copy(
        update={"hami_core": HamiCoreSpec(deviceMemoryScaling=1.8, deviceCoreScaling=1.5)}
    )
    snap = edit(
        healthy(),
        "nodes",
        "gpu-a",
        lambda n: n["metadata"]["annotations"].update({contract.ANN_CONFIG: rc.to_annotation()}),
    )
    [by_policy] = findings(snap, "settings-without-effect")
    assert by_policy.objects[0].kind == "VGPUNodePolicy"
    assert "hamiCore.deviceCoreScaling 1.5 (the scheduler caps a GPU at 100 cores)" in (
        by_policy.message
    )
    assert "hamiCore.deviceMemoryScaling 1.8 (no plugin version applies it)" in by_policy.message
    assert findings(healthy(), "settings-without-effect") == []


@pytest.mark.parametrize(
    ("weight", "noted"), [(None, True), ("0", True), ('"10"', True), ("10", False)]
)
def test_a_schedule_policy_without_a_weight_is_a_note(weight: str | None, noted: bool) -> None:
    extra = "\n      deviceshare.SchedulePolicy: binpack"
    if weight is not None:
        extra += f"\n      deviceshare.ScheduleWeight: {weight}"
    conf = text("seed000_scheduler.conf").replace(
        "deviceshare.VGPUEnable: true", "deviceshare.VGPUEnable: true" + extra
    )
    snap = edit(
        healthy(),
        "configmaps",
        "volcano-scheduler-configmap",
        lambda c: c["data"].update({"volcano-scheduler.conf": conf}),
    )
    got = findings(snap, "settings-without-effect")
    assert bool(got) is noted
    if noted:
        assert got[0].message.startswith("deviceshare.SchedulePolicy is 'binpack' but")

"""A DaemonSet configured as `devicePlugin` that is not HAMi's plugin (volcano-sh/devices' legacy
plugin under the same name, NVIDIA's) is left alone: no args, no placement, no restart; the rule
`plugin-not-hami` names the operator config's field and the fix."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from tests.kit.volcano_fixtures import edit, findings, healthy
from vgpu_operator.core.volcano.restarts import RestartSettings, restart_inputs
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.writes import workload_patches

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)

LEGACY = "volcanosh/volcano-device-plugin:v1.10.0"


def unplaced(image: str | None = None) -> ClusterSnapshot:
    """`healthy` with a CPU node, its plugin DaemonSet without the nodeSelector the operator
    sets (so it would run on the CPU node too, and the operator would place it), and running
    `image` when given."""

    def change(ds: dict[str, Any]) -> None:
        spec = ds["spec"]["template"]["spec"]
        spec.pop("nodeSelector", None)
        if image is not None:
            for c in spec["containers"]:
                c["image"] = image

    s = healthy()
    cpu = {"metadata": {"name": "cpu-0", "labels": {"kubernetes.io/hostname": "cpu-0"}}}
    s = dataclasses.replace(s, nodes=[*s.nodes, cpu])
    return edit(s, "daemonsets", "volcano-device-plugin", change)


def test_hamis_plugin_is_placed_and_not_reported() -> None:
    s = unplaced()
    assert not findings(s, "plugin-not-hami")
    _, patches = workload_patches(s, [], {}, RestartSettings(), T0)
    assert [(w.kind, w.name) for w in patches] == [("DaemonSet", "volcano-device-plugin")]
    assert restart_inputs(s).plugin is not None


def test_another_plugin_is_left_alone_and_reported() -> None:
    s = unplaced(LEGACY)
    [f] = findings(s, "plugin-not-hami")
    assert f.severity == "error"
    assert LEGACY in f.message and "devicePlugin" in f.message
    assert "devicePlugin.namespace/devicePlugin.name" in f.fix
    assert "projecthami/volcano-vgpu-device-plugin" in f.fix
    _, patches = workload_patches(s, [], {}, RestartSettings(), T0)
    assert patches == []  # neither args nor placement
    assert restart_inputs(s).plugin is None  # nor restarted for HAMi's ConfigMaps
    # the placement rule does not ask for a nodeSelector on it either
    placement = [f.message for f in findings(s, "plugin-placement")]
    assert not [m for m in placement if "volcano-device-plugin" in m], placement

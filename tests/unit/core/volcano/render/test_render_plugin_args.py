"""The plugin flags the operator owns (`core.volcano.render.plugin_args`): --gpu-memory-factor
exists from plugin v1.9.4, and a plugin of such a version run without it is reported."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kit.volcano_fixtures import edit, findings, healthy
from vgpu_operator.core.volcano.render.plugin_args import desired_flags
from vgpu_operator.models.config import load_config
from vgpu_operator.models.volcano_views import Version


@pytest.mark.parametrize(
    ("version", "has_flag"),
    [("v1.9.0", False), ("v1.9.4", True), ("v1.10.0", True), ("v1.11.0", True)],
)
def test_the_memory_factor_flag_is_owned_from_v1_9_4(version: str, has_flag: bool) -> None:
    # v1.9.4 to v1.10.x have the flag too: left out, they keep its default 1
    cfg = load_config("gpuMemoryFactor: 11")
    flags = desired_flags(Version.parse(version) or Version(0, 0), cfg)
    assert ("gpu-memory-factor" in flags) is has_flag
    if has_flag:
        assert flags["gpu-memory-factor"] == "11"


def test_a_v1_10_plugin_without_the_factor_flag_is_reported() -> None:
    cfg = load_config("gpuMemoryFactor: 11")
    snap = healthy(cfg)

    def v1_10(ds: dict[str, Any]) -> None:
        c = ds["spec"]["template"]["spec"]["containers"][0]
        c["image"] = "docker.io/projecthami/volcano-vgpu-device-plugin:v1.10.0"
        c["args"] = [
            "--device-split-count=10",
            "--resource-name=volcano.sh/vgpu-number",
            "--resource-memory-name=volcano.sh/vgpu-memory",
            "--resource-core-name=volcano.sh/vgpu-cores",
        ]

    snap = edit(snap, "daemonsets", "volcano-device-plugin", v1_10)
    got = [f.message for f in findings(snap, "plugin-config-flags-override")]
    assert any(m.startswith("--gpu-memory-factor is not given") for m in got), got

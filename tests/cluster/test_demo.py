"""`vgpu-operator demo --once`: the README's main command, run as a person would."""

from __future__ import annotations

import subprocess
import sys

from vgpu_operator.devcluster.demo import DEMO_NODES


def test_demo_configures_every_gpu_node_and_cleans_up() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vgpu_operator.cli", "demo", "--once"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line}
    for spec in DEMO_NODES:
        assert spec.name in rows
    assert rows["rtx4090-0"][2:4] == ["rtx4090-hami-core", "hami-core"]
    assert rows["a100-1"][2:4] == ["a100-dynamic-mig", "mig"]
    assert rows["h100-0"][-1] == "mig/static"
    assert rows["cpu-0"][2] == "-"
    left = subprocess.run(["pgrep", "-f", "vgpu-demo-"], capture_output=True, check=False)
    assert left.stdout == b"", left.stdout

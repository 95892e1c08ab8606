"""`vgpu-operator run --config`: an operator config that does not load stops the controller at
start, exit code 2, the field named on stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BAD_GROUP = """\
migGeometries:
  catalog:
  - models: ["A100-SXM4-80GB"]
    allowedGeometries:
    - group: all-1g
      geometries: [{name: 1g.10gb, memory: 9728, count: 7}]
"""


def test_a_bad_catalog_stops_the_controller_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text(BAD_GROUP)  # a group name the scheduler cannot encode
    proc = subprocess.run(
        [sys.executable, "-m", "vgpu_operator.commands.cli", "run", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "migGeometries.catalog[0].allowedGeometries[0].group" in proc.stderr

"""A benchmark of bench/ run as its command line runs it (its own interpreter, its own
`sys.path[0]`), for the smoke tests that need no cluster: its stdout, once it exited 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_stdout(script: str, *args: str, timeout: float = 120) -> str:
    out = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout

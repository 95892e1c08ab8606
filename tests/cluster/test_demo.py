"""`vgpu-operator demo --once`: the README's main command, run as a person would."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from vgpu_devcluster.demo import DEMO_NODES


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
    assert rows["NODE"][-2:] == ["CONFIG", "STATE"]
    assert rows["rtx4090-0"][2:4] == ["rtx4090-hami-core", "hami-core"]
    assert rows["a100-1"][2:4] == ["a100-dynamic-mig", "mig"]
    assert rows["h100-0"][-2:] == ["mig/static", "success"]  # the agent applied the layout
    assert rows["a100-1"][-2:] == ["mig/dynamic", "success"]
    assert rows["rtx4090-0"][-1] == "success"
    assert rows["cpu-0"][2] == "-"
    assert rows["cpu-0"][-1] == "-"  # no GPU, no agent
    # nothing left: neither the control plane nor an agent (their command lines name the
    # demo's directory, vgpu-demo-*)
    left = subprocess.run(["pgrep", "-f", "vgpu-demo-"], capture_output=True, check=False)
    assert left.stdout == b"", left.stdout


def test_demo_ctrl_c_stops_agents_operator_and_control_plane() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "vgpu_operator.cli", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[str] = []
    deadline = time.monotonic() + 240
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if "Ctrl-C stops it" in line:
                break
            assert time.monotonic() < deadline, "".join(seen)
        agents = subprocess.run(
            ["pgrep", "-f", "vgpu_operator.cli agent --node .*vgpu-demo-"],
            capture_output=True,
            check=False,
        )
        assert len(agents.stdout.splitlines()) == len([s for s in DEMO_NODES if s.model]), seen
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 130, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = subprocess.run(["pgrep", "-f", "vgpu-demo-"], capture_output=True, check=False)
    assert left.stdout == b"", left.stdout

"""Smoke test of bench/mig_disruption.py at a tiny size: a node of 2 GPUs (`--gpus 2`; the
benchmark's default is 8), no cluster. It checks the table's shape and what holds at any size:
GPU 1 changes its layout in A and turns MIG on in B (the last GPU of 2); the agent destroys only
the changed GPU's instances (one of its four) and none when a GPU turns MIG on, resets only for
the mode change, where the modelled mig-parted clears every instance of the GPUs it touches
(four on the changed GPU in A, the other GPU's four in B)."""

from __future__ import annotations

from tests.kit.benchrun import bench_stdout


def test_mig_disruption_runs_at_a_tiny_size() -> None:
    stdout = bench_stdout("mig_disruption.py", "--gpus=2")
    lines = stdout.splitlines()
    assert lines[0].startswith("MIG disruption, 2 x A100-SXM4-80GB"), stdout
    assert lines[-1].startswith("* mig-parted is MODELLED"), stdout
    cells: dict[tuple[str, str], tuple[int, int, str]] = {}
    scenario = ""
    for line in lines[2:-1]:
        scenario = line[:30].strip() or scenario
        agent, mig_parted, *ratio = line[59:].split()
        cells[scenario, line[30:59].strip()] = (int(agent), int(mig_parted), " ".join(ratio))
    a, b = "A: GPU 1 changes its layout", "B: GPU 1 turns MIG on"
    assert cells[a, "GPU resets"] == (0, 0, "none needed"), cells
    assert cells[a, "GPU instances destroyed"] == (1, 4, "4.0x"), cells
    assert cells[a, "compute instances destroyed"] == (1, 4, "4.0x"), cells
    assert cells[b, "GPU resets"] == (1, 1, "1.0x"), cells
    assert cells[b, "GPU instances destroyed"] == (0, 4, "4 vs none"), cells
    assert cells[b, "compute instances destroyed"] == (0, 4, "4 vs none"), cells
    assert len(cells) == 6, cells

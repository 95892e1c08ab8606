"""Smoke test of bench/pass_cost.py at a tiny size (20 nodes; the benchmark is run at 1,000), no
cluster: its header names the size and the first wave (a tenth of the pool under
`maxUnavailable: 10%`), and its table has each part of the core's pass with a CPU time; the
times themselves are not checked."""

from __future__ import annotations

from tests.kit.benchrun import bench_stdout


def test_pass_cost_runs_at_a_tiny_size() -> None:
    stdout = bench_stdout("pass_cost.py", "--repeat=3", "20")
    lines = stdout.splitlines()
    assert "The core's pass at 20 nodes, 2 in transition; median of 3" in lines, stdout
    rows = {}
    for line in lines[lines.index("|---|---:|---:|") + 1 :]:
        part, per_pass, per_node = (cell.strip() for cell in line.strip("|").split("|"))
        rows[part] = (float(per_pass), float(per_node))
    assert list(rows) == [
        "node_facts (per Node event, not per pass)",
        "decide_cluster",
        "plan_with_leaves",
        "plan_cluster (status, Events, gauges)",
        "the core's whole pass",
    ], stdout
    assert all(per_pass > 0 for per_pass, _ in rows.values()), stdout

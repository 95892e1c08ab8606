"""Smoke test of bench/process_floor.py at a tiny size: one interpreter per import row, two rows at
once and the held table (20 nodes) beside them (`--jobs 2`), no cluster. It checks that the run
completes and prints both tables, not what it measures, except what must hold on any machine:
every import row and every process holds memory, the rules worker's import set holds none of the
controller's shell (Kopf, aiohttp, kubernetes-asyncio, prometheus_client), and the controller's
holds Kopf."""

from __future__ import annotations

from tests.kit.benchrun import bench_stdout


def cells(table: str) -> dict[str, list[str]]:
    return {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in table.splitlines()
        if line.startswith("| ") and not line.startswith(("| imported", "| what"))
    }


def test_process_floor_runs_at_a_tiny_size() -> None:
    table = bench_stdout("process_floor.py", "--repeat=1", "--nodes=20", "--jobs=2", timeout=150)
    assert "Machine:" in table and "Versions: Python" in table and "commit" in table
    rows = cells(table)
    bare = float(rows["nothing (the bare interpreter)"][0])
    assert bare > 5
    for label, row in rows.items():
        if label.startswith("the ") and "set" in label:
            assert float(row[0]) > bare, (label, row)  # an import set holds more than nothing
    for dependency in (
        "kopf as the controller loads it (`vgpu_operator` first: lazy client)",
        "kubernetes_asyncio as loaded lazily (`vgpu_operator` first; the client's REST layer)",
        "aiohttp",
        "prometheus_client",
    ):
        assert rows[dependency][-1] == "none", (dependency, rows[dependency])  # the worker
    kopf = rows["kopf as the controller loads it (`vgpu_operator` first: lazy client)"]
    assert kopf[-2].startswith("all"), kopf  # the controller
    assert "At 20 nodes and 200 pods (20 holding GPUs)" in table
    worker = rows["the rules worker as started, after a pass over an empty snapshot"]
    assert float(worker[0]) > bare

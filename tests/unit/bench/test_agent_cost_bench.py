"""Smoke test of bench/agent_cost.py at a tiny size: one GPU, a one-second idle window, one
interpreter per import row and two rows at once (`--jobs 2`), against the benchmark's own local
stand-in for the apiserver (no cluster). It checks that the run completes and prints its table,
not what it measures, except what must hold on any machine: every process holds memory, and
neither grpc, Kopf, aiohttp, kubernetes-asyncio, prometheus_client nor PyYAML is in the agent's
import set (its own client, server and metrics are the standard library's, kubeapi.lite)."""

from __future__ import annotations

from tests.kit.benchrun import bench_stdout


def test_agent_cost_runs_at_a_tiny_size() -> None:
    table = bench_stdout(
        "agent_cost.py",
        "--idle=1",
        "--settle=0.5",
        "--repeat=1",
        "--gpus=1",
        "--jobs=2",
        timeout=90,
    )
    assert "Machine:" in table and "Versions: Python" in table and "commit" in table
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in table.splitlines()
        if line.startswith("| ") and not line.startswith("| process")
    }
    for label in (
        "floor: standard library only (http.client, ssl), one Node watch",
        "floor: aiohttp, one Node watch",
        "agent (this checkout)",
    ):
        assert float(rows[label][0]) > 5, (label, rows[label])  # RSS MiB
    assert rows["grpc (grpcio)"][-1] == "grpc: no"
    assert rows["kopf"][-1] == "kopf: no"
    assert rows["aiohttp"][-1] == "aiohttp: no"
    assert rows["prometheus_client"][-1] == "prometheus_client: no"
    assert rows["yaml (PyYAML)"][-1] == "yaml: no"
    assert (
        "kubernetes_asyncio: no"
        in rows["kubernetes_asyncio (its own `__init__`: every API class and model)"][-1]
    )
    assert float(rows["the agent's import set (this checkout)"][1]) > 0
    assert "grpc's extension (cygrpc) mapped in: none" in table

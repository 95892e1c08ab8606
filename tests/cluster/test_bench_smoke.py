"""Smoke test of the benchmarks in bench/ that need a control plane, at a tiny size, all on ONE
control plane of their own (bench/benchkit.py `bench_cluster`: long node leases, as the
benchmarks run), started for this module and not the session's: the benchmarks create and
delete pools and run operators of their own, which the other tests' operator would see.

Each test runs a benchmark's own entry (the function its `main` calls with the control plane it
built) at 3 nodes (the rollout at 1) and checks the table it prints and that what it measured is
plausible, not its timings: one PATCH per node on both sides of the convergence, no write but
the Lease's in the idle window, doctor and its floor sending the same requests, every node
through the rollout on both sides. What a smoke leaves out of its benchmark's run: the wait for
a quiet machine (this one never is), the idle window's settling time (a 4 s window), doctor's
second order (doctor first only) and two of kopf_or_informer's four kinds. The benchmarks that
need no control plane (bench/agent_cost.py, bench/process_floor.py, bench/mig_disruption.py)
are smoked by tests/unit/bench/.

The module's fixtures set up what the benchmarks share, in order: the control plane, the
chart's ServiceAccounts, and one population of nodes and pods (bench/population.py `populate`)
that the two memory tests (scale, operator_memory), kopf_or_informer and doctor_scale grow from
(as bench/scale.py grows one pool from size to size).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.cluster.conftest import TEST_CLUSTER_PREFIX
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import install_agent_access, install_operator_access
from vgpu_operator.kubeapi.credentials import Credentials

BENCH = Path(__file__).resolve().parents[2] / "bench"
N = 3  # nodes; bench/scale.py puts 10 pods on each, a tenth of them holding GPUs
PODS = 10 * N
QUIET = 0.0  # the longest wait for a quiet machine before a convergence run (none is, here)
WINDOW = 4.0  # seconds of the idle window: a Lease renewal at least (one every 2 s)
SETTLE = 0.5  # seconds between a process holding its listing and its memory being read


def bench(name: str) -> ModuleType:
    """A benchmark module, imported as the benchmarks import each other (from bench/)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)


def rows(table: str) -> list[list[str]]:
    """The cells of a Markdown table's body rows (header and rule left out)."""
    lines = [line for line in table.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


@pytest.fixture(scope="module")
def control_plane() -> Iterator[LocalCluster]:
    # The test clusters' prefix: `make test` checks no process of it outlives the session.
    with bench("benchkit").bench_cluster(prefix=f"{TEST_CLUSTER_PREFIX}bench-") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def admin(control_plane: LocalCluster) -> AsyncIterator[Any]:
    api = await Credentials(kubeconfig=str(control_plane.kubeconfig)).client(pool_size=40)
    async with api:
        yield api


@pytest.fixture(scope="module")
async def operator_kubeconfig(admin: Any, control_plane: LocalCluster) -> Path:
    credentials = await install_operator_access(admin, control_plane.workdir)
    assert credentials.kubeconfig is not None
    return Path(credentials.kubeconfig)


@pytest.fixture(scope="module")
async def agent_kubeconfig(admin: Any, control_plane: LocalCluster) -> Path:
    credentials = await install_agent_access(admin, control_plane.workdir)
    assert credentials.kubeconfig is not None
    return Path(credentials.kubeconfig)


@pytest.fixture(scope="module")
async def population(admin: Any) -> int:
    """bench/scale.py's pool of N nodes with its 10 x N pods, Running; the node count."""
    await bench("scale").populate(admin, N, 0, 0)
    return N


async def test_convergence(
    admin: Any, control_plane: LocalCluster, operator_kubeconfig: Path
) -> None:
    convergence = bench("convergence")
    c = await convergence.convergence(
        admin, control_plane, operator_kubeconfig, N, quiet_limit=QUIET
    )
    header, line = convergence.HEADER, convergence.row(c)
    print(header, line, sep="\n")  # each table is in the test's output (`pytest -rA`)
    assert header.split()[:3] == ["N", "first", "floor"]
    assert line.split()[:2] == [str(N), "floor"]
    # exactly one PATCH per node, the floor's and the operator's (the audit log's count)
    assert (c.floor_writes, c.operator_writes) == (1.0, 1.0), line
    assert c.floor_s > 0 and c.operator_s > 0 and c.operator_cpu > 0
    assert "-" not in c.spans, c.spans  # the apiserver received PATCHes in both runs


async def test_idle(
    admin: Any, control_plane: LocalCluster, operator_kubeconfig: Path, agent_kubeconfig: Path
) -> None:
    idle = bench("idle")
    window = await idle.idle_run(
        admin,
        control_plane,
        operator_kubeconfig,
        agent_kubeconfig,
        N,
        WINDOW,
        settle=0.0,
        clean=True,
    )
    table = idle.table(window)
    print(table)
    summary = {r[0].split()[0]: r for r in rows(table.split("\n\n")[1])}
    assert set(summary) == {"operator", "agents"}, table
    # writes other than Lease renewals, per identity: none while nothing changes
    assert summary["operator"][1] == summary["agents"][1] == "0", table
    # the operator renews its Lease every 2 s; the agents hold none
    assert int(summary["operator"][2]) >= 1, table
    assert summary["agents"][2] == "0", table
    assert window.seconds >= WINDOW
    assert window.cpu["apiserver"] > 0 and window.cpu["machine"] > 0
    kinds = rows(table.split("\n\n")[-1])
    assert ["operator", "update", "leases", "200"] in [k[:4] for k in kinds], table


async def test_scale_memory(
    admin: Any, control_plane: LocalCluster, operator_kubeconfig: Path, population: int
) -> None:
    scale = bench("scale")
    m = await scale.memory_run(
        admin, control_plane, operator_kubeconfig, N, population, PODS, settle=SETTLE
    )
    print(scale.table({}, {N: m}))
    [row] = rows(scale.table({}, {N: m}))
    assert row[0] == str(N) and row[6] == f"{PODS} ({PODS // 10})", row
    assert (m.pods, m.gpu_pods) == (PODS, PODS // 10)
    # resident memory: more than a bare interpreter (about 10 MiB), the peak at least the
    # resident, the operator's tree at least the operator (its rules worker starts with the
    # first configuration pass's rules: SETTLE s after the first pass it may not run yet)
    for rss, peak in (m.operator, m.operator_tree, m.kopf):
        assert 15 < rss <= peak, m
    assert m.operator_tree[0] >= m.operator[0], m


async def test_kopf_or_informer(admin: Any, control_plane: LocalCluster, population: int) -> None:
    kopf_or_informer = bench("kopf_or_informer")
    # two of its four kinds: the pods (the GPU pods of all, kept by a predicate) and the
    # ConfigMap watched by name
    kinds = ("pods", "configmaps")
    watchers = await kopf_or_informer.watchers(
        admin, control_plane, N, have_nodes=population, have_pods=PODS, settle=SETTLE, kinds=kinds
    )
    print(kopf_or_informer.table(watchers))
    table = rows(kopf_or_informer.table(watchers))
    assert [(r[0], r[1]) for r in table] == [
        (kind, impl) for kind in kinds for impl in ("kopf", "informer")
    ]
    least = {"pods": PODS // 10, "configmaps": 1}
    for w in watchers:
        assert w.kept >= least[w.kind], w  # -1: not held within its limit
        assert w.rss > 15 and w.cpu > 0, w
    assert {w.kept for w in watchers if w.kind == "configmaps"} == {1}


async def test_doctor_scale(admin: Any, control_plane: LocalCluster, population: int) -> None:
    doctor_scale = bench("doctor_scale")
    result = await doctor_scale.measure(
        admin, control_plane, N, have_nodes=population, have_pods=PODS, firsts=("doctor",)
    )
    table = doctor_scale.table(result)
    print(table)
    body = rows(table)
    assert [r[2] for r in body] == ["doctor"], table  # the first's column: one order here
    for first in ("doctor",):
        doctor, floor = result.pair(first)
        # the floor sends exactly doctor's requests (the audit log's record of both)
        assert doctor.requests == floor.requests, table
        assert any(k.startswith("list /api/v1/pods?") for k in doctor.requests), doctor.requests
        assert doctor.seconds > floor.inner > 0, (doctor, floor)
    assert all(r[-1].startswith("yes") for r in body), table
    _, floor = result.pair("doctor")
    assert floor.listed["/api/v1/nodes"] >= N and floor.listed["/api/v1/pods"] >= PODS


async def test_operator_memory(
    admin: Any, control_plane: LocalCluster, operator_kubeconfig: Path, population: int
) -> None:
    operator_memory = bench("operator_memory")
    m = await operator_memory.measure(
        operator_kubeconfig,
        control_plane.workdir / "bench-operator-memory.log",
        "this checkout",
        None,
        PODS // 10,
        settle=SETTLE,
    )
    table = operator_memory.table(population, [m])
    print(table)
    [row] = rows(table)
    assert row[0] == "this checkout", table
    assert 15 < m.operator[0] <= m.operator[1], m  # more than a bare interpreter, peak >= RSS
    assert m.tree[0] >= m.operator[0], m  # with its rules worker, if it runs yet (above)
    assert float(row[2]) == pytest.approx(m.tree[0] - m.operator[0], abs=0.05), table


async def test_rollout(admin: Any, control_plane: LocalCluster) -> None:
    # bench/rollout.py's `smoke` checks its own table: an operator, a floor and a ratio row,
    # every node through its transition on both sides, each with an Applying step and writes.
    table = await bench("rollout").smoke(control_plane, admin)
    print(table)
    body = rows(table)
    assert [r[:2] for r in body] == [
        ["hami-mig", "operator"],
        ["hami-mig", "floor"],
        ["hami-mig", "operator/floor"],
    ], table
    assert float(body[0][2]) > 0 and float(body[1][2]) > 0, table  # total seconds

"""Convergence of one policy over N simulated nodes, against a floor measured in the same run.

For each N: two disjoint pools of N kwok nodes on one local apiserver (heartbeats running).
- floor: a bare kubernetes-asyncio client sends exactly the PATCHes the operator would send
  (computed by the same pure core) with the same bounded concurrency, as the operator's
  ServiceAccount (the same RBAC and admission policies as the operator's writes);
- operator: `vgpu-operator run` in its own process, as deployed (its own interpreter, the
  chart's RBAC), running and idle; then the policy is created.
Both are timed the same way: from the first request (the first PATCH; the policy's creation)
until one watch has seen every node of the pool carry the policy's labels and taints. Both write
counts come from the apiserver's audit log. Prints both times, their ratio (goal: <= 1.5), the
writes per node (goal: 1.0 for both) and the CPU seconds the operator process and the apiserver
spent during each run.

The control plane keeps every node heartbeating with long node leases (bench/benchkit.py says
why and how long); each phase has a deadline and says, past it, what it was waiting for;
SIGTERM, Ctrl-C or a deadline leave no process and no temporary directory behind.

The parts: the operator's process (bench/operator_process.py), the floor's client
(bench/convergence_floor.py), one pool and its clock (bench/convergence_pool.py), CPU time and
the quiet machine (bench/cpu_time.py); here, the operator's run and the two runs side by side.

Which run comes second matters: it follows N nodes created and deleted, which the controller
manager and etcd may still be digesting. So each run's clock starts only once the whole machine
has been quiet (under half a core) for 3 s, or after a bounded wait (the log says which). The
floor runs first by default; `--both-orders` also runs each N with the operator first (a row
each, the `first` column says which).

Usage: python bench/convergence.py [--both-orders] [N ...]   (default: 500 1000)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchkit import CONCURRENCY, arguments, bench_cluster, delete_nodes, log, machine, phase, run
from convergence_floor import floor_run
from convergence_pool import (
    Run,
    converge,
    converge_deadline,
    make_pool,
    node_deadline,
    node_patches,
    other_requests,
    policy,
    received,
    span,
)
from cpu_time import (
    CLK_TCK,
    cpu_seconds,
    idle,
    machine_cpu_seconds,
    quiet_machine,
    tree_cpu_seconds,
)
from operator_process import OperatorProcess, idle_deadline, profile, startup_deadline
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import OPERATOR_USER, install_operator_access
from vgpu_operator import kubeapi
from vgpu_operator.kubeapi.credentials import Credentials

# The names other benchmarks (bench/idle.py, bench/rollout.py, bench/operator_memory.py) and
# tests/cluster/test_bench_smoke.py import from here; the parts above define most of them.
__all__ = [
    "CLK_TCK",
    "HEADER",
    "Convergence",
    "OperatorProcess",
    "convergence",
    "cpu_seconds",
    "idle",
    "idle_deadline",
    "machine_cpu_seconds",
    "node_deadline",
    "policy",
    "quiet_machine",
    "received",
    "row",
    "sizes_and_orders",
    "startup_deadline",
    "tree_cpu_seconds",
]


def create_policy(api: Any, pool: str) -> Callable[[], Awaitable[None]]:
    async def act() -> None:
        body = policy(f"bench-{pool}", pool)
        await kubeapi.request(api, "POST", kubeapi.policy_path(), body=body, field_manager=None)

    return act


async def operator_run(
    api: Any, cluster: LocalCluster, kubeconfig: Path, n: int, quiet_limit: float | None = None
) -> Run:
    """`vgpu-operator run` over a pool of its own: started, idle, then the policy is created
    and timed; the operator is stopped and the pool deleted before the next run (no operator
    runs beside a floor run: the floor's nodes would look to it like a deleted policy's)."""
    apiserver = cluster.pids["kube-apiserver"]
    pool, names = await make_pool(api, "op", n)
    operator = OperatorProcess(kubeconfig, cluster.workdir / "bench-operator.log")
    try:
        # The initial listing of every node and the first pass (no writes) are
        # start-up, not convergence: over before the clock starts.
        await phase(
            f"operator start-up over {n} nodes", startup_deadline(n), operator.wait_first_pass
        )
        # Its first configuration pass, the rules and the pod listing may still be running
        # after the first node pass: the clock starts once the operator is idle.
        await phase(
            f"operator idle over {n} nodes",
            idle_deadline(n),
            lambda p: idle(operator.proc.pid, p),
        )
        await quiet_machine(n, limit=quiet_limit)
        offset = cluster.audit_offset()
        profiler = profile(operator.proc.pid, n)
        cpu0, op0 = cpu_seconds(apiserver), tree_cpu_seconds(operator.proc.pid)
        machine0 = machine_cpu_seconds()
        seconds, began = await phase(
            f"operator over {n} nodes",
            converge_deadline(n),
            lambda progress: converge(api, pool, n, create_policy(api, pool), progress),
        )
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(60)
        api_cpu, machine = cpu_seconds(apiserver) - cpu0, machine_cpu_seconds() - machine0
        op_cpu = tree_cpu_seconds(operator.proc.pid) - op0
        await asyncio.sleep(1)
        writes = node_patches(cluster, OPERATOR_USER, offset, names)
        log(f"operator over {n} nodes, other requests: {other_requests(cluster, offset, names)}")
    finally:
        try:
            # The pool and its policy go while the operator still runs: the policy's finalizer
            # is the operator's to remove, and a policy left terminating would refuse the next
            # run's policy of the same name (the same N run again).
            await phase(
                f"deleting {n} operator nodes", 60 + n * 0.1, lambda _: delete_nodes(api, names)
            )
            await phase(f"deleting policy bench-{pool}", 120, lambda _: delete_policy(api, pool))
        finally:
            operator.stop()
    return Run(seconds, began, writes, op_cpu, api_cpu, machine)


async def delete_policy(api: Any, pool: str) -> None:
    """Deletes the pool's policy and waits until it is gone (its finalizer removed)."""
    path = kubeapi.policy_path(f"bench-{pool}")
    with contextlib.suppress(kubeapi.NotFound):
        await kubeapi.request(api, "DELETE", path)
    while True:
        try:
            await kubeapi.request(api, "GET", path)
        except kubeapi.NotFound:
            return
        await asyncio.sleep(0.5)


@dataclass
class Convergence:
    n: int
    floor_s: float
    operator_s: float
    floor_writes: float  # per node
    operator_writes: float  # per node
    operator_cpu: float  # the operator process and its children (the rules worker)
    apiserver_cpu: tuple[float, float]  # floor, operator
    machine_cpu: tuple[float, float]  # every process on the machine: floor, operator
    spans: tuple[str, str]
    first: str  # which of the two ran first: "floor" or "operator"

    @property
    def ratio(self) -> float:
        return self.operator_s / self.floor_s


HEADER = (
    f"{'N':>6} {'first':>8} {'floor s':>8} {'operator s':>10} {'ratio':>6} "
    f"{'floor w/node':>12} {'op w/node':>9} "
    f"{'op cpu s':>8} {'apiserver cpu s (floor/op)':>26} {'machine cpu s (floor/op)':>24} "
    f"{'PATCHes received at s (floor; op)':>34}"
)


def row(c: Convergence) -> str:
    return (
        f"{c.n:>6} {c.first:>8} {c.floor_s:>8.2f} {c.operator_s:>10.2f} {c.ratio:>6.2f} "
        f"{c.floor_writes:>12.2f} {c.operator_writes:>9.2f} "
        f"{c.operator_cpu:>8.1f} {c.apiserver_cpu[0]:>12.1f} / {c.apiserver_cpu[1]:<11.1f} "
        f"{c.machine_cpu[0]:>11.1f} / {c.machine_cpu[1]:<10.1f} "
        f"{c.spans[0]:>16}; {c.spans[1]:<16}"
    )


async def convergence(
    api: Any,
    cluster: LocalCluster,
    kubeconfig: Path,
    n: int,
    operator_first: bool = False,
    *,
    quiet_limit: float | None = None,
) -> Convergence:
    """One floor run and one operator run over N nodes, one pool at a time (both runs have
    the same N nodes heartbeating). The second run of the two comes after N nodes were
    created and deleted (the controller manager and etcd still digesting them):
    `operator_first` swaps the order, to show what the order costs. `quiet_limit`: the longest
    wait for a quiet machine before each run (None: `quiet_deadline(n)`; the smoke test's
    shared machine is never quiet)."""
    if operator_first:
        op = await operator_run(api, cluster, kubeconfig, n, quiet_limit)
        floor = await floor_run(api, cluster, kubeconfig, n, quiet_limit)
    else:
        floor = await floor_run(api, cluster, kubeconfig, n, quiet_limit)
        op = await operator_run(api, cluster, kubeconfig, n, quiet_limit)
    return Convergence(
        n,
        floor.seconds,
        op.seconds,
        len(floor.writes) / n,
        len(op.writes) / n,
        op.cpu,
        (floor.apiserver_cpu, op.apiserver_cpu),
        (floor.machine_cpu, op.machine_cpu),
        (span(floor.writes, floor.began), span(op.writes, op.began)),
        "operator" if operator_first else "floor",
    )


def sizes_and_orders(argv: list[str], default: list[int]) -> tuple[list[int], list[bool]]:
    """`[--both-orders] [N ...]`: the sizes, and for each the orders to run (floor first;
    with --both-orders, then the operator first too)."""
    both = "--both-orders" in argv
    sizes = [int(a) for a in argv if a != "--both-orders"] or default
    return sizes, [False, True] if both else [False]


async def main(sizes: list[int], orders: list[bool]) -> None:
    profiling = bool(os.environ.get("BENCH_PROFILE"))
    log(f"machine: {machine()}")
    with bench_cluster(profiling=profiling) as cluster:
        admin = Credentials(kubeconfig=str(cluster.kubeconfig))
        # The floor's client gets the same connection pool as the operator's.
        api = await admin.client(pool_size=CONCURRENCY + 8)
        async with api:
            credentials = await install_operator_access(api, cluster.workdir)
            assert credentials.kubeconfig is not None
            kubeconfig = Path(credentials.kubeconfig)
            print(HEADER, flush=True)
            for n in sizes:
                for operator_first in orders:
                    c = await convergence(api, cluster, kubeconfig, n, operator_first)
                    print(row(c), flush=True)


if __name__ == "__main__":
    run(lambda: main(*sizes_and_orders(arguments(__doc__), [500, 1000])))

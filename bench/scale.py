"""The scale benchmark, one run, one table: for each N, convergence against the floor
(bench/convergence.py) and memory with N nodes and 10 x N running pods.

Memory: N simulated nodes and 10 x N pods bound to them (kwok runs them; 10 % hold GPU
resources, half `nvidia.com/gpu`, half `volcano.sh/vgpu-number`/`vgpu-memory`; the rest CPU
only), then, one at a time:
- a bare Kopf operator (bench/bare_kopf.py: one no-op event handler on every Pod, unfiltered),
  measured once it has seen every pod and 5 s more;
- `vgpu-operator run` (its own process, the chart's RBAC, as in the convergence runs), measured
  once its pod index has listed (and holds every GPU pod), its first pass is done, and 5 s more.
Both figures are resident memory (VmRSS) with the peak (VmHWM) beside it, in MiB; the
operator's also with its rules worker (a process of its own, `controller/rules_worker.py`) added.

The population (nodes, pods, their growth from one size to the next): bench/population.py.

Order: every convergence first (their pools are created and deleted: no pods around them), then
the memory phases, growing one pool of nodes and pods to each N in turn. Node leases, deadlines
and clean exits: bench/benchkit.py.

Usage: python bench/scale.py [--both-orders] [--etcd-quota-gib G] [--bare-kopf-max N] [N ...]
(default sizes: 1000 5000). A size given more than once runs its convergence that many times
(three runs in both orders: `--both-orders 1000 1000 1000 5000 5000 5000`) and its memory once.
The bare Kopf operator is measured up to `--bare-kopf-max` nodes (default 5,000: at 50,000 pods
it held 1.2 GiB, 1.9 GiB at its peak, beside the control plane on the same machine; issue 34
leaves it optional at 10,000 nodes); beyond, its cell says it was not measured.

etcd's space quota is 8 GiB here (`--etcd-quota-gib`; etcd's own default is 2 GiB and 8 GiB the
most it recommends, etcd-io/etcd@v3.6.5:server/storage/quota.go): past its quota etcd refuses
every write (`mvcc: database space exceeded`), and its database file only grows between
defragmentations, so the pools of 10,000 nodes created and deleted by the convergence runs count
as well as the 100,000 pods. A larger quota reserves nothing. The run prints the database
file's size at its end (`etcd_db_bytes`), what a quota must hold.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchkit import (
    CONCURRENCY,
    GRACE,
    LEASE_SECONDS,
    Progress,
    arguments,
    bench_cluster,
    die_with_parent,
    etcd_db_bytes,
    log,
    machine,
    memory,
    phase,
    run,
    tree_memory,
)
from convergence import HEADER, Convergence, convergence, row, sizes_and_orders
from operator_process import OperatorProcess
from population import NAMESPACE, PODS_PER_NODE, POOL, populate, workload_pod
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import install_operator_access
from vgpu_operator.kubeapi.credentials import Credentials

# The population's names bench/operator_memory.py, bench/kopf_or_informer.py,
# bench/doctor_scale.py, bench/controller_held.py and tests/cluster/test_bench_smoke.py import
# from here, beside this module's own.
__all__ = [
    "NAMESPACE",
    "PODS_PER_NODE",
    "POOL",
    "SETTLE",
    "held_memory",
    "memory_run",
    "populate",
    "table",
    "workload_pod",
]

SETTLE = 5.0  # seconds after the listing is in, before memory is read
ETCD_QUOTA_GIB = 8.0
BARE_KOPF_MAX = 5000


@dataclass
class Memory:
    n: int
    pods: int
    gpu_pods: int
    operator: tuple[float, float]  # RSS, peak RSS (MiB)
    operator_tree: tuple[float, float]  # the same with its rules worker process
    kopf: tuple[float, float] | None  # None: not measured at this size (--bare-kopf-max)


class BareKopf:
    def __init__(self, kubeconfig: Path, log_path: Path) -> None:
        self._log = log_path.open("ab")
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("bare_kopf.py"))],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            preexec_fn=die_with_parent,
        )
        self.seen = 0

    async def wait_seen(self, count: int, progress: Progress) -> None:
        assert self.proc.stdout is not None
        loop = asyncio.get_running_loop()
        while self.seen < count:
            progress(f"the bare Kopf operator to see every pod: {self.seen}/{count}")
            line = await loop.run_in_executor(None, self.proc.stdout.readline)
            if not line:
                raise RuntimeError(f"the bare Kopf operator exited ({self.proc.wait()})")
            if line.startswith(b"seen "):
                self.seen = int(line.split()[1])

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


async def settled_memory(pid: int, settle: float = SETTLE) -> tuple[float, float]:
    await asyncio.sleep(settle)
    return memory(pid)


async def settled_tree_memory(
    pid: int, settle: float = SETTLE
) -> tuple[tuple[float, float], tuple[float, float]]:
    """The process's memory and its tree's (with its children), read together after `settle`."""
    await asyncio.sleep(settle)
    return memory(pid), tree_memory(pid)


async def memory_run(
    api: Any,
    cluster: LocalCluster,
    kubeconfig: Path,
    n: int,
    have_nodes: int,
    have_pods: int,
    *,
    settle: float = SETTLE,
    bare_kopf: bool = True,
) -> Memory:
    """The population grown to N (`populate`), then the bare Kopf operator's memory (unless not
    `bare_kopf`) and the operator's, each `settle` seconds after it holds the pods."""
    pods = n * PODS_PER_NODE
    gpu_pods = sum(1 for i in range(pods) if i % 10 == 0)
    await populate(api, n, have_nodes, have_pods)
    kopf_mem = await bare_kopf_memory(cluster, pods, settle) if bare_kopf else None

    operator = OperatorProcess(kubeconfig, cluster.workdir / "bench-operator.log")
    op_mem, op_tree = await held_memory(
        operator, f"operator listing {pods} pods", 300 + pods * 0.02, gpu_pods, settle
    )
    return Memory(n, pods, gpu_pods, op_mem, op_tree, kopf_mem)


async def held_memory(
    operator: OperatorProcess, what: str, deadline: float, gpu_pods: int, settle: float
) -> tuple[tuple[float, float], tuple[float, float]]:
    """The operator's memory and its process tree's (RSS, peak) once its pod index holds the
    `gpu_pods` GPU pods and its first pass is done, and `settle` seconds more; then it stops."""
    try:
        await phase(
            what,
            deadline,
            lambda progress: operator.wait_until(
                f"its pod index to hold the {gpu_pods} GPU pods and its first pass",
                lambda b: (
                    bool(b.get("podIndexSynced"))
                    and b.get("gpuPods") == gpu_pods
                    and int(b.get("reconcilePasses") or 0) >= 1
                ),
                progress,
            ),
        )
        return await settled_tree_memory(operator.proc.pid, settle)
    finally:
        operator.stop()


async def bare_kopf_memory(cluster: LocalCluster, pods: int, settle: float) -> tuple[float, float]:
    kopf = BareKopf(cluster.kubeconfig, cluster.workdir / "bench-bare-kopf.log")
    try:
        await phase(
            f"bare Kopf listing {pods} pods",
            300 + pods * 0.04,
            lambda progress: kopf.wait_seen(pods - pods % 100, progress),
        )
        return await settled_memory(kopf.proc.pid, settle)
    finally:
        kopf.stop()


def kopf_cell(m: Memory) -> str:
    return f"{m.kopf[0]:.0f} ({m.kopf[1]:.0f})" if m.kopf else "not measured"


def table(conv: dict[int, list[Convergence]], mem: dict[int, Memory]) -> str:
    """One row per convergence run (with --both-orders, two per N: `first` says which of the
    floor and the operator ran first); the memory of N on its first row."""
    lines = [
        "| N nodes | first | floor s | operator s | ratio | writes/node floor / operator | pods "
        "(GPU) | operator RSS MiB (peak) | with its rules worker | bare Kopf RSS MiB (peak) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in sorted(set(conv) | set(mem)):
        m = mem.get(n)
        mem_cells = (
            f"{m.pods:,} ({m.gpu_pods:,}) | {m.operator[0]:.0f} ({m.operator[1]:.0f}) | "
            f"{m.operator_tree[0]:.0f} ({m.operator_tree[1]:.0f}) | {kopf_cell(m)}"
            if m
            else "not completed | | |"
        )
        runs: list[Convergence | None] = [*conv.get(n, [])] or [None]
        for k, c in enumerate(runs):
            conv_cells = (
                f"{c.first} | {c.floor_s:.2f} | {c.operator_s:.2f} | {c.ratio:.2f} | "
                f"{c.floor_writes:.2f} / {c.operator_writes:.2f}"
                if c
                else "| not completed | | |"
            )
            lines.append(f"| {n:,} | {conv_cells} | {mem_cells if k == 0 else '| | |'} |")
    return "\n".join(lines)


@dataclass
class Options:
    etcd_quota_bytes: int
    bare_kopf_max: int


def options(argv: list[str]) -> tuple[Options, list[str]]:
    """`--etcd-quota-gib G` and `--bare-kopf-max N` taken out of `argv`; the other arguments."""
    rest = list(argv)

    def take(flag: str, default: float) -> float:
        if flag not in rest:
            return default
        at = rest.index(flag)
        try:
            value = float(rest[at + 1])
        except (IndexError, ValueError):
            raise SystemExit(f"{flag} needs a number, e.g. {flag} {default:g}") from None
        del rest[at : at + 2]
        return value

    gib = take("--etcd-quota-gib", ETCD_QUOTA_GIB)
    kopf_max = int(take("--bare-kopf-max", BARE_KOPF_MAX))
    return Options(int(gib * 2**30), kopf_max), rest


async def main(sizes: list[int], orders: list[bool], opts: Options) -> None:
    etcd_quota_bytes = opts.etcd_quota_bytes
    log(f"machine: {machine()}")
    log(f"kwok node leases {LEASE_SECONDS}s, node-monitor-grace-period {GRACE}")
    log(f"etcd quota {etcd_quota_bytes / 2**30:g} GiB")
    conv: dict[int, list[Convergence]] = {}
    mem: dict[int, Memory] = {}
    etcd_db = "not read"
    try:
        with bench_cluster(etcd_quota_bytes=etcd_quota_bytes) as cluster:
            admin = Credentials(kubeconfig=str(cluster.kubeconfig))
            api = await admin.client(pool_size=CONCURRENCY + 8)
            async with api:
                credentials = await install_operator_access(api, cluster.workdir)
                assert credentials.kubeconfig is not None
                kubeconfig = Path(credentials.kubeconfig)
                print(HEADER, flush=True)
                for n in sizes:
                    for operator_first in orders:
                        c = await convergence(api, cluster, kubeconfig, n, operator_first)
                        conv.setdefault(n, []).append(c)
                        print(row(c), flush=True)
                have_nodes = have_pods = 0
                for n in sorted(set(sizes)):  # memory once per size, growing one pool
                    mem[n] = await memory_run(
                        api,
                        cluster,
                        kubeconfig,
                        n,
                        have_nodes,
                        have_pods,
                        bare_kopf=n <= opts.bare_kopf_max,
                    )
                    have_nodes, have_pods = n, n * PODS_PER_NODE
                    m = mem[n]
                    print(
                        f"memory N={n} pods={m.pods} gpu={m.gpu_pods}: operator "
                        f"{m.operator[0]:.0f} MiB (peak {m.operator[1]:.0f}; with its rules "
                        f"worker {m.operator_tree[0]:.0f}), bare Kopf RSS MiB (peak) "
                        f"{kopf_cell(m)}",
                        flush=True,
                    )
            etcd_db = f"{etcd_db_bytes(cluster) / 2**30:.2f} GiB"
    finally:
        print(
            f"\nMachine: {machine()}; node leases {LEASE_SECONDS}s, grace {GRACE}, "
            f"etcd quota {etcd_quota_bytes / 2**30:g} GiB, its database {etcd_db} at the end\n"
        )
        print(table(conv, mem), flush=True)


if __name__ == "__main__":
    opts, words = options(arguments(__doc__))
    run(lambda: main(*sizes_and_orders(words, [1000, 5000]), opts))

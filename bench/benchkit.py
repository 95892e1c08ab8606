"""What the benchmarks share: a local control plane that two cores can keep thousands of nodes
alive on, deadlines that say what they were waiting for, clean exits, and process memory.

Node heartbeats. kwok renews each node's Lease every quarter of the lease duration
(sigs.k8s.io/kwok@v0.8.0:pkg/kwok/controllers/controller.go, `renewInterval := leaseDuration
/ 4`): with the local control plane's 40 s that is 500 Lease writes a second at 5,000 nodes,
more than two cores serve beside the runs measured, and once renewals lag the controller
manager's node-lifecycle controller marks nodes NotReady and patches them (taints) under the
benchmark. The benchmarks' control plane therefore runs kwok with `--node-lease-duration-seconds
LEASE_SECONDS` (a renewal every 5 minutes) and the controller manager with
`--node-monitor-grace-period GRACE` (longer than a renewal interval plus its lag), so every node
keeps heartbeating, at a rate two cores hold. Both are printed with the results.

Setting up. The controller manager's client is limited to 20 requests a second by default, and
its node-lifecycle controller puts a not-ready taint on each new node and takes it off once the
node is Ready: about 4 nodes a second came up, 20 minutes per 5,000-node pool. It runs with
`--kube-api-qps 5000 --kube-api-burst 10000`, as kwokctl runs it for scale tests
(sigs.k8s.io/kwok@v0.8.0:pkg/kwokctl/components/kube_controller_manager.go, `DisableQPSLimits`).
Nothing is timed while nodes come up: each run starts once every node is Ready and untainted.

Exits. SIGTERM and SIGINT cancel the run; every phase has a deadline and, past it, prints what
it was waiting for and ends the run. Either way the control plane is stopped and its temporary
directory removed (`LocalCluster.stop`), and every child process is ended: the control plane's
and the operators' die with the benchmark process even if it is killed (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from vgpu_devcluster import binaries
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.nodes import NodeSpec, gpu_node_manifest, is_ready
from vgpu_operator import kubeapi

LEASE_SECONDS = 1200
GRACE = "30m"
CONCURRENCY = 32

T = TypeVar("T")


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


DISTRIBUTIONS = ("kopf", "kubernetes-asyncio", "aiohttp", "pydantic")


def stamp() -> str:
    """The head of a benchmark's report: the date, the commit, the machine and the versions
    (Python's and the operator's main libraries', the control plane's)."""
    from importkit import commit, versions

    return (
        f"Date {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}\n"
        f"Machine: {machine()}\n"
        f"Versions: {versions(DISTRIBUTIONS)}, Kubernetes {binaries.KUBERNETES_VERSION}, "
        f"etcd {binaries.ETCD_VERSION}, kwok {binaries.KWOK_VERSION}"
    )


def machine() -> str:
    """The machine, for the results: CPU model, cores, memory."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    return f"{model}, {os.cpu_count()} cores, {mem_kb / 2**20:.0f} GiB"


@contextlib.contextmanager
def bench_cluster(
    profiling: bool = False, *, etcd_quota_bytes: int = 0, prefix: str = "vgpu-bench-"
) -> Iterator[LocalCluster]:
    """The local control plane with long node leases (see the module docstring): started
    without kwok and the controller manager, which are then started here with the longer
    lease and grace period, as children of the same LocalCluster (stopped with it).
    `etcd_quota_bytes`: etcd's space quota (0: its default, 2 GiB); `prefix` names the
    temporary directory (the tests' smoke run uses the test clusters' prefix, whose leftover
    processes `make test` looks for)."""
    with LocalCluster.run(
        prefix=prefix,
        with_scheduler=False,
        with_kwok=False,
        with_controller_manager=False,
        profiling=profiling,
        etcd_quota_bytes=etcd_quota_bytes,
    ) as cluster:
        bins = binaries.ensure_all(names=("kube-controller-manager", "kwok"))
        d = cluster.workdir
        k = cluster.kubeconfig_for("controller-manager")
        cluster._spawn(
            "kube-controller-manager",
            [
                str(bins["kube-controller-manager"]),
                f"--kubeconfig={k}",
                f"--authentication-kubeconfig={k}",
                f"--authorization-kubeconfig={k}",
                f"--service-account-private-key-file={d / 'sa.key'}",
                f"--root-ca-file={cluster.ca_file}",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                "--secure-port=0",
                f"--node-monitor-grace-period={GRACE}",
                "--kube-api-qps=5000",
                "--kube-api-burst=10000",
            ],
            False,
        )
        cluster._spawn(
            "kwok",
            [
                str(bins["kwok"]),
                f"--kubeconfig={cluster.kubeconfig_for('kwok')}",
                f"--config={binaries.kwok_stages()}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--node-lease-duration-seconds={LEASE_SECONDS}",
                "--cidr=10.0.0.1/24",
                "--node-ip=10.0.0.1",
            ],
            False,
        )
        yield cluster


def etcd_db_bytes(cluster: LocalCluster) -> int:
    """The size of etcd's database file: the most it has held since its last defragmentation,
    what its space quota (`--quota-backend-bytes`) is checked against."""
    return (cluster.workdir / "etcd" / "member" / "snap" / "db").stat().st_size


class PhaseTimeout(RuntimeError):
    pass


@dataclass
class Progress:
    """What a phase is waiting for, kept up to date by the phase itself."""

    what: str = "starting"

    def __call__(self, what: str) -> None:
        self.what = what


async def phase(name: str, seconds: float, run: Callable[[Progress], Awaitable[T]]) -> T:
    """`run(progress)` within `seconds`; past it, print what it was waiting for and fail."""
    progress = Progress()
    began = time.monotonic()
    try:
        async with asyncio.timeout(seconds):
            result = await run(progress)
    except TimeoutError:
        message = f"{name}: no end after {seconds:.0f}s; it was waiting for {progress.what}"
        print(message, file=sys.stderr, flush=True)
        raise PhaseTimeout(message) from None
    log(f"{name}: {time.monotonic() - began:.1f}s")
    return result


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def arguments(doc: str | None) -> list[str]:
    """The command's arguments; with `-h` or `--help` among them, its docstring printed and
    the process ended (for the benchmarks that read their arguments by hand)."""
    argv = sys.argv[1:]
    if "-h" in argv or "--help" in argv:
        print(doc or "no usage written", flush=True)
        sys.exit(0)
    return argv


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """asyncio.run(main()), with SIGTERM and SIGINT cancelling it (every `finally` then runs:
    processes are stopped, the temporary directory removed); exit status 1 if it did not end
    normally."""

    async def guarded() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        await main()

    try:
        asyncio.run(guarded())
    except (asyncio.CancelledError, KeyboardInterrupt):
        print("benchmark stopped by a signal; everything it started is gone", file=sys.stderr)
        sys.exit(1)
    except PhaseTimeout:
        sys.exit(1)


def memory(pid: int) -> tuple[float, float]:
    """(resident, peak resident) memory of a process, in MiB (VmRSS, VmHWM)."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def process_tree(pid: int) -> set[int]:
    """A process and its live descendants (the operator's rules worker is a process of its
    own: its CPU and memory belong to the operator)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent and p not in tree]
        tree.update(children)
        frontier.extend(children)
    return tree


def tree_memory(pid: int) -> tuple[float, float]:
    """`memory` summed over `process_tree(pid)`."""
    rss = peak = 0.0
    for p in process_tree(pid):
        with contextlib.suppress(OSError, KeyError):
            r, h = memory(p)
            rss, peak = rss + r, peak + h
    return rss, peak


# --- nodes ------------------------------------------------------------------------------------


async def create_nodes(api: Any, specs: list[NodeSpec], progress: Progress) -> None:
    """POST the nodes (bounded concurrency), then wait until all are Ready without a
    node.kubernetes.io taint; progress says how many are done."""
    sem = asyncio.Semaphore(CONCURRENCY)
    made = 0

    async def create(spec: NodeSpec) -> None:
        nonlocal made
        async with sem:
            await kubeapi.request(
                api, "POST", kubeapi.node_path(), body=gpu_node_manifest(spec), field_manager=None
            )
            made += 1
            if made % 500 == 0:
                progress(f"node creation: {made}/{len(specs)} created")

    progress(f"node creation: 0/{len(specs)} created")
    await asyncio.gather(*(create(s) for s in specs))
    pools = {s.labels.get("bench/pool") for s in specs}
    names = {s.name for s in specs}
    while True:
        ready = 0
        for pool in pools:
            listing = await kubeapi.list_all(
                api, kubeapi.node_path(), kubeapi.WatchOptions(label_selector=f"bench/pool={pool}")
            )
            for node in listing.items:
                taints = (node.get("spec") or {}).get("taints") or []
                lifecycle = any(t.get("key", "").startswith("node.kubernetes.io/") for t in taints)
                if node["metadata"]["name"] in names and is_ready(node) and not lifecycle:
                    ready += 1
        progress(f"nodes Ready: {ready}/{len(specs)}")
        if ready >= len(specs):
            return
        await asyncio.sleep(min(3.0, 0.25 + len(specs) / 400))  # a few nodes: no 3 s wait


async def delete_nodes(api: Any, names: set[str]) -> None:
    sem = asyncio.Semaphore(CONCURRENCY)

    async def delete(name: str) -> None:
        async with sem:
            with contextlib.suppress(kubeapi.NotFound):
                await kubeapi.request(api, "DELETE", kubeapi.node_path(name))

    await asyncio.gather(*(delete(name) for name in names))


# --- CPU over a window ------------------------------------------------------------------------


class CpuWindow:
    """The CPU seconds each named part spends from this object's creation to `done()`: `parts`
    maps a name to a reading of that part's CPU seconds so far (None where it cannot be read);
    the whole machine's is always read, as "machine" (bench/cpu_time.py). The one way the
    benchmarks' reports (bench/idle.py, bench/rollout.py) take their CPU columns."""

    def __init__(self, parts: dict[str, Callable[[], float | None]]) -> None:
        from cpu_time import machine_cpu_seconds

        self.parts = {**parts, "machine": machine_cpu_seconds}
        self.start = {name: read() for name, read in self.parts.items()}

    def done(self) -> dict[str, float | None]:
        """Each part's CPU seconds since the start (None: not read at one end)."""
        out: dict[str, float | None] = {}
        for name, read in self.parts.items():
            began, now = self.start[name], read()
            out[name] = None if began is None or now is None else now - began
        return out


def own_and_reaped_cpu(pid: int) -> tuple[float, float]:
    """(utime + stime, cutime + cstime) of a process from /proc/<pid>/stat, in seconds: its own
    CPU, and its reaped children's (the kernel adds a child's CPU to its parent's once the
    parent has waited for it: an agent's fake nvidia-smi calls, the operator's ended workers)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    own = (int(fields[11]) + int(fields[12])) / ticks
    return own, (int(fields[13]) + int(fields[14])) / ticks


def cpu_with_reaped(pid: int) -> float:
    """CPU seconds of a process and its live descendants, and of the children it reaped."""
    total = 0.0
    for p in process_tree(pid):
        with contextlib.suppress(OSError):
            own, reaped = own_and_reaped_cpu(p)
            total += own + reaped if p == pid else own
    return total

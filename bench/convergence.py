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
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from benchkit import (
    CONCURRENCY,
    Progress,
    bench_cluster,
    create_nodes,
    delete_nodes,
    die_with_parent,
    log,
    machine,
    phase,
    process_tree,
    run,
)
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import OPERATOR_USER, install_operator_access
from vgpu_devcluster.nodes import NodeSpec
from vgpu_operator import contract, kubeapi
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.kubeapi.credentials import Credentials

CLK_TCK = os.sysconf("SC_CLK_TCK")


def policy(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {"bench/pool": pool}}, "mode": "hami-core"},
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of `process_tree(pid)`: the operator and its rules worker."""
    total = 0.0
    for p in process_tree(pid):
        with contextlib.suppress(OSError):
            total += cpu_seconds(p)
    return total


def machine_cpu_seconds() -> float:
    """CPU time every process on the machine spent so far (/proc/stat, all but idle/iowait)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(v) for i, v in enumerate(fields[:8]) if i not in (3, 4))
    return busy / CLK_TCK


async def idle(pid: int, progress: Progress, busy: float = 0.05, quiet: int = 2) -> None:
    """Until the process and its children use under `busy` of a core for `quiet` seconds in
    a row (the caller's phase bounds the wait)."""
    calm, last = 0, tree_cpu_seconds(pid)
    while calm < quiet:
        await asyncio.sleep(1)
        now = tree_cpu_seconds(pid)
        calm = calm + 1 if now - last < busy else 0
        progress(f"the operator to go idle (it used {now - last:.2f} CPU s in the last second)")
        last = now


async def quiet_machine(
    n: int, busy: float = 0.5, quiet: int = 3, limit: float | None = None
) -> None:
    """Until the whole machine uses under `busy` of a core for `quiet` seconds in a row, at
    most `limit` seconds (None: `quiet_deadline(n)`; then the run starts anyway, and says so):
    creating and deleting N nodes leaves the controller manager, etcd and kwok busy for a
    while, and a run started meanwhile measures their backlog, not the writer (at 5,000 nodes
    the second run's pool took three times as long to create as the first's)."""
    deadline = quiet_deadline(n) if limit is None else limit
    began, calm, last = time.monotonic(), 0, machine_cpu_seconds()
    while calm < quiet:
        await asyncio.sleep(1)
        now = machine_cpu_seconds()
        used, last = now - last, now
        calm = calm + 1 if used < busy else 0
        if time.monotonic() - began > deadline:
            log(f"the machine is not quiet after {deadline:.0f}s ({used:.2f} CPU s/s): starting")
            return
    log(f"machine quiet after {time.monotonic() - began:.1f}s")


def quiet_deadline(n: int) -> float:
    return 60 + n * 0.03


async def pool_nodes(api: Any, pool: str) -> list[dict[str, Any]]:
    listing = await kubeapi.request(
        api, "GET", kubeapi.node_path(), query={"labelSelector": f"bench/pool={pool}"}
    )
    return list(listing["items"])


async def converge(
    api: Any, pool: str, n: int, act: Callable[[], Awaitable[None]], progress: Progress
) -> tuple[float, float]:
    """Seconds from `act()` until a watch has seen all `n` nodes of the pool tainted, and the
    wall-clock time `act()` began."""
    listing = await kubeapi.request(api, "GET", kubeapi.node_path(), query={"limit": "1"})
    rv = listing["metadata"]["resourceVersion"]
    seen: set[str] = set()
    done = asyncio.Event()

    def observe(obj: dict[str, Any]) -> None:
        taints = (obj.get("spec") or {}).get("taints") or []
        if any(t.get("key") == contract.DEFAULT_TAINT_KEY for t in taints):
            seen.add(obj["metadata"]["name"])
            progress(f"a watch to see the policy's taint on every node: {len(seen)}/{n}")
        if len(seen) >= n:
            done.set()

    selector = f"bench/pool={pool},volcano.sh/vgpu.enabled=true"

    async def watch() -> None:
        # Raw JSON lines, no typed models: the observer must not load the machine it measures.
        raw: Any = api
        since = rv
        while not done.is_set():
            resp = await raw.call_api(
                kubeapi.node_path(),
                "GET",
                query_params=[
                    ("watch", "true"),
                    ("labelSelector", selector),
                    ("resourceVersion", since),
                    ("timeoutSeconds", "600"),
                ],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
            )
            async for line in resp.content:
                observe(json.loads(line)["object"])
                if done.is_set():
                    resp.close()
                    return
            # The apiserver closes a watch that falls behind: catch up with a list.
            listing = await kubeapi.request(
                api, "GET", kubeapi.node_path(), query={"labelSelector": selector}
            )
            for obj in listing.get("items") or []:
                observe(obj)
            since = listing["metadata"]["resourceVersion"]

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.5)
    sampled = asyncio.create_task(apiserver_profile(api, f"{pool}"))
    began = time.time()
    start = time.perf_counter()
    try:
        progress("the first request")
        await act()
        progress(f"a watch to see the policy's taint on every node: {len(seen)}/{n}")
        await done.wait()
        elapsed = time.perf_counter() - start
        await watcher
        await sampled
    finally:
        watcher.cancel()
        sampled.cancel()
        await asyncio.gather(watcher, sampled, return_exceptions=True)
    return elapsed, began


def floor_writes(api: Any, pool: str, plans: dict[str, Any]) -> Callable[[], Awaitable[None]]:
    """The floor's PATCHes. Each carries the resourceVersion it was planned at, as the
    operator's do; on a 409 (kwok updated the node since the listing) it reads the node and
    plans it again, as the operator does."""
    policies = [parse_policy(policy("floor", pool))]

    async def act() -> None:
        sem = asyncio.Semaphore(CONCURRENCY)

        async def send(name: str, body: dict[str, Any]) -> None:
            async with sem:
                while True:
                    try:
                        await kubeapi.request(
                            api,
                            "PATCH",
                            kubeapi.node_path(name),
                            body=body,
                            content_type=kubeapi.MERGE_PATCH,
                        )
                        return
                    except kubeapi.Conflict:
                        fresh = await kubeapi.request(api, "GET", kubeapi.node_path(name))
                        plan = plan_cluster([node_facts(fresh)], policies).plans[name]
                        if plan.patch is None:
                            return
                        body = plan.patch

        await asyncio.gather(*(send(n, b) for n, b in plans.items()))

    return act


def create_policy(api: Any, pool: str) -> Callable[[], Awaitable[None]]:
    async def act() -> None:
        body = policy(f"bench-{pool}", pool)
        await kubeapi.request(api, "POST", kubeapi.policy_path(), body=body, field_manager=None)

    return act


def profile(pid: int, n: int) -> subprocess.Popen[bytes] | None:
    """With BENCH_PROFILE=<dir>: py-spy samples the operator while it converges (collapsed
    stacks in <dir>/operator-<N>.txt, for flamegraph.pl or speedscope)."""
    out = os.environ.get("BENCH_PROFILE")
    if not out:
        return None
    Path(out).mkdir(parents=True, exist_ok=True)
    target = Path(out) / f"operator-{n}.txt"
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    cmd = [
        spy,
        "record",
        "-p",
        str(pid),
        "--subprocesses",
        "-f",
        "raw",
        "-r",
        "200",
        "-o",
        str(target),
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def apiserver_profile(api: Any, name: str, seconds: int = 5) -> None:
    """With BENCH_PROFILE=<dir>: the apiserver's own CPU profile (Go pprof) over the first
    `seconds` of a run, to <dir>/apiserver-<name>.pb.gz (`go tool pprof -top` reads it)."""
    out = os.environ.get("BENCH_PROFILE")
    if not out:
        return
    raw: Any = api
    resp = await raw.call_api(
        "/debug/pprof/profile",
        "GET",
        query_params=[("seconds", str(seconds))],
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
        _request_timeout=seconds + 30,
    )
    data = await resp.read()
    if resp.status != 200:
        raise RuntimeError(f"apiserver profile: {resp.status} {data[:200]!r}")
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"apiserver-{name}.pb.gz").write_bytes(data)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OperatorProcess:
    """`vgpu-operator run` as a subprocess, with its Kopf liveness endpoint (which reports the
    reconciler's pass count) to tell when its first pass is over; `args` are more of its
    arguments (bench/idle.py: the chart's leader election)."""

    def __init__(self, kubeconfig: Path, log: Path, args: Sequence[str] = ()) -> None:
        self.port = free_port()
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vgpu_operator.commands.cli",
                "run",
                "--kubeconfig",
                str(kubeconfig),
                "--liveness",
                f"http://127.0.0.1:{self.port}/healthz",
                "--concurrency",
                str(CONCURRENCY),
                *args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )

    async def health(self, session: aiohttp.ClientSession) -> dict[str, Any]:
        try:
            async with session.get(f"http://127.0.0.1:{self.port}/healthz") as resp:
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, json.JSONDecodeError):
            return {}
        return body if isinstance(body, dict) else {}

    async def wait_until(
        self, what: str, ready: Callable[[dict[str, Any]], bool], progress: Progress
    ) -> None:
        """Until its health answer satisfies `ready` (the caller's phase bounds the wait)."""
        async with aiohttp.ClientSession() as session:
            while True:
                body = await self.health(session)
                if ready(body):
                    return
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the operator exited ({self.proc.returncode})")
                progress(f"{what} (the operator's health answer: {body or 'none yet'})")
                await asyncio.sleep(0.2)

    async def wait_first_pass(self, progress: Progress) -> None:
        await self.wait_until(
            "the operator's first reconcile pass",
            lambda b: int(b.get("reconcilePasses") or 0) >= 1,
            progress,
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def node_deadline(n: int) -> float:
    """Seconds to create n nodes and see them Ready (measured here: about 4 a second on two
    busy cores, the controller manager lifting each new node's not-ready taint)."""
    return 120 + n * 0.4


async def make_pool(api: Any, role: str, n: int) -> tuple[str, set[str]]:
    pool = f"{role}{n}"
    specs = [
        NodeSpec(f"{pool}-{i}", "A100-SXM4-80GB", 8, labels={"bench/pool": pool}) for i in range(n)
    ]
    await phase(
        f"{n} {role} nodes", node_deadline(n), lambda progress: create_nodes(api, specs, progress)
    )
    return pool, {s.name for s in specs}


def node_patches(
    cluster: LocalCluster, user: str, offset: int, names: set[str]
) -> list[dict[str, Any]]:
    """The successful PATCHes `user` sent to the pool's Nodes, from the audit log."""
    return [
        e
        for e in cluster.audit_events(user=user, offset=offset)
        if e["objectRef"]["resource"] == "nodes"
        and e["verb"] == "patch"
        and e["objectRef"].get("name") in names
        and e["responseStatus"]["code"] < 300
    ]


def other_requests(cluster: LocalCluster, offset: int, names: set[str]) -> str:
    """What else the audit log holds for a run (everyone's writes, the operator's reads),
    counted by user, verb and resource, leaving out the PATCHes of the pool's Nodes: the
    requests that compete with the measured ones."""
    counts: dict[str, int] = {}
    for e in cluster.audit_events(offset=offset, reads=True):
        ref = e.get("objectRef") or {}
        if e.get("verb") == "patch" and ref.get("resource") == "nodes" and ref.get("name") in names:
            continue
        user = str((e.get("user") or {}).get("username", "?")).rsplit(":", 1)[-1]
        key = f"{user} {e.get('verb')} {ref.get('resource')}"
        counts[key] = counts.get(key, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
    return ", ".join(f"{k} x{v}" for k, v in top) or "none"


def received(event: dict[str, Any]) -> float:
    stamp = event["requestReceivedTimestamp"].rstrip("Z")
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


def span(patches: list[dict[str, Any]], start: float) -> str:
    """`first-last` second at which the apiserver received the PATCHes, from `start`."""
    if not patches:
        return "-"
    times = sorted(received(e) for e in patches)
    return f"{times[0] - start:.2f}-{times[-1] - start:.2f}"


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


def converge_deadline(n: int) -> float:
    return 120 + n * 0.2


def startup_deadline(n: int) -> float:
    """Seconds for the operator to list N nodes and finish its first pass."""
    return 300 + n * 0.03


def idle_deadline(n: int) -> float:
    """Seconds for the operator to go idle after its first pass (its configuration pass, the
    rules and the pod listing may still run)."""
    return 120 + n * 0.02


@dataclass
class Run:
    seconds: float
    began: float  # wall clock
    writes: list[dict[str, Any]]  # the PATCHes of the pool's nodes (audit log)
    cpu: float  # the operator and its children (0 for the floor)
    apiserver_cpu: float
    machine_cpu: float


async def floor_run(
    api: Any, cluster: LocalCluster, kubeconfig: Path, n: int, quiet_limit: float | None = None
) -> Run:
    """The bare client's PATCHes over a pool of its own (created, timed, deleted). The client
    sends them as the operator's ServiceAccount (`kubeconfig`), so the apiserver runs the same
    RBAC and admission on them as on the operator's: the chart's ValidatingAdmissionPolicies
    check every Node write of that identity (their CEL took a fifth of the apiserver's CPU in
    the operator's runs, an apiserver profile of 2026-11-26), which an admin's PATCHes skip."""
    apiserver = cluster.pids["kube-apiserver"]
    pool, names = await make_pool(api, "floor", n)
    facts = [node_facts(x) for x in await pool_nodes(api, pool)]
    plans = plan_cluster(facts, [parse_policy(policy("floor", pool))]).patches
    await quiet_machine(n, limit=quiet_limit)
    offset = cluster.audit_offset()
    cpu0, machine0 = cpu_seconds(apiserver), machine_cpu_seconds()
    as_operator = await Credentials(kubeconfig=str(kubeconfig)).client(pool_size=CONCURRENCY + 8)
    async with as_operator:
        writer = floor_writes(as_operator, pool, plans)
        seconds, began = await phase(
            f"floor over {n} nodes",
            converge_deadline(n),
            lambda progress: converge(api, pool, n, writer, progress),
        )
    api_cpu, machine = cpu_seconds(apiserver) - cpu0, machine_cpu_seconds() - machine0
    writes = node_patches(cluster, OPERATOR_USER, offset, names)
    log(f"floor over {n} nodes, other requests: {other_requests(cluster, offset, names)}")
    await phase(f"deleting {n} floor nodes", 60 + n * 0.1, lambda _: delete_nodes(api, names))
    return Run(seconds, began, writes, 0.0, api_cpu, machine)


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
    run(lambda: main(*sizes_and_orders(sys.argv[1:], [500, 1000])))

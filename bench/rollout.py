"""Rollout throughput per transition, against a floor measured in the same run.

For N simulated GPU nodes (kwok; 8 x A100-SXM4-80GB each by default), each with a node agent on
the fake nvidia-smi (its calls made to take the time of their kind: vgpu_devcluster.
fakesmi_latency, `--smi-latency`) and one GPU pod, and for each transition:

- `hami-mig`: hami-core to dynamic mig (the agent turns MIG on: a mode change per GPU);
- `layout`: a static MIG layout change ({3g.40gb, 2g.20gb, 2 x 1g.10gb} to {3g.40gb,
  4 x 1g.10gb} on every GPU: the agent destroys and creates instances);
- `whole-hami`: whole-gpu to hami-core (nothing changes on the hardware);
- `leave`: a static MIG pool's policy deleted (`onDelete: Delete`): every node leaves, parked at
  whole-gpu (the agent turns MIG off),

the pool's policy with `maxUnavailable: 10%` and the chart's other defaults (drain by eviction)
is brought to the start configuration (untimed: created, every node released and reported by
its agent), then moved to the target by `vgpu-operator run` in its own process, timed from the
policy's change until a watch has seen every node through its transition (cordon to uncordon).
Then the floor: the same number of nodes of its own, brought to the same start, then moved by a
bare client replaying the operator's own writes of that transition from the audit log, waiting
only where the operator waited for the pod or the agent (bench/rollout_floor.py says exactly
what). Both runs are timed by the same watches (bench/rollout_watch.py), which also give each
node's time in each phase (median and 90th percentile), the pod's termination, the agent's apply
and the writer's own share: the node's transition less those two waits.

The agents: one `vgpu-operator agent` process per node up to 100 nodes, above that one process
running an agent per node (`--agents` to choose; bench/rollout_agents.py). The agents' CPU and
their fake nvidia-smi's are reported apart, with the operator's (its process and its rules
worker), the apiserver's and the whole machine's. No Volcano or HAMi plugin is installed: no
plugin pod is waited for and no registration verified (docs/benchmarks.md).

Usage: python bench/rollout.py [--agents processes|swarm] [--gpus G] [--smi-latency TEXT]
                               [--transitions KEY,...] N
One command, one table (N and the way the agents run are in its heading). Node leases,
deadlines and clean exits: bench/benchkit.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from benchkit import CONCURRENCY, CpuWindow, bench_cluster, log, machine, phase, run
from convergence import OperatorProcess, cpu_seconds, idle, quiet_machine, tree_cpu_seconds
from importkit import commit, versions
from operator_pace import pace
from rollout_agents import Agents, Way, export_latency
from rollout_floor import for_floor, recorded, replay, taken
from rollout_group import (
    NAMESPACE,
    NODE_MODEL,
    Group,
    create_group,
    delete_group,
    namespace,
    node_uids,
    place_pods,
    wait_configured,
)
from rollout_table import Side, side_table, table
from rollout_transitions import MAX_UNAVAILABLE, TRANSITIONS, Transition, change, policy_body
from rollout_watch import GroupWatch, RunStats
from vgpu_devcluster.cluster import LocalCluster, free_port
from vgpu_devcluster.fakesmi_latency import REALISTIC, SmiLatency
from vgpu_devcluster.install import (
    OPERATOR_NAMESPACE,
    OPERATOR_USER,
    install_agent_access,
    install_operator_access,
)
from vgpu_operator import kubeapi
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.policy_rollout import max_unavailable_count


@dataclass
class Bench:
    api: Any  # the admin's client: setup and the watches
    cluster: LocalCluster
    operator_kubeconfig: Path  # the operator's ServiceAccount, its writes' bodies audited
    floor_kubeconfig: Path  # the operator's ServiceAccount (its token): the floor's client
    agent_kubeconfig: Path
    n: int
    gpus: int
    way: Way
    latency: SmiLatency
    quiet: bool = True  # each run starts once the machine is quiet (bench/convergence.py)

    @property
    def budget(self) -> int:
        return max_unavailable_count(MAX_UNAVAILABLE, self.n)

    @property
    def workdir(self) -> Path:
        return self.cluster.workdir / "bench-rollout"

    def per_node(self) -> float:
        """A generous bound of one node's agent work, in seconds."""
        lat = self.latency
        return 30 + self.gpus * (lat.mode + 4 * (lat.create + lat.destroy) + 10 * lat.query)

    def setup_deadline(self) -> float:
        """Every node at once: bound by the fake's CPU (a Python process per call, about a
        hundred calls per node and apply on 8 GPUs), about 3 s per node on two cores."""
        return 300 + self.per_node() + self.n * 3.0

    def run_deadline(self) -> float:
        waves = -(-self.n // self.budget)
        return 600 + 3 * waves * self.per_node() + self.n * 3.0

    def agents(self, group: Group, t: Transition) -> Agents:
        return Agents(
            self.way,
            self.agent_kubeconfig,
            group.nodes,
            self.workdir / group.name,
            model=NODE_MODEL,
            gpus=self.gpus,
            mig=t.mig,
            latency=self.latency,
        )


@dataclass
class Recorded:
    setup: dict[str, list[Any]]  # the operator's writes bringing each node to the start
    writes: dict[str, list[Any]]  # its writes of the transition
    order: list[str]  # its nodes as it took them
    uids: dict[str, str]


def cpu_window(b: Bench, agents: Agents, operator: int | None) -> CpuWindow:
    """The run's CPU columns (bench/rollout_table.py): the writer (the operator with its rules
    worker; None for the floor, the benchmark's own process), the apiserver, the agents (None
    inline) and their fake nvidia-smi calls, and the whole machine."""
    apiserver = b.cluster.pids["kube-apiserver"]
    return CpuWindow(
        {
            "writer": lambda: None if operator is None else tree_cpu_seconds(operator),
            "apiserver": lambda: cpu_seconds(apiserver),
            "agents": lambda: agents.cpu()[0],
            "fake": lambda: agents.cpu()[1],
        }
    )


async def policy_gone(api: Any, name: str, progress: Callable[[str], None]) -> None:
    with contextlib.suppress(kubeapi.NotFound):
        await kubeapi.request(api, "DELETE", kubeapi.policy_path(name))
    while True:
        try:
            await kubeapi.request(api, "GET", kubeapi.policy_path(name))
        except kubeapi.NotFound:
            return
        progress(f"the policy {name} to be gone (the operator's finalizer)")
        await asyncio.sleep(0.5)


async def operator_side(b: Bench, t: Transition) -> tuple[Side, Recorded]:
    group, name = Group(f"{t.key}-op", b.n, b.gpus), f"bench-{t.key}"
    # The operator loads while its group is made (set-up: the clock starts once it is idle).
    port = free_port()  # its metrics: the passes' durations (operator_pace)
    logfile = b.cluster.workdir / "bench-operator.log"
    operator = OperatorProcess(b.operator_kubeconfig, logfile, ("--metrics-port", str(port)))
    agents = b.agents(group, t)
    try:
        await phase(
            f"{group.name}: {b.n} nodes", 300 + b.n, lambda p: create_group(b.api, group, p)
        )
        await agents.start()
        await phase("operator start-up", 300 + b.n * 0.05, operator.wait_first_pass)
        offset = b.cluster.audit_offset()
        body = policy_body(name, group, t)
        await kubeapi.request(b.api, "POST", kubeapi.policy_path(), body=body, field_manager=None)
        mode = t.start["mode"]
        await phase(
            f"{group.name}: the start ({mode})",
            b.setup_deadline(),
            lambda p: wait_configured(b.api, group, mode, p),
        )
        setup, _ = recorded(b.cluster, OPERATOR_USER, offset, set(group.nodes))
        uids = await node_uids(b.api, group)
        await phase(
            f"{group.name}: GPU pods",
            120 + b.n * 0.2,
            lambda p: place_pods(b.api, group, t.resource, p),
        )
        pid = operator.proc.pid
        await phase("operator idle", 120 + b.n * 0.05, lambda p: idle(pid, p))
        if b.quiet:
            await quiet_machine(b.n)
        watch = GroupWatch(b.api, group.selector, NAMESPACE, group.nodes)
        async with watch.running(), aiohttp.ClientSession() as session:
            offset = b.cluster.audit_offset()
            cpu, before = cpu_window(b, agents, pid), await pace(session, port, pid)
            watch.begin()
            await change(b.api, name, t)
            seconds = await phase(
                f"{t.key}: the operator over {b.n} nodes", b.run_deadline(), watch.until_ended
            )
            used = cpu.done()
            log(f"{t.key}: the operator: {(await pace(session, port, pid) - before).text()}")
        await asyncio.sleep(2)  # the last Events (posted without waiting) reach the log
        writes, others = recorded(b.cluster, OPERATOR_USER, offset, set(group.nodes))
        log(f"{t.key}: the operator's writes not replayed by the floor: {dict(others) or 'none'}")
        stats = RunStats.of(seconds, watch.timelines)
        count = sum(len(w) for w in writes.values())
        side = Side("operator", stats, count / b.n, used)
        return side, Recorded(setup, writes, taken(writes), uids)
    finally:
        await agents.stop_async()
        await phase(
            f"{group.name}: deleting", 120 + b.n * 0.2, lambda _: delete_group(b.api, group)
        )
        try:
            await phase(f"{name}: deleting", 120, lambda p: policy_gone(b.api, name, p))
        finally:
            operator.stop()


async def floor_side(b: Bench, t: Transition, rec: Recorded) -> Side:
    group = Group(f"{t.key}-fl", b.n, b.gpus)
    await phase(f"{group.name}: {b.n} nodes", 300 + b.n, lambda p: create_group(b.api, group, p))
    agents = b.agents(group, t)
    try:
        await agents.start()
        uids = await node_uids(b.api, group)
        names = {
            op: {op: fl, rec.uids[op]: uids[fl]}
            for op, fl in zip(sorted(rec.uids), group.nodes, strict=True)
        }
        client = await Credentials(kubeconfig=str(b.floor_kubeconfig)).client(
            pool_size=CONCURRENCY + 8
        )
        async with client:
            setup = for_floor(rec.setup, sorted(rec.uids), names)
            await phase(
                f"{group.name}: replaying the setup",
                120 + b.n * 0.5,
                lambda _: replay(client, setup, CONCURRENCY),
            )
            mode = t.start["mode"]
            await phase(
                f"{group.name}: the start ({mode})",
                b.setup_deadline(),
                lambda p: wait_configured(b.api, group, mode, p),
            )
            await phase(
                f"{group.name}: GPU pods",
                120 + b.n * 0.2,
                lambda p: place_pods(b.api, group, t.resource, p),
            )
            if b.quiet:
                await quiet_machine(b.n)
            watch = GroupWatch(b.api, group.selector, NAMESPACE, group.nodes)
            writes = for_floor(rec.writes, rec.order, names)

            async def go(progress: Callable[[str], None]) -> float:
                await replay(client, writes, b.budget, watch)
                return await watch.until_ended(progress)

            async with watch.running():
                cpu = cpu_window(b, agents, None)
                watch.begin()
                seconds = await phase(f"{t.key}: the floor over {b.n} nodes", b.run_deadline(), go)
                used = cpu.done()
        count = sum(len(w) for w in writes.values())
        return Side("floor", RunStats.of(seconds, watch.timelines), count / b.n, used)
    finally:
        await agents.stop_async()
        await phase(
            f"{group.name}: deleting", 120 + b.n * 0.2, lambda _: delete_group(b.api, group)
        )


async def measure(
    b: Bench, keys: list[str], done: Callable[[str], None] | None = None
) -> list[tuple[Transition, Side, Side]]:
    """Each transition's operator side, then its floor; `done` is given the operator's row as
    its side ends and the transition's rows as the floor's ends, so a run stopped early, or
    whose floor fails, keeps what it measured."""
    results = []
    for key in keys:
        t = TRANSITIONS[key]
        op, rec = await operator_side(b, t)
        if done is not None:
            done(side_table(key, op))
        floor = await floor_side(b, t, rec)
        results.append((t, op, floor))
        if done is not None:
            done(table(results[-1:]))
    return results


async def prepare(cluster: LocalCluster, api: Any) -> tuple[Path, Path, Path]:
    """The chart's accounts: (the operator's audited kubeconfig, its token's, the agent's)."""
    operator = await install_operator_access(api, cluster.workdir)
    agent = await install_agent_access(api, cluster.workdir)
    assert operator.kubeconfig is not None and agent.kubeconfig is not None
    audited = cluster.request_audited_kubeconfig(
        "rollout-operator",
        OPERATOR_USER,
        ("system:serviceaccounts", f"system:serviceaccounts:{OPERATOR_NAMESPACE}"),
    )
    await phase("namespace", 60, lambda p: namespace(api, p))
    return audited, Path(operator.kubeconfig), Path(agent.kubeconfig)


async def heading(b: Bench) -> str:
    version = await kubeapi.request(b.api, "GET", "/version")
    return "\n".join(
        [
            f"Rollout throughput, N = {b.n} nodes x {b.gpus} {NODE_MODEL}, maxUnavailable "
            f"{MAX_UNAVAILABLE} = {b.budget} nodes, one GPU pod per node, agents: {b.way}",
            f"Machine: {machine()}; commit {commit()}",
            f"Versions: {versions(['aiohttp', 'kubernetes-asyncio', 'kopf', 'pydantic'])}, "
            f"kube-apiserver {version.get('gitVersion')}",
            f"Fake nvidia-smi seconds per call: {b.latency.text()} (assumed orders of "
            "magnitude: docs/benchmarks.md)",
        ]
    )


async def smoke(cluster: LocalCluster, api: Any) -> str:
    """The smallest run, for the tests (tests/cluster/test_bench_smoke.py): `hami-mig` on one
    node of 1 GPU, agents in this process, no latency, no wait for a quiet machine; checks
    the table has an operator, a floor and a ratio row for it, every node through; returns the
    table."""
    paths = await prepare(cluster, api)
    b = Bench(api, cluster, *paths, n=1, gpus=1, way="inline", latency=SmiLatency(), quiet=False)
    results = await measure(b, ["hami-mig"])
    text = f"{await heading(b)}\n{table(results)}"
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()]
    for side in ("operator", "floor", "operator/floor"):
        assert any(r[:2] == ["hami-mig", side] for r in rows), f"no {side} row:\n{text}"
    for _, *sides in results:
        for s in sides:
            assert s.stats.nodes == b.n and s.stats.failed == 0, text
            assert "Applying" in s.stats.steps and s.writes > 0, text
    return text


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/rollout.py", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("n", type=int, help="nodes per group (one group per side and transition)")
    parser.add_argument(
        "--agents",
        choices=("processes", "swarm"),
        help="default: processes up to 100 nodes, else swarm",
    )
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument(
        "--smi-latency",
        type=SmiLatency.parse,
        default=REALISTIC,
        help=f"seconds per fake nvidia-smi call kind (default {REALISTIC.text()})",
    )
    parser.add_argument(
        "--transitions",
        default=",".join(TRANSITIONS),
        help=f"comma-separated, of {', '.join(TRANSITIONS)}",
    )
    args = parser.parse_args(argv)
    unknown = [k for k in args.transitions.split(",") if k not in TRANSITIONS]
    if unknown:
        parser.error(
            f"--transitions: unknown {', '.join(unknown)}; known: {', '.join(TRANSITIONS)}"
        )
    if args.n < 1 or args.gpus < 1:
        parser.error("N and --gpus must be at least 1")
    return args


async def main(args: argparse.Namespace) -> None:
    way: Way = args.agents or ("processes" if args.n <= 100 else "swarm")
    export_latency(args.smi_latency)  # agent processes pass it on to their nvidia-smi
    log(f"machine: {machine()}")
    with bench_cluster() as cluster:
        api = await Credentials(kubeconfig=str(cluster.kubeconfig)).client(
            pool_size=CONCURRENCY + 8
        )
        async with api:
            paths = await prepare(cluster, api)
            b = Bench(
                api, cluster, *paths, n=args.n, gpus=args.gpus, way=way, latency=args.smi_latency
            )
            head = await heading(b)
            print(head, flush=True)
            results = await measure(
                b, args.transitions.split(","), lambda rows: log(f"measured:\n{rows}")
            )
            print(table(results), flush=True)


if __name__ == "__main__":
    run(lambda: main(arguments(sys.argv[1:])))

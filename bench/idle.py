"""Idle silence, one run, one table: what the operator and its node agents send the apiserver
when nothing changes.

N kwok nodes (default 1,000) in one pool, an agent per node and the operator running:
- the agents run as one process running N agents (`python -m vgpu_devcluster.agentswarm`: one
  `agent.loop.Agent` per node, each with its own client and Node watch, on the fake
  nvidia-smi), under the chart's agent ServiceAccount and RBAC (`install_agent_access`; the
  agent's own-node admission policy is not installed: it admits tokens bound to a pod on the
  node, and kwok nodes run no agent pod). N agent processes would need about 60 MiB each;
- the operator runs as in bench/convergence.py (`vgpu-operator run` in its own process, the
  chart's ServiceAccount and RBAC, its built-in configuration), with the chart's leader election
  (`--leader-elect`, its default durations: a Lease renewal every 2 s).
A `hami-core` policy over the pool; once every node carries its taint and its agent's state
`success`, and the operator (with its rules worker) has used under 5 % of a core for 2 s, and
neither it nor the agents have written (Lease renewals aside) for 20 s, and `--settle` seconds more
(default 30), the window opens: `--minutes` (default 10) in which nothing changes. The agents are
not waited for: each resyncs every 300 s (`AgentOptions.resync`: it reads its Node and its GPUs
again, and writes nothing when nothing changed), so N agents started together keep one process busy
with N / 300 resyncs a second, each a few fake nvidia-smi processes; that is their idle state, and
the window measures it. Its requests come from the apiserver's audit log, which logs every write
and every read of the operator's namespace's ServiceAccounts (vgpu_devcluster/cluster.py
AUDIT_POLICY), each request once (the first stage logged of its auditID), received in the window:
the writes per identity, verb and resource (the operator's Lease renewals apart; the goal is no
other write), the reads per minute per identity, verb and resource, and the CPU seconds each
process spent in the window (its live processes and the children it reaped: the operator's rules
worker, the agents' nvidia-smi calls), with the apiserver's and the machine's.

Node leases, deadlines and clean exits: bench/benchkit.py.

Usage: python bench/idle.py [--nodes N] [--minutes M] [--settle S]   (default: 1000 10 30)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from benchkit import (
    CONCURRENCY,
    GRACE,
    LEASE_SECONDS,
    CpuWindow,
    Progress,
    bench_cluster,
    cpu_with_reaped,
    create_nodes,
    delete_nodes,
    log,
    machine,
    phase,
    run,
    stamp,
)
from convergence import (
    OperatorProcess,
    idle_deadline,
    node_deadline,
    policy,
    received,
    startup_deadline,
)
from convergence import idle as went_idle
from vgpu_devcluster import auditlog
from vgpu_devcluster.agentswarm import SwarmProcess
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import (
    AGENT_USER,
    OPERATOR_NAMESPACE,
    OPERATOR_USER,
    install_agent_access,
    install_operator_access,
)
from vgpu_devcluster.nodes import NodeSpec
from vgpu_operator import contract, kubeapi
from vgpu_operator.kubeapi.credentials import Credentials

POOL = "idle"
POLICY = "bench-idle"
MODEL = "A100-SXM4-80GB"
WRITES = ("create", "update", "patch", "delete", "deletecollection")
READS = ("get", "list", "watch")
# The chart's leader election (charts/vgpu-operator/values.yaml `leaderElection`: its durations
# are the command's defaults, 15 s, 10 s and a renewal every 2 s).
LEADER_ARGS = ("--leader-elect", f"--leader-elect-namespace={OPERATOR_NAMESPACE}")
WHO = {OPERATOR_USER: "operator", AGENT_USER: "agents"}
WRITES_QUIET = 20.0  # seconds with no write before the settle time and the window


@dataclass
class Window:
    n: int
    seconds: float
    requests: list[dict[str, Any]]  # the operator's and the agents', received in the window
    cpu: dict[str, float]  # "operator", "agents", "apiserver", "machine": CPU s in the window

    def count(self, who: str, verbs: tuple[str, ...], lease: bool | None = None) -> int:
        return sum(
            1
            for e in self.requests
            if WHO[e["user"]["username"]] == who
            and e["verb"] in verbs
            and (lease is None or (resource(e) == "leases") == lease)
        )

    def per_minute(self, count: int) -> float:
        return count * 60 / self.seconds


def resource(event: dict[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    return "/".join(filter(None, (ref.get("resource"), ref.get("subresource"))))


def converge_deadline(n: int) -> float:
    """Seconds for the policy's PATCHes and every agent's first apply (each fake nvidia-smi
    call is a Python process: two cores start a few dozen a second)."""
    return 300 + n * 0.6


async def converged(api: Any, n: int, progress: Progress) -> None:
    """Until every node of the pool carries the policy's taint and its agent's `success`."""
    while True:
        listing = await kubeapi.list_all(
            api, kubeapi.node_path(), kubeapi.WatchOptions(label_selector=f"bench/pool={POOL}")
        )
        tainted = done = 0
        for node in listing.items:
            taints = (node.get("spec") or {}).get("taints") or []
            labels = node["metadata"].get("labels") or {}
            if any(t.get("key") == contract.DEFAULT_TAINT_KEY for t in taints):
                tainted += 1
                done += labels.get(contract.LABEL_STATE) == "success"
        progress(f"every node tainted ({tainted}/{n}) and its agent's `success` ({done}/{n})")
        if done >= n:
            return
        await asyncio.sleep(2)


async def writes_settled(cluster: LocalCluster, quiet: float, progress: Progress) -> None:
    """Until neither the operator nor the agents have written (Lease renewals aside) for `quiet`
    seconds, read off the audit log as it grows: the operator sends its findings' Events 20
    every 2 s after the pass that found them, so findings on every node are still being sent
    for minutes after convergence."""
    offset, last, writes = cluster.audit_offset(), time.monotonic(), 0
    while (still := time.monotonic() - last) < quiet:
        progress(f"{quiet - still:.0f}s with no write to go ({writes} since convergence)")
        await asyncio.sleep(2)
        lines, offset = auditlog.whole_lines(cluster.audit_log, offset)
        for line in lines:
            e = json.loads(line)
            if (
                e.get("user", {}).get("username") in WHO
                and e.get("verb") in WRITES
                and resource(e) != "leases"
                and e.get("stage") == "ResponseComplete"
            ):
                last, writes = time.monotonic(), writes + 1


def window_requests(
    cluster: LocalCluster, offset: int, began: float, ended: float
) -> list[dict[str, Any]]:
    """The operator's and the agents' requests received in [began, ended), each once."""
    seen: set[str] = set()
    found = []
    for e in cluster.audit_events(offset=offset, reads=True):
        if e.get("user", {}).get("username") not in WHO or e.get("auditID") in seen:
            continue
        seen.add(str(e.get("auditID")))
        if began <= received(e) < ended:
            found.append(e)
    return found


async def observe(
    cluster: LocalCluster,
    operator: OperatorProcess,
    agents: SwarmProcess,
    n: int,
    seconds: float,
    progress: Progress,
) -> Window:
    pids = {
        "operator": operator.proc.pid,
        "agents": agents.pid,
        "apiserver": cluster.pids["kube-apiserver"],
    }
    offset = cluster.audit_offset()
    window = CpuWindow({k: partial(cpu_with_reaped, p) for k, p in pids.items()})
    began, start = time.time(), time.monotonic()
    while (left := seconds - (time.monotonic() - start)) > 0:
        for whose, proc in (("the operator's", operator.proc), ("the agents'", agents.proc)):
            if proc.poll() is not None:
                raise RuntimeError(f"{whose} process exited ({proc.returncode}) in the window")
        progress(f"the idle window to end ({left:.0f}s left)")
        await asyncio.sleep(min(left, 5.0))
    ended = time.time()
    cpu = {k: v for k, v in window.done().items() if v is not None}
    await asyncio.sleep(1)  # the requests under way at the end reach the log
    return Window(n, ended - began, window_requests(cluster, offset, began, ended), cpu)


async def release(api: Any, n: int, progress: Progress) -> None:
    """The policy deleted and gone (the operator releases its nodes and lets go of it)."""
    with contextlib.suppress(kubeapi.NotFound):
        await kubeapi.request(api, "DELETE", kubeapi.policy_path(POLICY))
    while True:
        try:
            await kubeapi.request(api, "GET", kubeapi.policy_path(POLICY))
        except kubeapi.NotFound:
            return
        progress(f"the policy {POLICY} to be gone (its {n} nodes released)")
        await asyncio.sleep(1)


async def idle_run(
    api: Any,
    cluster: LocalCluster,
    operator_kubeconfig: Path,
    agent_kubeconfig: Path,
    n: int,
    seconds: float,
    settle: float,
    *,
    clean: bool = False,
) -> Window:
    """The pool, its agents, the operator and the policy; then the window. `clean`: the policy
    released and the nodes deleted afterwards (a shared control plane: the smoke test)."""
    specs = [NodeSpec(f"{POOL}-{i}", MODEL, 8, labels={"bench/pool": POOL}) for i in range(n)]
    names = {s.name for s in specs}
    await phase(f"{n} nodes", node_deadline(n), lambda p: create_nodes(api, specs, p))
    workdir = cluster.workdir / "bench-agents"
    agents = SwarmProcess(
        agent_kubeconfig, sorted(names), workdir, workdir.with_suffix(".log"), model=MODEL
    )
    operator: OperatorProcess | None = None
    try:
        # Both start at once (set-up, not measured): their interpreters load side by side.
        log_path = cluster.workdir / "bench-operator.log"
        operator = OperatorProcess(operator_kubeconfig, log_path, LEADER_ARGS)
        await phase(f"{n} agents in one process", 120 + n * 0.2, agents.wait_ready)
        await phase("operator start-up", startup_deadline(n), operator.wait_first_pass)
        body = policy(POLICY, POOL)
        await kubeapi.request(api, "POST", kubeapi.policy_path(), body=body, field_manager=None)
        await phase(
            f"convergence of {n} nodes", converge_deadline(n), lambda p: converged(api, n, p)
        )
        running = operator

        await phase("the operator idle", idle_deadline(n), lambda p: went_idle(running.proc.pid, p))
        await phase(
            "the last write after convergence",
            120 + n * 0.5,
            lambda p: writes_settled(cluster, WRITES_QUIET, p),
        )
        log(f"converged and idle; {settle:g}s more before the window")
        await asyncio.sleep(settle)
        window = await phase(
            f"the idle window ({seconds:g}s)",
            seconds + 60,
            lambda p: observe(cluster, running, agents, n, seconds, p),
        )
        if clean:
            await phase("the policy released", 120 + n * 0.2, lambda p: release(api, n, p))
        return window
    finally:
        if operator is not None:
            operator.stop()
        agents.stop()
        if clean:
            await phase(f"deleting {n} nodes", 60 + n * 0.1, lambda _: delete_nodes(api, names))


def table(w: Window) -> str:
    """The summary per identity, then each request kind per identity and minute."""
    minutes = w.seconds / 60
    lines = [
        f"Idle window {w.seconds:.0f} s ({minutes:.1f} min), {w.n:,} nodes; the agents: "
        f"{w.n:,} agents in one process (vgpu_devcluster.agentswarm); the operator with "
        "leader election (a Lease renewal every 2 s)",
        "",
        "| identity | writes other than Lease renewals (goal 0) | Lease renewals | reads | "
        "reads per minute | CPU s in the window | % of a core |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for user, who in WHO.items():
        reads = w.count(who, READS)
        cpu = w.cpu[who]
        lines.append(
            f"| {who} ({user}) | {w.count(who, WRITES, lease=False)} | "
            f"{w.count(who, WRITES, lease=True)} | {reads} | {w.per_minute(reads):.1f} | "
            f"{cpu:.2f} | {100 * cpu / w.seconds:.2f} |"
        )
    lines += [
        "",
        f"The apiserver used {w.cpu['apiserver']:.1f} CPU s in the window, the whole machine "
        f"{w.cpu['machine']:.1f}.",
        "",
        "| identity | verb | resource | code | requests | per minute |",
        "|---|---|---|---:|---:|---:|",
    ]
    kinds = Counter(
        (
            WHO[e["user"]["username"]],
            e["verb"],
            resource(e),
            (e.get("responseStatus") or {}).get("code", 0),
        )
        for e in w.requests
    )
    for (who, verb, res, code), count in sorted(kinds.items(), key=lambda kv: (kv[0][0], -kv[1])):
        lines.append(f"| {who} | {verb} | {res} | {code} | {count} | {w.per_minute(count):.1f} |")
    if not kinds:
        lines.append("| (none) | | | | 0 | 0.0 |")
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--nodes", type=int, default=1000, help="nodes, each with its agent")
    p.add_argument("--minutes", type=float, default=10.0, help="the idle window's length")
    p.add_argument("--settle", type=float, default=30.0, help="seconds after idle, before it")
    args = p.parse_args(argv)
    if args.nodes < 1 or args.minutes <= 0 or args.settle < 0:
        p.error("--nodes must be at least 1, --minutes above 0, --settle at least 0")
    return args


async def main(args: argparse.Namespace) -> None:
    log(f"machine: {machine()}")
    window: Window | None = None
    try:
        with bench_cluster() as cluster:
            admin = Credentials(kubeconfig=str(cluster.kubeconfig))
            api = await admin.client(pool_size=CONCURRENCY + 8)
            async with api:
                operator = await install_operator_access(api, cluster.workdir)
                agent = await install_agent_access(api, cluster.workdir)
                assert operator.kubeconfig is not None and agent.kubeconfig is not None
                window = await idle_run(
                    api,
                    cluster,
                    Path(operator.kubeconfig),
                    Path(agent.kubeconfig),
                    args.nodes,
                    args.minutes * 60,
                    args.settle,
                )
    finally:
        print(f"\n{stamp()}\nNode leases {LEASE_SECONDS}s, grace {GRACE}\n")
        print(table(window) if window else "not completed", flush=True)


if __name__ == "__main__":
    run(lambda: main(parse(sys.argv[1:])))

"""Kopf or the informer, kind by kind: the figures behind which watch of the controller is Kopf's
and which its own (docs/architecture.md).

One local control plane with N kwok nodes and 10 x N running pods (bench/scale.py's pool and
workload: a tenth of the pods hold GPUs), the scheduler's ConfigMap and a DaemonSet. Then, for
each kind the controller watches, one after the other, each in a process of its own
(bench/watch_kind.py): Kopf with one `@kopf.index` keeping what the controller keeps of the kind
(filtered with the same predicate, on the client: Kopf has no server-side selection per
handler), and the controller's own informer (server-side selectors where the controller uses
them, listings reduced page by page). For each: the time from the process's start to holding
the listing, its CPU seconds until then, and its resident memory (peak beside it) 5 s later.

Usage: python bench/kopf_or_informer.py [N]   (default: 5000, so 50,000 pods)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchkit import (
    CONCURRENCY,
    PhaseTimeout,
    Progress,
    arguments,
    bench_cluster,
    die_with_parent,
    log,
    machine,
    memory,
    phase,
    run,
)
from scale import PODS_PER_NODE, populate
from vgpu_devcluster.cluster import LocalCluster
from vgpu_operator import kubeapi
from vgpu_operator.kubeapi.credentials import Credentials

SETTLE = 5.0
LIMIT = 900.0  # seconds a watcher may take to hold its listing
CONFIGMAP = ("volcano-system", "volcano-scheduler-configmap")
KINDS = ("nodes", "pods", "daemonsets", "configmaps")  # what the controller watches
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Watcher:
    kind: str
    impl: str
    kept: int
    seconds: float  # start to holding the listing
    cpu: float  # CPU seconds until then
    rss: float
    peak: float


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def spawn(args: list[str], errors: Any, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=errors, env=env, preexec_fn=die_with_parent
    )


async def measure(
    kubeconfig: Path, workdir: Path, impl: str, kind: str, expect: int, settle: float = SETTLE
) -> Watcher:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    args = [sys.executable, str(Path(__file__).with_name("watch_kind.py"))]
    args += ["--impl", impl, "--kind", kind, "--expect", str(expect)]
    args += ["--name", "/".join(CONFIGMAP)]
    with (workdir / f"bench-watch-{impl}-{kind}.log").open("ab") as errors:
        began = time.monotonic()
        proc = spawn(args, errors, env)
        try:
            assert proc.stdout is not None
            loop = asyncio.get_running_loop()

            async def listed(progress: Progress) -> int:
                progress(f"{impl} to hold the {kind}")
                assert proc.stdout is not None
                while True:
                    line = await loop.run_in_executor(None, proc.stdout.readline)
                    if not line:
                        raise RuntimeError(f"{impl} watching {kind} exited ({proc.wait()})")
                    if line.startswith(b"listed "):
                        return int(line.split()[1])

            try:
                kept = await phase(f"{impl}: {kind}", LIMIT, listed)
            except PhaseTimeout:
                kept = -1  # not held within LIMIT: the row says so, the other kinds still run
            seconds = time.monotonic() - began
            cpu = cpu_seconds(proc.pid)
            await asyncio.sleep(settle)
            rss, peak = memory(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return Watcher(kind, impl, kept, seconds, cpu, rss, peak)


async def named_objects(api: Any) -> None:
    """The scheduler's ConfigMap, as the controller watches it by name, and one DaemonSet (each
    left as it is where it exists: a control plane shared with other benchmarks)."""
    namespace, name = CONFIGMAP
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    with contextlib.suppress(kubeapi.Conflict):
        await kubeapi.request(api, "POST", "/api/v1/namespaces", body=ns)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}}
    with contextlib.suppress(kubeapi.Conflict):
        await kubeapi.request(api, "POST", f"/api/v1/namespaces/{namespace}/configmaps", body=cm)
    labels = {"app": "plugin"}
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "plugin"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "p", "image": "example.com/p:1"}]},
            },
        },
    }
    with contextlib.suppress(kubeapi.Conflict):
        path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets"
        await kubeapi.request(api, "POST", path, body=ds)


def table(rows: list[Watcher]) -> str:
    lines = [
        "| kind | watcher | kept | s to hold the listing | CPU s | RSS MiB (peak) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        kept = f"{r.kept:,}" if r.kept >= 0 else "not held"
        held = f"{r.seconds:.1f}" if r.kept >= 0 else f"> {LIMIT:.0f}"
        lines.append(
            f"| {r.kind} | {r.impl} | {kept} | {held} | {r.cpu:.1f} | {r.rss:.0f} ({r.peak:.0f}) |"
        )
    return "\n".join(lines)


async def watchers(
    api: Any,
    cluster: LocalCluster,
    n: int,
    *,
    have_nodes: int = 0,
    have_pods: int = 0,
    settle: float = SETTLE,
    rows: list[Watcher] | None = None,
    kinds: tuple[str, ...] = KINDS,
) -> list[Watcher]:
    """The population grown to N nodes and 10 x N pods (bench/population.py `populate`, from what
    there is), the named objects, then each kind's two watchers, one after the other; each row
    is appended to `rows` (given: what was measured stays there if a later one fails); `kinds`:
    which of `KINDS` (the smoke test measures two)."""
    rows = [] if rows is None else rows
    pods = n * PODS_PER_NODE
    gpu_pods = sum(1 for i in range(pods) if i % 10 == 0)
    await populate(api, n, have_nodes, have_pods)
    await named_objects(api)
    daemonsets = len((await kubeapi.request(api, "GET", "/apis/apps/v1/daemonsets"))["items"])
    expected = {"nodes": n, "pods": gpu_pods, "daemonsets": daemonsets, "configmaps": 1}
    for kind in kinds:
        expect = expected[kind]
        for impl in ("kopf", "informer"):
            w = await measure(cluster.kubeconfig, cluster.workdir, impl, kind, expect, settle)
            rows.append(w)
            log(f"{kind} {impl}: {w}")
    return rows


async def main(n: int) -> None:
    log(f"machine: {machine()}")
    rows: list[Watcher] = []
    pods = n * PODS_PER_NODE
    gpu_pods = sum(1 for i in range(pods) if i % 10 == 0)
    try:
        with bench_cluster() as cluster:
            admin = Credentials(kubeconfig=str(cluster.kubeconfig))
            api = await admin.client(pool_size=CONCURRENCY + 8)
            async with api:
                await watchers(api, cluster, n, rows=rows)
    finally:
        print(f"\nMachine: {machine()}; N={n}, {pods:,} pods ({gpu_pods:,} holding GPUs)\n")
        print(table(rows), flush=True)


if __name__ == "__main__":
    run(lambda: main(int(words[0]) if (words := arguments(__doc__)) else 5000))

"""`vgpu-operator doctor` at scale, one run, one table: the time doctor takes over N nodes and
10 x N running pods (default 5,000 and 50,000), beside a floor measured in the same run.

The population is bench/population.py's (`populate`: its pool of kwok nodes, its workload pods, a
tenth holding GPUs). Then, one process at a time, each timed from its start to its exit:
- doctor as a user runs it: `vgpu-operator doctor --config FILE`, FILE the operator
  configuration the chart renders with its default values (charts/vgpu-operator/templates/
  configmap.yaml), so doctor reads exactly what the configuration names and looks nothing up;
- the floor, `bench/list_floor.py`: the same reads and nothing else (no kubernetes-asyncio, no
  pydantic, no rules), every list page by page with doctor's page size, every GET once, all at
  once over as many connections as doctor's client.
Both orders, doctor first and then the floor first, a row each; the goal is doctor at most
1.5 x the floor.

What doctor reads is taken from its code (commands/doctor.py `check` with `--config` and no
`auto`: controller/snapshot.py `read_snapshot` without the controller's watches, then the
VGPUNodePolicies, then the admission policies and bindings the configuration names), and
checked against the apiserver's audit log: both run as one client certificate (system:masters,
and the devcluster's group whose reads the audit policy logs, `AUDIT_READS_GROUP`), and the
table says whether the two sent the same requests (a list's `continue` token aside).

Node leases, deadlines and clean exits: bench/benchkit.py.

Usage: python bench/doctor_scale.py [N]   (default: 5000, so 50,000 pods)
"""

from __future__ import annotations

import asyncio
import compileall
import json
import resource
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import vgpu_operator
from benchkit import (
    GRACE,
    LEASE_SECONDS,
    Progress,
    arguments,
    bench_cluster,
    die_with_parent,
    log,
    machine,
    phase,
    run,
    stamp,
)
from scale import PODS_PER_NODE, populate
from vgpu_devcluster import kubeconfigs
from vgpu_devcluster.cluster import AUDIT_READS_GROUP, LocalCluster
from vgpu_devcluster.install import render_chart
from vgpu_operator import kubeapi
from vgpu_operator.controller import snapshot
from vgpu_operator.core.admission import verdict
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import OperatorConfig, load_config

BENCH = Path(__file__).resolve().parent
CLIENT = "bench-doctor"  # the user both run as (a client certificate)
GOAL = 1.5
DOCTOR_EXITS = (0, 1)  # nothing wrong; a rule found something (no Volcano here: it will)


@dataclass
class Run:
    who: str  # "doctor" or "floor"
    seconds: float  # from the process's start to its exit
    cpu: float  # its CPU seconds, with its children's (doctor's rules worker)
    requests: Counter[str]  # from the audit log, by `request_key`
    listed: dict[str, int] = field(default_factory=dict)  # the floor's: items per list
    inner: float = 0.0  # the floor's: first request to last answer, in its process


@dataclass
class Result:
    n: int
    pods: int
    orders: list[tuple[Run, Run]]  # (first, second) per order

    def pair(self, first: str) -> tuple[Run, Run]:
        """(doctor, floor) of the order that ran `first` first."""
        a, b = next(o for o in self.orders if o[0].who == first)
        return (a, b) if a.who == "doctor" else (b, a)


def chart_config(directory: Path) -> tuple[Path, OperatorConfig]:
    """The operator configuration the chart renders with its default values, as a file."""
    [configmap] = render_chart("configmap.yaml")
    text = configmap["data"]["config.yaml"]
    path = directory / "bench-doctor-config.yaml"
    path.write_text(text)
    return path, load_config(text)


def doctor_reads(config: OperatorConfig) -> dict[str, Any]:
    """What `doctor --config` reads under `config` (commands/doctor.py `check`), in the floor's
    request file's form: the lists (with doctor's page size) and the GETs."""
    if config.dra is not None:
        raise SystemExit("doctor_scale: the configuration has a `dra` section; the floor does not")
    page = {"limit": str(snapshot.PAGE)}
    dep = config.scheduler.deployment
    refs = [*snapshot.configmap_refs(config), *snapshot.read_only_configmap_refs(config)]
    gets = [snapshot.configmap_path(ns, name) for ns, name in refs]
    gets.append(snapshot.workload_path("Deployment", dep.namespace, dep.name))
    if config.admission_policies is not None and config.require_admission_policies:
        for name in config.admission_policies.names:
            gets += [f"{verdict.POLICIES_PATH}/{name}", f"{verdict.BINDINGS_PATH}/{name}"]
    lists = [
        ("/apis/apps/v1/daemonsets", page),
        (kubeapi.node_path(), page),
        ("/api/v1/pods", {**page, "fieldSelector": "status.phase!=Succeeded"}),
        (snapshot.CLAIMS_PATH, page),
        (kubeapi.policy_path(), {}),  # commands/doctor.py `read_policies`: one request
    ]
    return {"lists": lists, "gets": gets}


def request_key(event: dict[str, Any]) -> str:
    """`verb path?query` of an audit event, the query sorted and without `continue`."""
    url = urlsplit(str(event.get("requestURI", "")))
    query = sorted((k, v) for k, v in parse_qsl(url.query) if k != "continue")
    return f"{event.get('verb')} {url.path}" + (f"?{urlencode(query)}" if query else "")


def requests_since(cluster: LocalCluster, offset: int) -> Counter[str]:
    seen: set[str] = set()
    found: Counter[str] = Counter()
    for e in cluster.audit_events(user=CLIENT, offset=offset, reads=True):
        if e.get("auditID") in seen:
            continue
        seen.add(str(e.get("auditID")))
        found[request_key(e)] += 1
    return found


def client_certificate(cluster: LocalCluster) -> tuple[Path, Path, Path]:
    """(kubeconfig, certificate, key) of CLIENT: an admin whose reads the audit log keeps."""
    cert = cluster.issue_client_cert(CLIENT, CLIENT, ("system:masters", AUDIT_READS_GROUP))
    content = kubeconfigs.config(
        kubeconfigs.cluster_entry(cluster.server, cluster.ca_file),
        kubeconfigs.cert_files_user(cert.cert, cert.key),
        name=CLIENT,
        context=CLIENT,
    )
    path = kubeconfigs.write(cluster.workdir / f"kubeconfig-{CLIENT}", content)
    return path, cert.cert, cert.key


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_deadline(pods: int) -> float:
    return 120 + pods * 0.01


async def timed(
    argv: list[str], out: Path, pods: int, what: str
) -> tuple[float, float, int, bytes]:
    """(seconds, CPU seconds, exit status, stdout) of one process, its stderr to `out`."""
    with out.open("ab") as errors:
        cpu0 = children_cpu()
        began = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
            preexec_fn=die_with_parent,
        )
        try:

            async def finish(progress: Progress) -> bytes:
                progress(f"{what} to exit")
                stdout, _ = await proc.communicate()
                return stdout

            stdout = await phase(what, run_deadline(pods), finish)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        seconds = time.perf_counter() - began
    assert proc.returncode is not None
    return seconds, children_cpu() - cpu0, proc.returncode, stdout


def doctor_command() -> list[str]:
    """The console script installed beside this interpreter, as a user runs it."""
    script = shutil.which("vgpu-operator", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "vgpu_operator.commands.cli"]


async def doctor_run(cluster: LocalCluster, kubeconfig: Path, config: Path, pods: int) -> Run:
    offset = cluster.audit_offset()
    argv = [*doctor_command(), "doctor", "--kubeconfig", str(kubeconfig), "--config", str(config)]
    seconds, cpu, code, _ = await timed(
        argv, cluster.workdir / "bench-doctor.log", pods, f"doctor over {pods} pods"
    )
    if code not in DOCTOR_EXITS:
        tail = (cluster.workdir / "bench-doctor.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"doctor exited with {code}:\n{tail}")
    await asyncio.sleep(0.5)  # the audit log's last lines
    return Run("doctor", seconds, cpu, requests_since(cluster, offset))


async def floor_run(cluster: LocalCluster, cert: Path, key: Path, reads: Path, pods: int) -> Run:
    offset = cluster.audit_offset()
    argv = [sys.executable, str(BENCH / "list_floor.py"), f"server={cluster.server}"]
    argv += [f"ca={cluster.ca_file}", f"cert={cert}", f"key={key}", f"requests={reads}"]
    seconds, cpu, code, stdout = await timed(
        argv, cluster.workdir / "bench-list-floor.log", pods, f"the floor over {pods} pods"
    )
    if code != 0:
        tail = (cluster.workdir / "bench-list-floor.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the floor exited with {code}:\n{tail}")
    answer = json.loads(stdout.decode().strip().splitlines()[-1])
    await asyncio.sleep(0.5)
    return Run(
        "floor", seconds, cpu, requests_since(cluster, offset), answer["items"], answer["seconds"]
    )


async def measure(
    api: Any,
    cluster: LocalCluster,
    n: int,
    have_nodes: int = 0,
    have_pods: int = 0,
    *,
    firsts: tuple[str, ...] = ("doctor", "floor"),
) -> Result:
    """The population grown to N nodes and 10 x N pods (from what there is), then doctor and
    the floor in both orders (`firsts`: which runs first in each order; the smoke test runs
    one order)."""
    pods = n * PODS_PER_NODE
    await populate(api, n, have_nodes, have_pods)
    # The package's bytecode written first, as `pip install` does: a checkout just changed would
    # otherwise have its first doctor run compile every module it imports.
    compileall.compile_dir(str(Path(vgpu_operator.__file__).parent), quiet=1)
    config_path, config = chart_config(cluster.workdir)
    reads = cluster.workdir / "bench-doctor-reads.json"
    reads.write_text(json.dumps(doctor_reads(config)))
    kubeconfig, cert, key = client_certificate(cluster)
    orders: list[tuple[Run, Run]] = []
    for first in firsts:
        ran: list[Run] = []
        for who in (first, "floor" if first == "doctor" else "doctor"):
            if who == "doctor":
                ran.append(await doctor_run(cluster, kubeconfig, config_path, pods))
            else:
                ran.append(await floor_run(cluster, cert, key, reads, pods))
            log(f"{who}: {ran[-1].seconds:.2f}s, {ran[-1].cpu:.2f} CPU s")
        orders.append((ran[0], ran[1]))
    return Result(n, pods, orders)


def same_requests(doctor: Run, floor: Run) -> str:
    if doctor.requests == floor.requests:
        return f"yes ({sum(doctor.requests.values())} requests each)"
    only_doctor = doctor.requests - floor.requests
    only_floor = floor.requests - doctor.requests
    return (
        "no: doctor only "
        + (", ".join(f"{k} x{v}" for k, v in sorted(only_doctor.items())) or "-")
        + "; the floor only "
        + (", ".join(f"{k} x{v}" for k, v in sorted(only_floor.items())) or "-")
    )


def table(result: Result) -> str:
    lines = [
        f"| N nodes | pods | first | doctor s | floor s | ratio (goal <= {GOAL}) | doctor CPU s "
        "| floor CPU s | floor's listing s (in its process) | the same requests (audit log) |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for first in (order[0].who for order in result.orders):
        doctor, floor = result.pair(first)
        lines.append(
            f"| {result.n:,} | {result.pods:,} | {first} | {doctor.seconds:.2f} | "
            f"{floor.seconds:.2f} | {doctor.seconds / floor.seconds:.2f} | {doctor.cpu:.2f} | "
            f"{floor.cpu:.2f} | {floor.inner:.2f} | {same_requests(doctor, floor)} |"
        )
    doctor, floor = result.pair(result.orders[0][0].who)
    listed = ", ".join(f"{path} {count:,}" for path, count in floor.listed.items())
    lines += ["", f"Listed (the floor's count, {snapshot.PAGE} per page): {listed}"]
    return "\n".join(lines)


async def main(n: int) -> None:
    log(f"machine: {machine()}")
    result: Result | None = None
    try:
        with bench_cluster() as cluster:
            admin = Credentials(kubeconfig=str(cluster.kubeconfig))
            api = await admin.client(pool_size=40)
            async with api:
                result = await measure(api, cluster, n)
    finally:
        print(f"\n{stamp()}\nNode leases {LEASE_SECONDS}s, grace {GRACE}\n")
        print(table(result) if result else "not completed", flush=True)


if __name__ == "__main__":
    run(lambda: main(int(words[0]) if (words := arguments(__doc__)) else 5000))

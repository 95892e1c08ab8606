"""The node agent's cost, one run, one table: resident memory and CPU of an idle agent beside two
floors holding one Node watch, and what each of the agent's dependencies costs to import.

Processes, all started together and measured over the same idle window:
- floor, standard library only: `bench/watch_floor.py stdlib` (http.client, ssl, json);
- floor, aiohttp: `bench/watch_floor.py aiohttp` (one ClientSession);
- the agent: `python -m vgpu_operator.commands.cli agent` with the chart's arguments
  (charts/vgpu-operator/templates/agent-daemonset.yaml: resync, retry, nvidia-smi timeout,
  liveness endpoint, metrics port, text logs, `NODE_NAME` from the environment), the fake
  nvidia-smi the tests use (devtools/vgpu_devcluster/fakesmi.py: 8 A100-SXM4-80GB by default)
  and a released static MIG layout (seven 1g.10gb per GPU), which it applies first. No kubelet
  here: `--pod-resources-socket=` (empty). `--agent-tree LABEL=DIR` adds an agent run from
  another copy of the package (DIR holds `vgpu_operator/`, put first on PYTHONPATH): a before
  and an after measured in the same run.
Each is ready once its watch is open (the floors print `watching`; the agent has logged its
first outcome and, on the local server, holds a watch); then `--settle` seconds (default 5),
then the window: resident memory (VmRSS, with the peak VmHWM) at its end, and CPU as utime +
stime (+ children's) from /proc/<pid>/stat at both ends (1/CLK_TCK resolution, 10 ms here).

Imports: a fresh interpreter per row imports one dependency (or the agent's import set: the
modules `vgpu-operator agent` loads before it serves, as agent/cli.py's `run_agent` imports
them), and its VmRSS is compared with a bare interpreter's (the same code, nothing imported);
each the median of `--repeat` interpreters (default 3). The last column says whether the
agent's import set holds that package; grpc must not be there (the kubelet's PodResources call
runs as a subprocess of its own, agent/podresources_call.py), and the running agents' memory
maps are checked for grpc's extension too.

The control plane: by default a local HTTPS server in this process that answers as the
apiserver does for what these clients ask (GET, list and watch of Nodes with a field selector,
merge PATCH of a Node, POST of Events; a watch stays open, silent, until its timeoutSeconds)
with a bearer token; the agent logs in as in a pod, from a ServiceAccount directory
(`VGPU_SERVICEACCOUNT_DIR`, `KUBERNETES_SERVICE_HOST`/`PORT`: kubeapi/source.py's
in-cluster path). `--kubeconfig F --node N` measures against a real cluster instead: the
floors watch node N, the agents run with `--kubeconfig F` against N (it must exist).

The parts: the stand-in for the apiserver (bench/agent_cost_apiserver.py), the processes and
their readings (bench/agent_cost_processes.py); here, the import rows, the run and the report.

`--jobs J` measures J import rows at once (default 1): each row is its own interpreter's memory,
so only the time changes (the smoke test runs 2).

Usage: python bench/agent_cost.py [--idle S] [--settle S] [--repeat K] [--gpus N] [--jobs J]
                                  [--agent-tree LABEL=DIR ...] [--kubeconfig F --node N]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from agent_cost_apiserver import cluster_server, local_apiserver
from agent_cost_processes import GPU_MODEL, Measured, agent, floors, measure, wait_ready
from benchkit import log, machine
from importkit import ImportCost, commit, import_rss_rows, versions

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RELEASED = {
    "mode": "mig",
    "mig": {"partitioning": "static", "layout": [{"gpus": "all", "profiles": {"1g.10gb": 7}}]},
}
READY_SECONDS = 120.0  # each process must be ready within this

# One dependency per row, imported alone; then the agent's set. `vgpu_operator` first installs
# its lazy kubernetes-asyncio client (vgpu_operator/lazy_client.py), as in the agent.
DEPENDENCIES: list[tuple[str, list[str]]] = [
    ("aiohttp", ["aiohttp"]),
    ("pydantic", ["pydantic"]),
    ("prometheus_client", ["prometheus_client"]),
    ("kubernetes_asyncio (its own `__init__`: every API class and model)", ["kubernetes_asyncio"]),
    (
        "kubernetes_asyncio as `vgpu_operator` loads it (its lazy client, as the controller)",
        ["vgpu_operator", "kubernetes_asyncio.client.rest"],
    ),
    ("yaml (PyYAML)", ["yaml"]),
    ("grpc (grpcio)", ["grpc"]),
    ("kopf", ["kopf"]),
    ("aiohttp + pydantic + prometheus_client", ["aiohttp", "pydantic", "prometheus_client"]),
]
PACKAGES = {  # import name -> distribution, for the versions and the "in the set" column
    "aiohttp": "aiohttp",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic-core",
    "prometheus_client": "prometheus-client",
    "kubernetes_asyncio": "kubernetes-asyncio",
    "yaml": "PyYAML",
    "grpc": "grpcio",
    "kopf": "kopf",
}
# What `vgpu-operator agent` imports before it serves: the console script's parser as it is
# built for `agent` (`@cli agent`: vgpu_operator.commands.cli.main(["agent", "--help"]), its
# output dropped), then cmd_agent's and run_agent's imports (agent/cli.py), its metrics server
# included. A tree whose agent has its own standard-library client (`kubeapi/lite`) imports that;
# an older tree (`--agent-tree`) the controller's client, kubernetes-asyncio and prometheus_client.
AGENT_IMPORTS = [
    "@cli agent",
    "vgpu_operator.kubeapi.source",
    "vgpu_operator.kubeapi.lite",
    "vgpu_operator.logs",
    "vgpu_operator.endpoints",
    "vgpu_operator.health",
    "vgpu_operator.agent.kubelet",
    "vgpu_operator.agent.loop",
    "vgpu_operator.agent.nodeapi",
    "vgpu_operator.agent.smi",
    "vgpu_operator.agent.metrics",
]
AGENT_IMPORTS_KUBERNETES_ASYNCIO = [
    "@cli agent",
    "vgpu_operator.kubeapi.credentials",
    "vgpu_operator.logs",
    "vgpu_operator.health",
    "vgpu_operator.agent.kubelet",
    "vgpu_operator.agent.loop",
    "vgpu_operator.agent.nodeapi",
    "vgpu_operator.agent.smi",
    "vgpu_operator.kubeapi",
    "prometheus_client",
    "vgpu_operator.agent.metrics",
]


def agent_imports(tree: Path | None) -> list[str]:
    """The agent's import set for a tree (None: this checkout)."""
    package = (tree or REPO / "operator") / "vgpu_operator"
    lite = (package / "kubeapi" / "lite").is_dir()
    return AGENT_IMPORTS if lite else AGENT_IMPORTS_KUBERNETES_ASYNCIO


# --- the report -------------------------------------------------------------------------------


def report(
    processes: list[Measured],
    bare: float,
    deps: list[tuple[str, ImportCost]],
    agent_sets: list[tuple[str, ImportCost]],
    args: argparse.Namespace,
    control_plane: str,
) -> str:
    lines = [
        f"Date {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}",
        f"Machine: {machine()}",
        f"Versions: {versions(PACKAGES.values())}",
        f"Control plane: {control_plane}; settle {args.settle:g} s, idle window {args.idle:g} s, "
        f"import rows the median of {args.repeat} interpreters, {args.jobs} at once",
        "",
        "| process (idle) | RSS MiB | peak MiB | CPU s in the window | % of a core |",
        "|---|---:|---:|---:|---:|",
    ]
    for m in processes:
        cpu = m.cpu_end - m.cpu_start
        lines.append(
            f"| {m.label} | {m.rss:.1f} | {m.peak:.1f} | {cpu:.2f} | {100 * cpu / args.idle:.2f} |"
        )
    lines += [
        "",
        "| imported in a fresh interpreter | RSS MiB | over the bare interpreter MiB | "
        "in the agent's import set |",
        "|---|---:|---:|---|",
        f"| nothing (the bare interpreter) | {bare:.1f} | 0.0 | |",
    ]

    def held_by(root: str) -> str:
        """yes/no for this checkout's agent, then the other trees' in parentheses."""
        answers = [("yes" if root in c.modules else "no", label) for label, c in agent_sets]
        others = "".join(f" ({label}: {yes})" for yes, label in answers[1:])
        return f"{root}: {answers[0][0]}{others}" if answers else ""

    for label, cost in deps:
        roots = {m.split(".")[0] for m in cost.label.split(" + ")} - {"vgpu_operator"}
        held = ", ".join(held_by(r) for r in sorted(roots))
        lines.append(f"| {label} | {cost.rss:.1f} | {cost.rss - bare:.1f} | {held} |")
    for label, cost in agent_sets:
        lines.append(
            f"| the agent's import set ({label}) | {cost.rss:.1f} | {cost.rss - bare:.1f} | |"
        )
    mapped = [m.label for m in processes if m.grpc_mapped]
    lines += [
        "",
        "grpc's extension (cygrpc) mapped in: " + (", ".join(mapped) if mapped else "none"),
    ]
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--idle", type=float, default=30.0, help="seconds of the idle window")
    p.add_argument("--settle", type=float, default=5.0, help="seconds after ready, before it")
    p.add_argument("--repeat", type=int, default=3, help="interpreters per import row")
    p.add_argument("--gpus", type=int, default=8, help="GPUs of each agent's fake node")
    p.add_argument(
        "--agent-tree",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also run an agent from DIR (a directory holding vgpu_operator/)",
    )
    p.add_argument("--kubeconfig", type=Path, help="a real cluster instead of the local server")
    p.add_argument("--node", help="with --kubeconfig: the Node the floors and agents watch")
    p.add_argument("--no-imports", action="store_true", help="skip the import rows")
    p.add_argument("--jobs", type=int, default=1, help="import rows measured at once (default 1)")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.repeat < 1:
        p.error("--jobs and --repeat must be at least 1")
    if args.kubeconfig and not args.node:
        p.error("--kubeconfig needs --node")
    return args


def run(args: argparse.Namespace) -> str:
    trees: list[tuple[str, Path | None]] = [("this checkout", None)]
    for spec in args.agent_tree:
        label, _, directory = spec.partition("=")
        path = Path(directory).resolve()
        if not (path / "vgpu_operator" / "__init__.py").is_file():
            raise SystemExit(f"--agent-tree {spec}: no vgpu_operator/ in {path}")
        trees.append((label, path))
    from vgpu_operator.models.node import NodeConfig

    released = NodeConfig.model_validate(RELEASED).to_annotation()
    from vgpu_operator import contract

    names = [args.node] * len(trees) if args.kubeconfig else [f"gpu-{i}" for i in range(len(trees))]
    floor_node = args.node or "floor-0"
    processes: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="vgpu-bench-agent-") as tmp:
        directory = Path(tmp)
        with contextlib.ExitStack() as stack:
            if args.kubeconfig:
                server = cluster_server(args.kubeconfig, directory)
                control_plane = f"the cluster of {args.kubeconfig}, node {args.node}"
            else:
                nodes = {n: {contract.ANN_CONFIG: released} for n in names}
                nodes[floor_node] = {}
                server = stack.enter_context(local_apiserver(directory, nodes))
                control_plane = (
                    "local HTTPS stand-in for the apiserver (bench/agent_cost.py), the agents "
                    f"in-cluster style; fake nvidia-smi, {args.gpus} x {GPU_MODEL}, a static "
                    "layout of 7 x 1g.10gb per GPU released"
                )
            processes = floors(server, floor_node, directory)
            processes += [
                agent(label, tree, node, server, directory, args.gpus)
                for (label, tree), node in zip(trees, names, strict=True)
            ]
            try:
                for m in processes:
                    m.start()
                wait_ready(processes, READY_SECONDS)
                measure(processes, args.settle, args.idle)
            finally:
                for m in processes:
                    m.stop()
        deps: list[tuple[str, ImportCost]] = []
        agent_sets: list[tuple[str, ImportCost]] = []
        empty = directory / "imports"
        empty.mkdir()
        wanted: list[tuple[list[str], Path | None]] = [([], None)]
        if not args.no_imports:
            wanted += [(modules, None) for _, modules in DEPENDENCIES]
            wanted += [(agent_imports(tree), tree) for _, tree in trees]
        log(f"imports: {len(wanted)} rows, {args.jobs} at once")
        bare_cost, *costs = import_rss_rows(wanted, args.repeat, empty, args.jobs)
        bare = bare_cost.rss
        if not args.no_imports:
            dep_costs, sets = costs[: len(DEPENDENCIES)], costs[len(DEPENDENCIES) :]
            deps = [(label, c) for (label, _), c in zip(DEPENDENCIES, dep_costs, strict=True)]
            agent_sets = [(label, c) for (label, _), c in zip(trees, sets, strict=True)]
    return report(processes, bare, deps, agent_sets, args, control_plane)


def main(argv: list[str]) -> None:
    args = parse(argv)

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    log(f"machine: {machine()}")
    try:
        print(run(args), flush=True)
    except KeyboardInterrupt:
        print("benchmark stopped by a signal; everything it started is gone", file=sys.stderr)
        sys.exit(1)
    except RuntimeError as exc:
        print(f"agent_cost: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])

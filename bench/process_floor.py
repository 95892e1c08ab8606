"""The per-import floor of the controller and of its rules worker, one run: what each process
holds before it serves, what each big dependency costs alone, and, without a cluster, what the
controller's data and the worker's pass add at N nodes.

Imports (bench/importkit.py: a fresh interpreter per row, its VmRSS against a bare
interpreter's, the median of `--repeat`):
- each big dependency alone: Kopf (alone, and as the controller loads it: `vgpu_operator`
  first, so kubernetes-asyncio's client loads name by name, `vgpu_operator/lazy_client.py`),
  kubernetes-asyncio as loaded lazily, aiohttp, pydantic, prometheus_client, PyYAML, ruamel.yaml,
  and the operator's own packages (every module of `vgpu_operator.models`; of `vgpu_operator.core`
  but the rules; the rules, `vgpu_operator.core.rules`);
- the rules worker's import set: what the worker process (`controller.rules_worker.WORKER_MAIN`,
  run with `python -m`) imports before it reads its first snapshot: its module and `MODULES`;
- the controller's import set: what `vgpu-operator run` imports before it serves (its command
  line run with credentials that do not exist: it stops after its imports, before Kopf starts);
- for each of the two sets, every module it holds that is not the operator's own, imported
  alone: the set's third-party and standard-library floor, so the operator's own code is the
  difference.
The last columns say how many of the modules of the package a row is about (as that row
imported them) each process's set holds.

Held (bench/controller_held.py, in an interpreter of its own): at N nodes (`--nodes`, default
5,000) and 10 x N pods as bench/scale.py makes them, what the controller's Node informer and pod
index hold, what sending a pass's snapshot to the rules worker costs the controller, and the
worker's memory as started and after that pass. No apiserver: the objects are fed as a listing
feeds them; the running processes on a real control plane are bench/scale.py's memory phase.

`--jobs J` measures J import rows at once (default 1), and above 1 runs the held table's
interpreter beside them: each row and that interpreter measure their own memory, so only the
time changes (the smoke test runs 2).

Usage: python bench/process_floor.py [--repeat K] [--nodes N] [--no-held] [--jobs J]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pkgutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchkit import log, machine
from importkit import ImportCost, base_env, commit, import_rss_rows, versions
from vgpu_operator.lazy_client import PACKAGES as LAZY_CLIENT

BENCH = Path(__file__).resolve().parent
OPERATOR_PACKAGE = "vgpu_operator"
DISTRIBUTIONS = (
    "kopf",
    "kubernetes-asyncio",
    "aiohttp",
    "pydantic",
    "pydantic-core",
    "prometheus-client",
    "PyYAML",
    "ruamel.yaml",
)
# A kubeconfig that is not there: the controller's command line stops after its imports.
NO_CREDENTIALS = "--kubeconfig=/nonexistent/vgpu-bench-kubeconfig"
CONTROLLER = [f"@main run {NO_CREDENTIALS}"]
LAZY_PLACEHOLDERS = frozenset(LAZY_CLIENT)


def submodules(package: str, leave_out: tuple[str, ...] = ()) -> list[str]:
    """Every module of an installed package (found, not imported), but those under
    `leave_out`."""
    root = __import__(package, fromlist=["__path__"])
    names = [package] + [m.name for m in pkgutil.walk_packages(root.__path__, f"{package}.")]
    return [n for n in names if not any(n == o or n.startswith(o + ".") for o in leave_out)]


def worker_imports() -> list[str]:
    from vgpu_operator.controller import rules_worker

    return [rules_worker.WORKER_MAIN, *rules_worker.MODULES]


def dependencies() -> list[tuple[str, list[str], tuple[str, ...]]]:
    """(label, what the row imports, the packages the row is about)."""
    models = "vgpu_operator.models"
    core, rules = "vgpu_operator.core", "vgpu_operator.core.rules"
    return [
        ("kopf alone (its own kubernetes_asyncio import: every API class and model)", ["kopf"],
         ("kopf",)),
        ("kopf as the controller loads it (`vgpu_operator` first: lazy client)",
         [OPERATOR_PACKAGE, "kopf"], ("kopf",)),
        ("kubernetes_asyncio as loaded lazily (`vgpu_operator` first; the client's REST layer)",
         [OPERATOR_PACKAGE, "kubernetes_asyncio.client.rest"], ("kubernetes_asyncio",)),
        ("aiohttp", ["aiohttp"], ("aiohttp",)),
        ("pydantic", ["pydantic"], ("pydantic", "pydantic_core")),
        ("prometheus_client", ["prometheus_client"], ("prometheus_client",)),
        ("yaml (PyYAML)", ["yaml"], ("yaml",)),
        ("ruamel.yaml", ["ruamel.yaml"], ("ruamel",)),
        ("`vgpu_operator` (the package: its version, the lazy client installed)",
         [OPERATOR_PACKAGE], (OPERATOR_PACKAGE,)),
        (f"the operator's models (every module of {models})", submodules(models), (models,)),
        (f"the operator's core but the rules (every module of {core})",
         submodules(core, leave_out=(rules,)), (core,)),
        (f"the rules ({rules}: every rule registered)", [rules], (rules,)),
    ]  # fmt: skip


def foreign(cost: ImportCost, bare: ImportCost) -> list[str]:
    """The modules of an import set that are not the operator's and not the bare
    interpreter's, each to be imported if it can be (`?`: some only import as their package
    does), after `vgpu_operator` itself: it installs the lazy kubernetes-asyncio client, without
    which `kubernetes_asyncio.client` would import every API class and model."""
    return [OPERATOR_PACKAGE] + [
        f"?{m}"
        for m in sorted(cost.modules - bare.modules)
        if not under(m, (OPERATOR_PACKAGE,)) and m != "__main__"
    ]


def under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def share(cost: ImportCost, about: tuple[str, ...], of: ImportCost) -> str:
    """How many of the modules of `about` that the row imported `of` holds (not counting the lazy
    packages `vgpu_operator` puts in place of kubernetes-asyncio's client: empty until used)."""
    own = {m for m in cost.modules if under(m, about)} - LAZY_PLACEHOLDERS
    held = len(own & of.modules)
    if not own:
        return ""
    if held == len(own):
        return f"all {len(own)}"
    return "none" if held == 0 else f"{held} of {len(own)}"


def held(n: int, cwd: Path) -> dict[str, Any]:
    """bench/controller_held.py at n nodes, in an interpreter of its own."""
    env = base_env()
    env["PYTHONPATH"] = str(BENCH)
    out = subprocess.run(
        [sys.executable, str(BENCH / "controller_held.py"), str(n)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"controller_held.py {n} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def load() -> str:
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return f"load average {one} {five} {fifteen}"


def run(args: argparse.Namespace) -> str:
    lines = [
        f"Date {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}",
        f"Machine: {machine()}; {load()} at the start",
        f"Versions: {versions(DISTRIBUTIONS)}",
        f"Import rows: the median of {args.repeat} fresh interpreters each, {args.jobs} at once",
        "",
        "| imported in a fresh interpreter | RSS MiB | over the bare interpreter MiB | "
        "modules in the controller's set | in the rules worker's set |",
        "|---|---:|---:|---:|---:|",
    ]
    with (
        tempfile.TemporaryDirectory(prefix="vgpu-bench-floor-") as tmp,
        ThreadPoolExecutor(max_workers=1) as beside,
    ):
        empty = Path(tmp)
        # With --jobs above 1 the held table's interpreter runs beside the import rows (its
        # memory is its own: only the time changes); else after them.
        early = None
        if not args.no_held and args.jobs > 1:
            log(f"held: {args.nodes} nodes (bench/controller_held.py), beside the imports")
            early = beside.submit(held, args.nodes, empty)
        deps = dependencies()
        log(
            f"imports: the bare interpreter, both sets, {len(deps)} dependencies "
            f"({args.jobs} at once)"
        )
        wanted = [[], CONTROLLER, worker_imports(), *(modules for _, modules, _ in deps)]
        bare, controller, worker, *costs = import_rss_rows(
            [(modules, None) for modules in wanted], args.repeat, empty, args.jobs
        )
        rows: list[tuple[str, ImportCost, tuple[str, ...]]] = [
            (label, cost, about) for (label, _, about), cost in zip(deps, costs, strict=True)
        ]
        rows.append(("the rules worker's import set", worker, ()))
        rows.append(("the controller's import set (`vgpu-operator run`)", controller, ()))
        log("imports: each set's modules that are not the operator's")
        sets = (("the rules worker's", worker), ("the controller's", controller))
        foreign_costs = import_rss_rows(
            [(foreign(of, bare), None) for _, of in sets], args.repeat, empty, args.jobs
        )
        others: dict[str, ImportCost] = {}
        for (label, _), cost in zip(sets, foreign_costs, strict=True):
            others[label] = cost
            rows.append(
                (f"{label} set but the operator's own modules (`vgpu_operator` itself kept: "
                 "it installs the lazy client)", others[label], ())
            )  # fmt: skip
        lines.append(f"| nothing (the bare interpreter) | {bare.rss:.1f} | 0.0 | | |")
        for label, cost, about in rows:
            lines.append(
                f"| {label} | {cost.rss:.1f} | {cost.rss - bare.rss:.1f} | "
                f"{share(cost, about, controller)} | {share(cost, about, worker)} |"
            )
        summary = [
            ("the rules worker", worker, others["the rules worker's"]),
            ("the controller", controller, others["the controller's"]),
        ]
        lines.append("")
        for name, whole, rest in summary:
            lines.append(
                f"{name}: {whole.rss:.1f} MiB after its imports = {bare.rss:.1f} the bare "
                f"interpreter + {rest.rss - bare.rss:.1f} the packages it imports but the "
                f"operator's + {whole.rss - rest.rss:.1f} the operator's own modules "
                f"({sum(1 for m in whole.modules if under(m, (OPERATOR_PACKAGE,)))} of them)"
            )
        if early is not None:
            lines += ["", *held_table(early.result())]
        elif not args.no_held:
            log(f"held: {args.nodes} nodes (bench/controller_held.py)")
            lines += ["", *held_table(held(args.nodes, empty))]
    lines += ["", f"Machine: {load()} at the end"]
    return "\n".join(lines)


def held_table(h: dict[str, Any]) -> list[str]:
    n, pods, gpu = h["n"], h["pods"], h["gpu_pods"]
    return [
        f"At {n:,} nodes and {pods:,} pods ({gpu:,} holding GPUs), held as the controller holds "
        "them (bench/controller_held.py, no apiserver):",
        "",
        "| what | MiB |",
        "|---|---:|",
        f"| the controller's imports and the benchmark's (its baseline) | {h['baseline']:.1f} |",
        f"| + the Node informer's {n:,} Nodes | {h['with_nodes'] - h['baseline']:.1f} |",
        f"| + the pod index's {gpu:,} GPU pods (of {pods:,} listed) | "
        f"{h['with_pods'] - h['with_nodes']:.1f} |",
        f"| a pass's snapshot to the rules worker, pickled | {h['pickle_mib']:.1f} |",
        f"| the controller's peak during {len(h['after_passes'])} passes over it, over its "
        f"memory before | {h['pass_peak'] - h['before_pass']:.1f} |",
        "| the controller after each pass, over its memory before | "
        + ", ".join(f"{a - h['before_pass']:.1f}" for a in h["after_passes"])
        + " |",
        f"| the rules worker as started, after a pass over an empty snapshot | "
        f"{h['worker_started']:.1f} |",
        "| the rules worker after each pass over the snapshot | "
        + ", ".join(f"{w:.1f}" for w in h["worker_after_passes"])
        + " |",
        f"| the rules worker's peak | {h['worker_peak']:.1f} |",
    ]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--repeat", type=int, default=3, help="interpreters per import row")
    p.add_argument("--nodes", type=int, default=5000, help="N of the held table")
    p.add_argument("--no-held", action="store_true", help="the import table only")
    p.add_argument("--jobs", type=int, default=1, help="import rows measured at once (default 1)")
    args = p.parse_args(argv)
    if args.repeat < 1 or args.nodes < 1 or args.jobs < 1:
        p.error("--repeat, --nodes and --jobs must be at least 1")
    return args


def main(argv: list[str]) -> None:
    args = parse(argv)
    log(f"machine: {machine()}")
    try:
        print(run(args), flush=True)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or ""
        print(f"process_floor: {exc}\n{detail[-3000:]}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])

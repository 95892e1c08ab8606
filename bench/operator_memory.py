"""The controller's memory at N nodes and 10 x N pods, for one or more copies of the operator
one after the other on the same population: bench/scale.py's memory phase (the same nodes and
pods, `populate`; the same moment, once its pod index holds every GPU pod and its first pass is
done, and `SETTLE` seconds more; the same readings, VmRSS and VmHWM of `vgpu-operator run` and
of its process tree), without scale.py's convergence runs and bare Kopf operator, so that a
before and an after are measured in one run on one control plane.

`--tree LABEL=DIR` adds the operator run from DIR (a directory holding `vgpu_operator/`, put
first on its PYTHONPATH; its rules worker inherits it), e.g. the package at a commit:
`mkdir -p /tmp/before && git archive HEAD operator/vgpu_operator | tar -x -C /tmp/before
--strip-components=1`. This checkout's operator runs first.

Usage: python bench/operator_memory.py N [--tree LABEL=DIR ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from benchkit import CONCURRENCY, bench_cluster, log, machine, run
from convergence import OperatorProcess
from scale import PODS_PER_NODE, SETTLE, held_memory, populate
from vgpu_devcluster.install import install_operator_access
from vgpu_operator.kubeapi.credentials import Credentials


@dataclass
class Measured:
    label: str
    operator: tuple[float, float]  # RSS, peak (MiB)
    tree: tuple[float, float]  # with its rules worker


def trees(specs: list[str]) -> list[tuple[str, Path | None]]:
    out: list[tuple[str, Path | None]] = [("this checkout", None)]
    for spec in specs:
        label, _, directory = spec.partition("=")
        path = Path(directory).resolve()
        if not label or not (path / "vgpu_operator" / "__init__.py").is_file():
            raise SystemExit(f"--tree {spec}: give LABEL=DIR, DIR holding vgpu_operator/")
        out.append((label, path))
    return out


async def measure(
    kubeconfig: Path,
    log_file: Path,
    label: str,
    tree: Path | None,
    gpu_pods: int,
    settle: float = SETTLE,
) -> Measured:
    """The operator from `tree` (None: this checkout), started with PYTHONPATH set for it;
    its memory read `settle` seconds after it holds the GPU pods (the smoke test: less)."""
    saved = os.environ.get("PYTHONPATH")
    if tree is not None:
        os.environ["PYTHONPATH"] = str(tree)
    try:
        operator = OperatorProcess(kubeconfig, log_file)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    own, tree_mem = await held_memory(
        operator,
        f"operator ({label}) holding {gpu_pods} GPU pods",
        300 + gpu_pods * 0.2,
        gpu_pods,
        settle,
    )
    return Measured(label, own, tree_mem)


def table(n: int, rows: list[Measured]) -> str:
    pods = n * PODS_PER_NODE
    lines = [
        f"N = {n:,} nodes, {pods:,} pods ({pods // 10:,} holding GPUs)",
        "",
        "| operator | RSS MiB (peak) | its rules worker MiB | with its rules worker (peaks) |",
        "|---|---:|---:|---:|",
    ]
    for m in rows:
        lines.append(
            f"| {m.label} | {m.operator[0]:.1f} ({m.operator[1]:.1f}) | "
            f"{m.tree[0] - m.operator[0]:.1f} | {m.tree[0]:.1f} ({m.tree[1]:.1f}) |"
        )
    return "\n".join(lines)


async def main(n: int, specs: list[str]) -> None:
    from importkit import commit

    chosen = trees(specs)
    log(f"machine: {machine()}")
    rows: list[Measured] = []
    with bench_cluster() as cluster:
        admin = Credentials(kubeconfig=str(cluster.kubeconfig))
        api = await admin.client(pool_size=CONCURRENCY + 8)
        async with api:
            credentials = await install_operator_access(api, cluster.workdir)
            assert credentials.kubeconfig is not None
            kubeconfig = Path(credentials.kubeconfig)
            await populate(api, n, 0, 0)
            gpu_pods = sum(1 for i in range(n * PODS_PER_NODE) if i % 10 == 0)
            for k, (label, tree) in enumerate(chosen):
                log_file = cluster.workdir / f"bench-operator-{k}.log"
                m = await measure(kubeconfig, log_file, label, tree, gpu_pods)
                log(f"{label}: {m.operator[0]:.1f} MiB, with its rules worker {m.tree[0]:.1f}")
                rows.append(m)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"Commit {commit()}; machine: {machine()}; load average {' '.join(load)} at the end")
    print(table(n, rows), flush=True)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("n", type=int, help="nodes (and 10 x N pods)")
    p.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR")
    return p.parse_args(argv)


if __name__ == "__main__":
    args = parse(sys.argv[1:])
    run(lambda: main(args.n, args.tree))

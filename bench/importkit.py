"""What an import costs: the resident memory of a fresh interpreter that imports a set of
modules, against a bare interpreter (the same code, nothing imported); shared by
bench/agent_cost.py and bench/process_floor.py, with the commit and the versions their reports
print.

Each measurement is the median of `repeat` interpreters, each started in `cwd` (an empty
directory: nothing is imported from where the benchmark was started) with the environment of
`base_env` (no PYTHONPATH unless a tree is given: the package is the installed one). A module
name may be a command line instead:
- `@cli WORDS`: the console script's parser as it is built for WORDS
  (`vgpu_operator.commands.cli.main([*WORDS, "--help"])`, its output dropped);
- `@main WORDS`: `vgpu_operator.commands.cli.main(WORDS)` run as given, its output dropped (a
  command whose credentials are missing stops after its imports and before it serves);
- `?MODULE`: MODULE if it imports (some modules import only as their package does).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

IMPORT_PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    if name.startswith(("@cli ", "@main ")):
        import contextlib, io
        cli = importlib.import_module("vgpu_operator.commands.cli")
        words = name.split()[1:] + (["--help"] if name.startswith("@cli ") else [])
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), \\
                contextlib.suppress(SystemExit):
            cli.main(words)
    elif name.startswith("?"):
        try:
            importlib.import_module(name[1:])
        except Exception:
            pass
    else:
        importlib.import_module(name)
rss = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:"))
print(json.dumps({"rss_kib": rss, "modules": sorted(sys.modules)}))
"""


@dataclass
class ImportCost:
    label: str
    rss: float  # MiB, median
    modules: set[str]  # every module the interpreter held (full dotted names)

    def holds(self, name: str) -> bool:
        """Whether the package or module `name` (or any module under it) was imported."""
        return any(m == name or m.startswith(name + ".") for m in self.modules)


def base_env() -> dict[str, str]:
    """The environment of a measured process: ours, without a cluster or a node to point at and
    without PYTHONPATH; unbuffered output, as the chart sets it."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_NAME")}
    env.pop("PYTHONPATH", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def import_rss(modules: list[str], repeat: int, cwd: Path, tree: Path | None = None) -> ImportCost:
    """`modules` imported in `repeat` fresh interpreters, in `cwd` (see the module docstring);
    `tree`: a directory holding another `vgpu_operator/`, put first on the path."""
    env = base_env()
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    samples, names = [], set()
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", IMPORT_PROBE, *modules],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            check=True,
            timeout=120,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        samples.append(result["rss_kib"] / 1024)
        names = set(result["modules"])
    return ImportCost(" + ".join(modules), statistics.median(samples), names)


def import_rss_rows(
    rows: list[tuple[list[str], Path | None]], repeat: int, cwd: Path, jobs: int = 1
) -> list[ImportCost]:
    """`import_rss(modules, repeat, cwd, tree)` of each (modules, tree) row, in order, `jobs`
    rows at a time: each row's memory is its own interpreter's, so running several at once
    changes the time the rows take, not what they measure."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda row: import_rss(row[0], repeat, cwd, row[1]), rows))


def commit() -> str:
    """The checkout's commit, marked when `operator/` or `bench/` differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, cwd=REPO, check=False
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = subprocess.run(
        ["git", "diff", "--quiet", "HEAD", "--", "operator", "bench"], cwd=REPO, check=False
    ).returncode
    return f"{head} (with uncommitted changes)" if dirty else head


def versions(distributions: Iterable[str]) -> str:
    """Python's version and each distribution's, as installed."""
    parts = [f"Python {sys.version.split()[0]}"]
    for dist in sorted(set(distributions), key=str.lower):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} not installed")
    return ", ".join(parts)

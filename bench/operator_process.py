"""`vgpu-operator run` as the benchmarks start it: its own process (its own interpreter, the
chart's RBAC through the kubeconfig it is given), its liveness endpoint read to tell how far it
got, py-spy on it with BENCH_PROFILE, and the deadlines of its start-up."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from benchkit import CONCURRENCY, Progress, die_with_parent
from vgpu_devcluster.cluster import free_port


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


def startup_deadline(n: int) -> float:
    """Seconds for the operator to list N nodes and finish its first pass."""
    return 300 + n * 0.03


def idle_deadline(n: int) -> float:
    """Seconds for the operator to go idle after its first pass (its configuration pass, the
    rules and the pod listing may still run)."""
    return 120 + n * 0.02


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

"""Small helpers shared by the cluster tests."""

from __future__ import annotations

import asyncio
import ctypes
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from vgpu_devcluster import binaries
from vgpu_devcluster.cluster import LocalCluster
from vgpu_operator.kubeapi import MERGE_PATCH, policy_path, request


@dataclass
class ClusterUnderTest:
    kubeconfig: Path
    local: LocalCluster | None

    def require_audit(self) -> LocalCluster:
        if self.local is None:
            pytest.skip("needs the local control plane's audit log (VGPU_TEST_KUBECONFIG is set)")
        return self.local


ServiceAccountClient = Callable[[str, str], Awaitable[client.ApiClient]]
NodeFactory = Callable[..., Awaitable[list[str]]]
PolicyFactory = Callable[[str, dict[str, Any]], Awaitable[str]]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 60.0, interval: float = 0.5
) -> None:
    """Poll `check` until it returns True; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {check.__name__}")
        await asyncio.sleep(interval)


async def patch_spec(api: client.ApiClient, policy: str, spec: dict[str, Any]) -> None:
    """Merge-patch a VGPUNodePolicy's spec as a user would (`kubectl patch --type=merge`)."""
    await request(
        api,
        "PATCH",
        policy_path(policy),
        body={"spec": spec},
        content_type=MERGE_PATCH,
        field_manager=None,
    )


async def event_reasons(api: client.ApiClient, namespace: str, selector: str) -> Counter[str]:
    """The reasons of the Events in `namespace` that the field selector picks (for example
    `involvedObject.uid=<uid>,type=Warning`), counted."""
    body = await request(
        api, "GET", f"/api/v1/namespaces/{namespace}/events", query={"fieldSelector": selector}
    )
    return Counter(e["reason"] for e in body.get("items") or [])


# The examples/ folder: one scenario per folder, each applied by a cluster test.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def documents(text: str) -> list[dict[str, Any]]:
    """The documents of a YAML stream, empty ones left out."""
    return [d for d in yaml.safe_load_all(text) if d]


def rss_mib() -> float:
    """The resident memory of this process (the operator's, when it runs in a thread here)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """A `preexec_fn`: the child gets SIGKILL when its parent dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no process outlives a killed pytest


async def helm(kubeconfig: Path, *args: str, timeout: float = 180) -> str:
    """`helm ARGS` against the test cluster (the pinned binary, `vgpu_devcluster.binaries`): its
    stdout; a failure fails the test with helm's output."""
    proc = await asyncio.create_subprocess_exec(
        str(binaries.ensure("helm")),
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, f"helm {' '.join(args)}:\n{out.decode()}\n{err.decode()}"
    return out.decode()


async def cli(*args: str) -> tuple[int, str, str]:
    """`vgpu-operator ARGS` as a subprocess, as a person runs it: exit code, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vgpu_operator.commands.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    return int(proc.returncode or 0), out.decode(), err.decode()

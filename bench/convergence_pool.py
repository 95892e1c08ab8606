"""One pool of a convergence run (bench/convergence.py): the policy over it, its N kwok nodes
made, the clock (from the first request until a watch has seen every node of the pool carry the
policy's taint), and what the apiserver's audit log holds of the run (the pool's PATCHes, when
they were received, the requests competing with them)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchkit import Progress, create_nodes, phase
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.nodes import NodeSpec
from vgpu_operator import contract, kubeapi


def policy(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {"bench/pool": pool}}, "mode": "hami-core"},
    }


async def pool_nodes(api: Any, pool: str) -> list[dict[str, Any]]:
    listing = await kubeapi.request(
        api, "GET", kubeapi.node_path(), query={"labelSelector": f"bench/pool={pool}"}
    )
    return list(listing["items"])


async def converge(
    api: Any, pool: str, n: int, act: Callable[[], Awaitable[None]], progress: Progress
) -> tuple[float, float]:
    """Seconds from `act()` until a watch has seen all `n` nodes of the pool tainted, and the
    wall-clock time `act()` began."""
    listing = await kubeapi.request(api, "GET", kubeapi.node_path(), query={"limit": "1"})
    rv = listing["metadata"]["resourceVersion"]
    seen: set[str] = set()
    done = asyncio.Event()

    def observe(obj: dict[str, Any]) -> None:
        taints = (obj.get("spec") or {}).get("taints") or []
        if any(t.get("key") == contract.DEFAULT_TAINT_KEY for t in taints):
            seen.add(obj["metadata"]["name"])
            progress(f"a watch to see the policy's taint on every node: {len(seen)}/{n}")
        if len(seen) >= n:
            done.set()

    selector = f"bench/pool={pool},volcano.sh/vgpu.enabled=true"

    async def watch() -> None:
        # Raw JSON lines, no typed models: the observer must not load the machine it measures.
        raw: Any = api
        since = rv
        while not done.is_set():
            resp = await raw.call_api(
                kubeapi.node_path(),
                "GET",
                query_params=[
                    ("watch", "true"),
                    ("labelSelector", selector),
                    ("resourceVersion", since),
                    ("timeoutSeconds", "600"),
                ],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
            )
            async for line in resp.content:
                observe(json.loads(line)["object"])
                if done.is_set():
                    resp.close()
                    return
            # The apiserver closes a watch that falls behind: catch up with a list.
            listing = await kubeapi.request(
                api, "GET", kubeapi.node_path(), query={"labelSelector": selector}
            )
            for obj in listing.get("items") or []:
                observe(obj)
            since = listing["metadata"]["resourceVersion"]

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.5)
    sampled = asyncio.create_task(apiserver_profile(api, f"{pool}"))
    began = time.time()
    start = time.perf_counter()
    try:
        progress("the first request")
        await act()
        progress(f"a watch to see the policy's taint on every node: {len(seen)}/{n}")
        await done.wait()
        elapsed = time.perf_counter() - start
        await watcher
        await sampled
    finally:
        watcher.cancel()
        sampled.cancel()
        await asyncio.gather(watcher, sampled, return_exceptions=True)
    return elapsed, began


async def apiserver_profile(api: Any, name: str, seconds: int = 5) -> None:
    """With BENCH_PROFILE=<dir>: the apiserver's own CPU profile (Go pprof) over the first
    `seconds` of a run, to <dir>/apiserver-<name>.pb.gz (`go tool pprof -top` reads it)."""
    out = os.environ.get("BENCH_PROFILE")
    if not out:
        return
    raw: Any = api
    resp = await raw.call_api(
        "/debug/pprof/profile",
        "GET",
        query_params=[("seconds", str(seconds))],
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
        _request_timeout=seconds + 30,
    )
    data = await resp.read()
    if resp.status != 200:
        raise RuntimeError(f"apiserver profile: {resp.status} {data[:200]!r}")
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"apiserver-{name}.pb.gz").write_bytes(data)


def converge_deadline(n: int) -> float:
    return 120 + n * 0.2


def node_deadline(n: int) -> float:
    """Seconds to create n nodes and see them Ready (measured here: about 4 a second on two
    busy cores, the controller manager lifting each new node's not-ready taint)."""
    return 120 + n * 0.4


async def make_pool(api: Any, role: str, n: int) -> tuple[str, set[str]]:
    pool = f"{role}{n}"
    specs = [
        NodeSpec(f"{pool}-{i}", "A100-SXM4-80GB", 8, labels={"bench/pool": pool}) for i in range(n)
    ]
    await phase(
        f"{n} {role} nodes", node_deadline(n), lambda progress: create_nodes(api, specs, progress)
    )
    return pool, {s.name for s in specs}


def node_patches(
    cluster: LocalCluster, user: str, offset: int, names: set[str]
) -> list[dict[str, Any]]:
    """The successful PATCHes `user` sent to the pool's Nodes, from the audit log."""
    return [
        e
        for e in cluster.audit_events(user=user, offset=offset)
        if e["objectRef"]["resource"] == "nodes"
        and e["verb"] == "patch"
        and e["objectRef"].get("name") in names
        and e["responseStatus"]["code"] < 300
    ]


def other_requests(cluster: LocalCluster, offset: int, names: set[str]) -> str:
    """What else the audit log holds for a run (everyone's writes, the operator's reads),
    counted by user, verb and resource, leaving out the PATCHes of the pool's Nodes: the
    requests that compete with the measured ones."""
    counts: dict[str, int] = {}
    for e in cluster.audit_events(offset=offset, reads=True):
        ref = e.get("objectRef") or {}
        if e.get("verb") == "patch" and ref.get("resource") == "nodes" and ref.get("name") in names:
            continue
        user = str((e.get("user") or {}).get("username", "?")).rsplit(":", 1)[-1]
        key = f"{user} {e.get('verb')} {ref.get('resource')}"
        counts[key] = counts.get(key, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
    return ", ".join(f"{k} x{v}" for k, v in top) or "none"


def received(event: dict[str, Any]) -> float:
    stamp = event["requestReceivedTimestamp"].rstrip("Z")
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


def span(patches: list[dict[str, Any]], start: float) -> str:
    """`first-last` second at which the apiserver received the PATCHes, from `start`."""
    if not patches:
        return "-"
    times = sorted(received(e) for e in patches)
    return f"{times[0] - start:.2f}-{times[-1] - start:.2f}"


@dataclass
class Run:
    seconds: float
    began: float  # wall clock
    writes: list[dict[str, Any]]  # the PATCHes of the pool's nodes (audit log)
    cpu: float  # the operator and its children (0 for the floor)
    apiserver_cpu: float
    machine_cpu: float

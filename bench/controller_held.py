"""What the controller holds at N nodes, and what its rules worker takes in, without a cluster:
run by bench/process_floor.py in a fresh interpreter of its own; prints one JSON line.

The interpreter first imports what `vgpu-operator run` imports before it serves (its command
line with credentials that do not exist: it stops after its imports), then what this script
uses to make the objects (bench/scale.py's), and reads its baseline. Then the controller's own
code holds the objects, fed as a listing would feed them (`kubeapi.list_watch`: pages of
decoded JSON, each reduced by the informer's `reduce` as it comes, then delivered once):
- the Node informer (`controller.app`: `indexed_node`, pages reduced by `kept_node`), N GPU
  Nodes as `devtools/vgpu_devcluster/nodes.py` makes them (8 A100 each, as bench/scale.py);
- the pod index (`controller.pods.PodIndex`), 10 x N pods as bench/population.py creates
  them (`workload_pod`: a tenth hold GPU resources), in its pages of `PAGE`;
- a configuration pass's snapshot (the compact Nodes and the GPU pods, `ClusterSnapshot`), sent
  to a rules worker started as the controller starts it (`controller.rules_worker.RulesWorker`):
  first a pass over an empty snapshot (the worker as started), then `PASSES` over this one
  (a controller runs one per event burst and per resync).
Resident memory (VmRSS, MiB) after each step, with a garbage collection before each reading; the
peak (VmHWM) of the pass is read after resetting it (`/proc/self/clear_refs`, 5).

Usage: python bench/controller_held.py N
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import json
import pickle
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

PASSES = 3  # configuration passes over the same snapshot


def status(pid: int | str = "self") -> dict[str, float]:
    """VmRSS and VmHWM of a process, in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) / 1024
    return out


def rss() -> float:
    gc.collect()
    return status()["VmRSS"]


def reset_peak() -> None:
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def import_the_controller() -> None:
    from vgpu_operator.commands import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        cli.main(["run", "--kubeconfig=/nonexistent/vgpu-bench-kubeconfig"])


def pages(objects: Any, size: int) -> Any:
    """The objects in pages of decoded JSON, as a listing delivers them (fresh strings)."""
    page: list[Any] = []
    for obj in objects:
        page.append(obj)
        if len(page) == size:
            yield json.loads(json.dumps(page))
            page = []
    if page:
        yield json.loads(json.dumps(page))


def node(i: int) -> dict[str, Any]:
    from scale import POOL
    from vgpu_devcluster.nodes import NodeSpec, gpu_node_manifest

    manifest = gpu_node_manifest(
        NodeSpec(f"{POOL}-{i}", "A100-SXM4-80GB", 8, labels={"bench/pool": POOL})
    )
    # what the apiserver adds
    manifest["metadata"].update(
        uid=f"00000000-0000-4000-8000-{i:012d}",
        resourceVersion=str(1000 + i),
        creationTimestamp="2026-01-01T00:00:00Z",
    )
    return manifest


def pod(i: int, nodes: int) -> dict[str, Any]:
    from scale import NAMESPACE, workload_pod

    body = workload_pod(i, nodes)
    body["metadata"].update(
        namespace=NAMESPACE,
        uid=f"00000000-0000-4000-9000-{i:012d}",
        resourceVersion=str(100000 + i),
        creationTimestamp="2026-01-01T00:00:00Z",
    )
    conditions = ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    body["status"] = {  # as kwok reports a running pod
        "phase": "Running",
        "podIP": "10.0.0.1",
        "hostIP": "10.0.0.1",
        "startTime": "2026-01-01T00:00:01Z",
        "conditions": [
            {"type": c, "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"}
            for c in conditions
        ],
    }
    return body


async def nothing(_change: Any) -> None:
    return None


def main(n: int) -> dict[str, Any]:
    import_the_controller()
    from scale import PODS_PER_NODE  # and the benchmark's own imports, before the baseline
    from vgpu_operator import kubeapi
    from vgpu_operator.controller.informer import Informer
    from vgpu_operator.controller.kept import indexed_node, kept_node
    from vgpu_operator.controller.pods import PAGE, PodIndex
    from vgpu_operator.controller.rules_worker import RulesWorker
    from vgpu_operator.core.rollout.gpu_pods import gpu_resources
    from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
    from vgpu_operator.models.config import OperatorConfig

    config = OperatorConfig()
    got: dict[str, Any] = {"n": n, "pods": n * PODS_PER_NODE}
    got["baseline"] = rss()

    nodes: Informer[Any] = Informer(None, "nodes", kubeapi.node_path(), indexed_node, nothing)
    kept = [kept_node(o) for page in pages(map(node, range(n)), PAGE) for o in page]
    asyncio.run(nodes._listed(kubeapi.Listing(kept, "1")))
    del kept
    got["with_nodes"] = rss()

    index = PodIndex(None, gpu_resources(config))
    every = (pod(i, n) for i in range(n * PODS_PER_NODE))
    reduced = [p for page in pages(every, PAGE) for p in map(index._parse, page) if p is not None]
    asyncio.run(index.informer._listed(kubeapi.Listing(reduced, "1")))
    del reduced
    got["gpu_pods"] = len(index)
    got["with_pods"] = rss()

    snapshot = ClusterSnapshot(
        config=config, nodes=[v.obj for v in nodes.items.values()], pods=index.pods()
    )
    worker = RulesWorker()
    # as `controller.rules_worker.run_rules` calls it: from a thread (its own malloc arena)
    thread = ThreadPoolExecutor(1)
    try:
        worker.run(ClusterSnapshot(config=config))
        assert worker.pid is not None
        got["worker_started"] = status(worker.pid)["VmRSS"]
        got["before_pass"] = rss()
        reset_peak()
        got["after_passes"], got["worker_after_passes"] = [], []
        for _ in range(PASSES):  # glibc's thresholds move after the first large free
            thread.submit(worker.run, snapshot).result()
            got["after_passes"].append(rss())
            got["worker_after_passes"].append(status(worker.pid)["VmRSS"])
        got["pass_peak"] = status()["VmHWM"]
        got["worker_peak"] = status(worker.pid)["VmHWM"]
    finally:
        worker.close()
        thread.shutdown()
    got["pickle_mib"] = len(pickle.dumps(snapshot)) / 2**20
    return got


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]))), flush=True)

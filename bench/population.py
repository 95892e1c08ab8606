"""The population the scale benchmarks measure over (bench/scale.py's memory phase,
bench/operator_memory.py, bench/kopf_or_informer.py, bench/doctor_scale.py,
bench/controller_held.py): one pool of N kwok nodes (8 A100 each) and 10 x N pods bound to them,
Running (kwok runs them), grown from what an earlier size left. A tenth of the pods hold GPU
resources, half `nvidia.com/gpu`, half `volcano.sh/vgpu-number`/`vgpu-memory` as Volcano places
them; the rest CPU only."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from benchkit import CONCURRENCY, Progress, create_nodes, phase
from convergence_pool import node_deadline
from vgpu_devcluster.nodes import NodeSpec
from vgpu_operator import kubeapi

NAMESPACE = "bench-pods"
POOL = "mem"
PODS_PER_NODE = 10


def workload_pod(i: int, nodes: int) -> dict[str, Any]:
    """Pod i, on node i mod N; every tenth holds a GPU resource: a whole GPU, or a vGPU as
    Volcano places one (scheduled by it, its devices in the annotations it writes)."""
    requests: dict[str, str] = {"cpu": "100m", "memory": "128Mi"}
    annotations = {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}
    scheduler = "default-scheduler"
    gpu = i % 10 == 0
    node = f"{POOL}-{i % nodes}"
    if gpu and i % 20 == 0:
        requests["nvidia.com/gpu"] = "1"
    elif gpu:
        requests.update({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"})
        devices = f"GPU-{i:08x}-0000-0000-0000-000000000000,NVIDIA,3000,0:;"
        scheduler = "volcano"
        annotations.update(
            {
                "volcano.sh/vgpu-ids-new": devices,
                "volcano.sh/devices-to-allocate": ";",
                "volcano.sh/bind-phase": "success",
                "volcano.sh/vgpu-node": node,
                "volcano.sh/vgpu-time": "1767225600",
            }
        )
    app = f"app-{i % 50}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"w-{i}",
            "labels": {
                "app": app,
                "pod-template-hash": "5d8f7c9b4",
                "tier": "gpu" if gpu else "web",
            },
            "annotations": annotations,
        },
        "spec": {
            "nodeName": node,
            "schedulerName": scheduler,
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": f"registry.example.com/{app}:1.4.2",
                    "command": ["/usr/local/bin/serve"],
                    "args": ["--port=8080", "--log-level=info"],
                    "env": [{"name": f"SETTING_{k}", "value": f"value-{k}-" * 3} for k in range(5)],
                    "ports": [{"containerPort": 8080, "name": "http"}],
                    "resources": {"requests": requests, "limits": dict(requests)},
                }
            ],
        },
    }


async def grow_pool(api: Any, n: int, have: int) -> None:
    specs = [
        NodeSpec(f"{POOL}-{i}", "A100-SXM4-80GB", 8, labels={"bench/pool": POOL})
        for i in range(have, n)
    ]
    await phase(
        f"{len(specs)} more nodes ({n} in all)",
        node_deadline(len(specs)),
        lambda progress: create_nodes(api, specs, progress),
    )


async def namespace_ready(api: Any, progress: Progress) -> None:
    with contextlib.suppress(kubeapi.Conflict):
        await kubeapi.request(
            api, "POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}}
        )
    while True:  # the controller manager creates its default ServiceAccount
        try:
            await kubeapi.request(
                api, "GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"
            )
            return
        except kubeapi.NotFound:
            progress(f"the ServiceAccount default in {NAMESPACE}")
            await asyncio.sleep(0.5)


async def create_pods(api: Any, first: int, last: int, nodes: int, progress: Progress) -> None:
    sem = asyncio.Semaphore(CONCURRENCY)
    made = 0

    async def create(i: int) -> None:
        nonlocal made
        async with sem:
            with contextlib.suppress(kubeapi.Conflict):
                await kubeapi.request(
                    api,
                    "POST",
                    f"/api/v1/namespaces/{NAMESPACE}/pods",
                    body=workload_pod(i, nodes),
                    field_manager=None,
                )
            made += 1
            if made % 1000 == 0:
                progress(f"pod creation: {made}/{last - first} created")

    progress(f"pod creation: 0/{last - first} created")
    # in slices: 50,000 coroutines at once would only wait on the semaphore
    for start in range(first, last, 2000):
        await asyncio.gather(*(create(i) for i in range(start, min(start + 2000, last))))


async def pods_running(api: Any, total: int, progress: Progress) -> None:
    """Until kwok runs every pod (names only are listed: no full pod objects)."""
    while True:
        body = await kubeapi.request(
            api,
            "GET",
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            query={"fieldSelector": "status.phase!=Running"},
            accept="application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            timeout=120,
        )
        waiting = len(body.get("items") or [])
        progress(f"kwok to run every pod: {total - waiting}/{total} Running")
        if waiting == 0:
            return
        await asyncio.sleep(5)


async def populate(api: Any, n: int, have_nodes: int, have_pods: int) -> None:
    """The pool grown from `have_nodes` to N nodes and its pods from `have_pods` to 10 x N, all
    Running (bench/doctor_scale.py measures over the same population)."""
    pods = n * PODS_PER_NODE
    await grow_pool(api, n, have_nodes)
    await phase("the pods' namespace", 60, lambda progress: namespace_ready(api, progress))
    await phase(
        f"{pods - have_pods} more pods ({pods} in all)",
        300 + (pods - have_pods) * 0.05,
        lambda progress: create_pods(api, have_pods, pods, n, progress),
    )
    await phase(f"{pods} pods Running", 300 + pods * 0.02, lambda p: pods_running(api, pods, p))

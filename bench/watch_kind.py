"""One watcher of one kind, as bench/kopf_or_informer.py runs it in a process of its own: Kopf
or the controller's informer, keeping the same thing the controller keeps of that kind.

- `--impl informer`: `controller.informer.Informer` (nodes: the controller's node record, its
  listing reduced page by page; daemonsets: the compact DaemonSet; configmaps: one name by a
  server-side field selector) or `controller.pods.PodIndex` (pods: the GPU pods, compact, the
  finished ones left out by the server) — exactly as `controller.app` builds them;
- `--impl kopf`: a Kopf operator with one `@kopf.index` on the kind, keeping the same reduced
  record under the same key, filtered on the client with the same predicate (`when=`), as an
  experienced Kopf user would write it: Kopf has no per-kind server-side name or field
  selection for a handler, so it lists and watches every object of the kind.

It prints `listed <kept>` once the watcher holds `--expect` objects (Kopf: the index's size;
the informer: its first listing delivered), then keeps watching until SIGTERM.

Usage: KUBECONFIG=... python bench/watch_kind.py --impl kopf|informer --kind KIND --expect N
       [--name NAMESPACE/NAME]   (KIND: nodes, pods, daemonsets, configmaps)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Mapping
from typing import Any

from vgpu_operator import kubeapi
from vgpu_operator.controller.informer import Change, Informer
from vgpu_operator.controller.kept import indexed_node, kept_node, namespaced_name
from vgpu_operator.controller.pods import PAGE, PodIndex
from vgpu_operator.controller.snapshot import compact_daemonset
from vgpu_operator.core.rollout.gpu_pods import compact_pod, gpu_resources, holds_gpu
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import OperatorConfig

RESOURCES: dict[str, tuple[str, str, str]] = {
    "nodes": ("", "v1", "nodes"),
    "pods": ("", "v1", "pods"),
    "daemonsets": ("apps", "v1", "daemonsets"),
    "configmaps": ("", "v1", "configmaps"),
}


def reduction(kind: str, name: str) -> tuple[Callable[[Mapping[str, Any]], Any], Any]:
    """(what is kept of an object, which objects are kept) as the controller keeps them."""
    resources = gpu_resources(OperatorConfig())
    if kind == "nodes":
        return (lambda obj: indexed_node(kept_node(obj))), None
    if kind == "pods":

        def running_gpu_pod(obj: Mapping[str, Any]) -> bool:
            phase = (obj.get("status") or {}).get("phase")
            return phase not in ("Succeeded", "Failed") and holds_gpu(obj, resources)

        return compact_pod, running_gpu_pod
    if kind == "daemonsets":
        return compact_daemonset, None
    return (lambda obj: (obj.get("metadata") or {}).get("resourceVersion")), (
        lambda obj: namespaced_name(obj) == name
    )


async def informer(kind: str, name: str) -> None:
    credentials = Credentials(kubeconfig=os.environ["KUBECONFIG"])
    api = await credentials.client(pool_size=8, user_agent="bench-informer")

    async def ignore(_: Change[Any]) -> None:
        return None

    watcher: Any
    if kind == "pods":
        watcher = PodIndex(api, gpu_resources(OperatorConfig()), ignore)
    elif kind == "nodes":
        watcher = Informer(
            api,
            "nodes",
            kubeapi.node_path(),
            indexed_node,
            ignore,
            kubeapi.WatchOptions(page_size=PAGE, reduce=kept_node),
        )
    elif kind == "daemonsets":
        path = "/apis/apps/v1/daemonsets"
        watcher = Informer(api, kind, path, compact_daemonset, ignore, key=namespaced_name)
    else:
        namespace, _, only = name.partition("/")
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        watcher = Informer(
            api,
            kind,
            path,
            lambda obj: (obj.get("metadata") or {}).get("resourceVersion"),
            ignore,
            kubeapi.WatchOptions(field_selector=f"metadata.name={only}"),
            key=namespaced_name,
        )
    task = asyncio.create_task(watcher.run())
    await watcher.synced.wait()
    held = len(watcher) if kind == "pods" else len(watcher.items)
    print(f"listed {held}", flush=True)
    await task


def kopf_operator(kind: str, name: str, expect: int) -> None:
    import kopf

    keep, when = reduction(kind, name)
    registry = kopf.OperatorRegistry()
    holder: dict[str, Any] = {}

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        settings.posting.enabled = False
        settings.scanning.disabled = True
        holder["index"] = kwargs["kept"]

        async def report() -> None:
            while len(holder["index"]) < expect:
                await asyncio.sleep(0.1)
            print(f"listed {len(holder['index'])}", flush=True)

        holder["task"] = asyncio.create_task(report())

    def index(body: kopf.Body, **_: Any) -> dict[str, Any]:
        raw = dict(body)
        return {namespaced_name(raw): keep(raw)}

    filters = {"when": (lambda body, **_: when(dict(body)))} if when is not None else {}
    kopf.index(*RESOURCES[kind], id="kept", registry=registry, **filters)(index)
    kopf.run(registry=registry, clusterwide=True, standalone=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=("kopf", "informer"), required=True)
    parser.add_argument("--kind", choices=tuple(RESOURCES), required=True)
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--name", default="")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.impl == "kopf":
        kopf_operator(args.kind, args.name, args.expect)
        return
    loop = asyncio.new_event_loop()
    main_task = loop.create_task(informer(args.kind, args.name))
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        loop.run_until_complete(main_task)


if __name__ == "__main__":
    main()

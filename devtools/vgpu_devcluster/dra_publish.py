"""Publish and withdraw what the DRA driver double (`dra_driver`) announces, on a real API.

`publish` does for one node what the ResourceSlice controller inside the real kubelet plugin
does for its pool (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:vendor/k8s.io/
dynamic-resource-allocation/resourceslice/resourceslicecontroller.go `syncPool`): the slices of
the driver on the node are listed by field selector; one at the index and generation the pool
wants is updated in place (same generation: one changed slice and no new one do not bump it),
every other is deleted as obsolete, and a missing one is created one generation above the
highest seen. `withdraw` deletes them, as kubelet does for a plugin that has gone. The DeviceClasses
are created or replaced as `helm upgrade --install` leaves them.

`api` is a kubernetes_asyncio ApiClient; every call goes through `vgpu_operator.kubeapi.request`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from vgpu_devcluster.dra_driver import (
    API_VERSION,
    DRIVER,
    INDEX_DIGITS,
    Host,
    device_classes,
    resource_slices,
)
from vgpu_devcluster.fakesmi_state import NodeState
from vgpu_operator.kubeapi import NotFound, node_path, request

SLICES = f"/apis/{API_VERSION}/resourceslices"
CLASSES = f"/apis/{API_VERSION}/deviceclasses"


async def node_slices(api: Any, node: str) -> list[dict[str, Any]]:
    """The driver's ResourceSlices of `node` (the fields the controller selects on:
    `spec.driver`, `spec.nodeName`)."""
    selector = f"spec.driver={DRIVER},spec.nodeName={node}"
    body = await request(api, "GET", SLICES, query={"fieldSelector": selector})
    return list(body.get("items") or [])


def _index(name: str) -> int:
    """`decodeIndex`: the hex prefix before the first `-` when it has the expected length."""
    head, sep, _ = name.partition("-")
    if not sep or len(head) != INDEX_DIGITS:
        return -1
    try:
        return int(head, 16)
    except ValueError:
        return -1


async def _delete(api: Any, slices: Iterable[dict[str, Any]]) -> None:
    for s in slices:
        with contextlib.suppress(NotFound):
            await request(api, "DELETE", f"{SLICES}/{s['metadata']['name']}", field_manager=None)


async def publish(
    api: Any, node: str, state: NodeState, host: Host | None = None
) -> dict[str, Any]:
    """Announce `state`'s devices as the node's pool; returns the slice as the API stored it."""
    host = host or Host()
    uid = str((await request(api, "GET", node_path(node)))["metadata"]["uid"])
    existing = await node_slices(api, node)
    generation = max((int(s["spec"]["pool"]["generation"]) for s in existing), default=0)
    current = next(
        (
            s
            for s in sorted(existing, key=lambda s: str(s["metadata"]["name"]))
            if _index(str(s["metadata"]["name"])) == 0
            and int(s["spec"]["pool"]["generation"]) == generation
        ),
        None,
    )
    await _delete(api, (s for s in existing if s is not current))
    if current is not None:
        desired = resource_slices(node, state, host, node_uid=uid, generation=generation)[0]
        if current["spec"] == desired["spec"]:
            return current
        body = {**current, "spec": desired["spec"]}
        name = current["metadata"]["name"]
        return await request(api, "PUT", f"{SLICES}/{name}", body=body, field_manager=None)
    body = resource_slices(node, state, host, node_uid=uid, generation=generation + 1)[0]
    return await request(api, "POST", SLICES, body=body, field_manager=None)


async def withdraw(api: Any, node: str) -> int:
    """Delete the driver's slices of `node`; returns how many there were."""
    existing = await node_slices(api, node)
    await _delete(api, existing)
    return len(existing)


async def install_device_classes(api: Any) -> list[dict[str, Any]]:
    """Create the chart's DeviceClasses, or replace one that exists; returns them as stored."""
    stored = []
    for dc in device_classes():
        name = dc["metadata"]["name"]
        try:
            old = await request(api, "GET", f"{CLASSES}/{name}")
        except NotFound:
            stored.append(await request(api, "POST", CLASSES, body=dc, field_manager=None))
            continue
        body = {
            **dc,
            "metadata": {**dc["metadata"], "resourceVersion": old["metadata"]["resourceVersion"]},
        }
        stored.append(await request(api, "PUT", f"{CLASSES}/{name}", body=body, field_manager=None))
    return stored


async def remove_device_classes(api: Any) -> None:
    for dc in device_classes():
        with contextlib.suppress(NotFound):
            await request(api, "DELETE", f"{CLASSES}/{dc['metadata']['name']}", field_manager=None)

"""`read_dra_api` on the wire: with the operator config's `dra` section, the resource.k8s.io
discovery document, then (v1 served) the DeviceClasses and the configured driver's ResourceSlices
(a field selector on spec.driver); nothing at all without the section; a refused read leaves the
DRA rules silent (None), never a pass failed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.kit.wire import Wire, error, serve
from vgpu_operator.controller.app import Controller, Settings
from vgpu_operator.controller.informer import MODIFIED, Change
from vgpu_operator.controller.snapshot import compact_daemonset, read_dra_api, read_snapshot
from vgpu_operator.controller.volcano import VolcanoOptions
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import OperatorConfig, load_config

DRA = load_config("dra: {driver: gpu.nvidia.com}\n")


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    async for w in serve():
        yield w


def group(*versions: str) -> dict[str, Any]:
    return {
        "kind": "APIGroup",
        "name": "resource.k8s.io",
        "versions": [{"groupVersion": v, "version": v.split("/")[1]} for v in versions],
    }


async def test_the_dra_api_is_read_with_the_drivers_slices_only(wire: Wire) -> None:
    queries: list[tuple[str, dict[str, str]]] = []

    async def discovery(_: web.Request) -> web.Response:
        return web.json_response(group("resource.k8s.io/v1", "resource.k8s.io/v1beta2"))

    async def lister(request: web.Request) -> web.Response:
        queries.append((request.path, dict(request.query)))
        kind = "deviceclasses" if "deviceclasses" in request.path else "resourceslices"
        item = {"metadata": {"name": f"one-of-{kind}"}, "spec": {}}
        return web.json_response({"metadata": {}, "items": [item]})

    wire.on("GET", "/apis/resource.k8s.io", discovery)
    wire.on("GET", "/apis/resource.k8s.io/v1/deviceclasses", lister)
    wire.on("GET", "/apis/resource.k8s.io/v1/resourceslices", lister)
    async with wire.client() as api:
        got = await read_dra_api(api, DRA)
        snap = await read_snapshot(api, DRA, nodes=[], gpu_pods=[], daemonsets=[])
    assert got is not None and got == snap.dra_api
    assert got.served == ("resource.k8s.io/v1", "resource.k8s.io/v1beta2")
    assert [c["kind"] for c in got.device_classes] == ["DeviceClass"]
    assert [s["kind"] for s in got.resource_slices] == ["ResourceSlice"]
    by_driver = {"limit": "500", "fieldSelector": "spec.driver=gpu.nvidia.com"}
    assert ("/apis/resource.k8s.io/v1/resourceslices", by_driver) in queries


async def test_without_v1_only_the_discovery_is_read(wire: Wire) -> None:
    async def discovery(_: web.Request) -> web.Response:
        return web.json_response(group("resource.k8s.io/v1beta1"))

    wire.on("GET", "/apis/resource.k8s.io", discovery)
    async with wire.client() as api:
        got = await read_dra_api(api, DRA)
    assert got is not None and got.served == ("resource.k8s.io/v1beta1",)
    assert [r.path for r in wire.requests] == ["/apis/resource.k8s.io"]


async def test_nothing_is_read_without_the_dra_section_and_a_refusal_reads_as_none(
    wire: Wire,
) -> None:
    async def forbidden(_: web.Request) -> web.Response:
        return error(403, "deviceclasses.resource.k8s.io is forbidden")

    async def discovery(_: web.Request) -> web.Response:
        return web.json_response(group("resource.k8s.io/v1"))

    wire.on("GET", "/apis/resource.k8s.io", discovery)
    wire.on("GET", "/apis/resource.k8s.io/v1/deviceclasses", forbidden)
    wire.on("GET", "/apis/resource.k8s.io/v1/resourceslices", forbidden)
    async with wire.client() as api:
        assert await read_dra_api(api, OperatorConfig()) is None
        assert wire.requests == []
        assert await read_dra_api(api, DRA) is None


async def test_the_kubelet_plugin_daemonset_asks_for_a_pass_on_every_event() -> None:
    """Its pod leaving a node (the rollout's pause) shows in its status only: with the `dra`
    section every event of it asks for a configuration pass, as HAMi's plugin's do."""
    settings = Settings(credentials=Credentials(), volcano=VolcanoOptions(enabled=True), config=DRA)
    ctl = Controller(settings, api=None)  # type: ignore[arg-type]  # no request is made
    asked: list[bool] = []
    ctl.request_configuration_pass = lambda: asked.append(True)  # type: ignore[method-assign]
    meta = {"namespace": "dra-driver-nvidia-gpu", "name": "dra-driver-nvidia-gpu-kubelet-plugin"}
    old = {"metadata": {**meta, "resourceVersion": "1"}, "spec": {}, "status": {}}
    now = {"metadata": {**meta, "resourceVersion": "2"}, "spec": {}, "status": {"numberReady": 1}}
    name = f"{meta['namespace']}/{meta['name']}"
    await ctl.daemonset_event(
        Change(MODIFIED, name, compact_daemonset(now), compact_daemonset(old), now)
    )
    assert asked == [True]

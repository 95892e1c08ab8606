"""`doctor` on an apiserver that does not serve resource.k8s.io/v1 (before Kubernetes 1.34, or
with it turned off in --runtime-config): the one DRA prerequisite the local control plane cannot
show, since Kubernetes 1.35 always serves it (tests/cluster/test_dra_doctor.py has the others).
Over a cluster served on the wire: doctor reads the group's discovery document, names the versions
it found and the fix, checks nothing else of DRA, and lists no DeviceClass or ResourceSlice; a
snapshot it saves says the same offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.kit.snapshot_wire import kubeconfig, serve_cluster
from tests.kit.volcano_fixtures import gpu_node
from tests.kit.wire import Wire, serve
from vgpu_operator.commands import doctor, snapshot_file
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import load_config
from vgpu_operator.models.node import NodeConfig

DRA_RULES = ["dra-api-not-served", "dra-deviceclass", "dra-node-slices", "dra-plugin-placement"]
CONFIG = load_config("dra: {}\n")


@pytest.fixture
async def wire() -> Any:
    async for w in serve():
        yield w


async def test_an_apiserver_without_resource_v1_is_named_with_the_fix(
    wire: Wire, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dra = NodeConfig(mode="dra", policy="pool", generation=1)
    s = ClusterSnapshot(config=CONFIG, nodes=[gpu_node("d-0", "A30", 2, released=dra)])
    serve_cluster(wire, s)

    async def group(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": "resource.k8s.io",
                "versions": [{"groupVersion": "resource.k8s.io/v1beta2", "version": "v1beta2"}],
            }
        )

    wire.on("GET", "/apis/resource.k8s.io", group)
    path = str(tmp_path / "cluster.json")
    _, results = await doctor.check(
        kubeconfig(wire, tmp_path), None, CONFIG, DRA_RULES, save_to=path
    )
    capsys.readouterr()
    [found] = results.findings
    assert (found.id, found.severity) == ("dra-api-not-served", "error")
    assert found.message.startswith(
        "the apiserver does not serve resource.k8s.io/v1 (only resource.k8s.io/v1beta2 is served)"
    )
    assert "upgrade the control plane to Kubernetes 1.34 or later" in found.fix
    # nothing of the API that is not there was asked for
    asked = {r.path for r in wire.requests}
    assert not [p for p in asked if "deviceclasses" in p or "resourceslices" in p], asked
    # offline, from the saved snapshot: the same
    saved = snapshot_file.load(path).snapshot
    assert run_rules(saved, only=DRA_RULES).findings == results.findings

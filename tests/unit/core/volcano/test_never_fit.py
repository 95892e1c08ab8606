"""Every reason a pending pod can never be scheduled, in one place (core.volcano.never_fit): the
vGPU causes and the claim causes together; where a DeviceClass of the DRA driver maps the
resource a vGPU cause is about (Kubernetes 1.36+), the DRA nodes count for it and the cause is
not said while they may serve the pod, and on 1.35 (the field dropped) nothing changes; which
nodes' devices a snapshot shows as known."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.kit.drakit import stored_device_classes
from tests.kit.volcano_fixtures import gpu_node
from vgpu_devcluster import dra_driver
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator import contract
from vgpu_operator.core.dra.observed import DraApi
from vgpu_operator.core.dra.unschedulable import offer
from vgpu_operator.core.volcano.fit_context import FitContext
from vgpu_operator.core.volcano.never_fit import NeverFitContext, dra_offer, pod_causes
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import load_config
from vgpu_operator.models.node import NodeConfig

# A cluster whose vGPU count is named nvidia.com/gpu (HAMi's own default name,
# Project-HAMi/HAMi@v2.6.0:charts/hami/values.yaml `resourceName`) and that has no vGPU node: a
# pod asking it has no vGPU node to go to, unless the DRA nodes serve nvidia.com/gpu.
VGPU = FitContext(count_names=frozenset({"nvidia.com/gpu"}), gpu_sharing=False)
DRA = ("a30-0", "a30-1")


def slices(tmp_path: Path, nodes: tuple[str, ...] = DRA) -> list[dict[str, Any]]:
    out = []
    for node in nodes:
        state = fs.init_state(tmp_path / f"{node}.json", "A30", 2, node=node)
        out += dra_driver.resource_slices(node, state, node_uid=f"uid-{node}")
    return out


def context(tmp_path: Path, minor: int) -> NeverFitContext:
    return NeverFitContext(VGPU, offer(stored_device_classes(minor), slices(tmp_path), DRA))


def pending_pod(limits: dict[str, str], claims: list[dict[str, Any]] | None = None) -> Any:
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "containers": [{"name": "main", "resources": {"limits": limits}}],
    }
    status: dict[str, Any] = {"phase": "Pending"}
    if claims:
        spec["resourceClaims"] = claims
        status["resourceClaimStatuses"] = [
            {"name": c["name"], "resourceClaimName": f"p-{c['name']}"} for c in claims
        ]
    return {
        "metadata": {"name": "p", "namespace": "team-a", "uid": "u"},
        "spec": spec,
        "status": status,
    }


def ids(pod: Any, ctx: NeverFitContext, claims: dict[str, Any] | None = None) -> list[str]:
    return [c.id for c in pod_causes(pod, ctx, claims or {})]


def test_on_1_35_the_vgpu_causes_stand(tmp_path: Path) -> None:
    """The apiserver dropped extendedResourceName: the DRA nodes serve no extended resource."""
    assert ids(pending_pod({"nvidia.com/gpu": "1"}), context(tmp_path, 35)) == ["no-vgpu-node"]


def test_from_1_36_the_dra_nodes_count_for_a_mapped_resource(tmp_path: Path) -> None:
    ctx = context(tmp_path, 36)
    assert ids(pending_pod({"nvidia.com/gpu": "2"}), ctx) == []  # two A30s on each DRA node
    # more than a DRA node publishes: the DRA nodes cannot serve it either
    assert ids(pending_pod({"nvidia.com/gpu": "3"}), ctx) == ["no-vgpu-node"]
    # the scheduler's switch for legacy GPU sharing is what it is, DRA or not
    legacy = pending_pod({"nvidia.com/gpu": "1", "volcano.sh/gpu-memory": "1024"})
    assert ids(legacy, ctx) == ["gpu-sharing-off"]
    # no dra section (or no DRA API read): the vGPU causes alone
    assert ids(pending_pod({"nvidia.com/gpu": "2"}), NeverFitContext(VGPU)) == ["no-vgpu-node"]


def test_a_claim_pod_gets_the_claim_causes(tmp_path: Path) -> None:
    ctx = context(tmp_path, 35)
    pod = pending_pod({}, claims=[{"name": "gpu", "resourceClaimTemplateName": "t"}])
    mig = {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}
    }
    assert ids(pod, ctx, {"team-a/p-gpu": mig}) == ["dra-no-matching-device"]
    whole = {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
    }
    assert ids(pod, ctx, {"team-a/p-gpu": whole}) == []
    assert ids(pod, ctx, {}) == []  # its claim not read yet
    assert ids(pod, NeverFitContext(VGPU), {"team-a/p-gpu": mig}) == []  # no dra section
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "a30-0"}}
    assert ids(bound, ctx, {"team-a/p-gpu": mig}) == []  # not pending


WHOLE = NodeConfig(mode="dra", policy="pool", generation=1)


def dra_node(name: str) -> dict[str, Any]:
    return gpu_node(name, "A30", 2, released=WHOLE, tainted=False)


@pytest.fixture
def snapshot(tmp_path: Path) -> ClusterSnapshot:
    return ClusterSnapshot(
        config=load_config("dra: {}\n"),
        nodes=[dra_node("a30-0"), dra_node("a30-1"), gpu_node("vgpu-0", "A30", 2)],
        dra_api=DraApi(
            served=("resource.k8s.io/v1",),
            device_classes=tuple(stored_device_classes()),
            resource_slices=tuple(slices(tmp_path, ("a30-0", "a30-1", "vgpu-0"))),
        ),
    )


def test_a_snapshot_offers_the_settled_dra_nodes_devices(snapshot: ClusterSnapshot) -> None:
    dra = dra_offer(snapshot)
    assert dra is not None
    assert dra.dra_nodes == DRA and dra.unknown == ()
    assert {d.node for d in dra.devices} == set(DRA)  # vgpu-0 is in no dra pool
    # a node in a transition may change what it publishes: its devices are not known
    moving = dra_node("a30-1")
    moving["metadata"]["annotations"][contract.ANN_ROLLOUT] = "{}"
    s = dataclasses.replace(snapshot, nodes=[dra_node("a30-0"), moving])
    assert (dra_offer(s) or dra).unknown == ("a30-1",)
    # a node on its way into a dra pool (targeted, not released yet)
    arriving = gpu_node("a30-2", "A30", 2)
    arriving["metadata"]["annotations"][contract.ANN_TARGET] = WHOLE.to_annotation()
    s = dataclasses.replace(snapshot, nodes=[*snapshot.nodes, arriving])
    assert (dra_offer(s) or dra).unknown == ("a30-2",)


def test_nothing_is_offered_without_a_dra_section_or_its_api(snapshot: ClusterSnapshot) -> None:
    assert dra_offer(dataclasses.replace(snapshot, config=load_config(""))) is None
    assert dra_offer(dataclasses.replace(snapshot, dra_api=None)) is None
    old = DraApi(served=("resource.k8s.io/v1beta1",))
    assert dra_offer(dataclasses.replace(snapshot, dra_api=old)) is None

"""Never-fit warnings for claim pods, from the whole controller on the real apiserver (issue 33):
pods whose ResourceClaimTemplate asks what no DRA node serves (a DeviceClass that does not
exist; the MIG class on nodes whose GPUs run whole) get the Warning Event naming it, once; a pod
whose template fits gets none, and kube-scheduler places it on a DRA node.

The DRA nodes carry the released configuration the operator writes, and their slices are what
the driver's double publishes for them (vgpu_devcluster.dra_publish,
kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1); the DeviceClasses are the chart's. The operator
runs in observe mode: it writes nothing of its own, only the Events. Each template's claim is
made by kube-controller-manager's resourceclaim controller after the pod: the warning comes when
the claim index has it (controller.claims, controller.unschedulable)."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.helpers import event_reasons, eventually, unique
from tests.cluster.rbackit import session_values
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from tests.kit.drakit import claim_pod
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.dra_publish import (
    install_device_classes,
    publish,
    remove_device_classes,
    withdraw,
)
from vgpu_devcluster.install import apply, install_operator_roles, render_chart, wait_granted
from vgpu_devcluster.nodes import NodeSpec, create_gpu_nodes
from vgpu_operator import contract, kubeapi
from vgpu_operator.core.dra.unschedulable import REASONS
from vgpu_operator.models.config_dra import DEFAULT_PLUGIN_NAMESPACE as DRA_NS
from vgpu_operator.models.node import NodeConfig

__all__ = ["volcano_operator"]

RESOURCE = "/apis/resource.k8s.io/v1"
OURS = set(REASONS.values())
WHOLE = NodeConfig.model_validate({"mode": "dra", "policy": "dra-pool", "generation": 1})
WITHIN = 30.0  # seconds from a pod's creation to its Event (the claim is made after the pod)


def template(name: str, device_class: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


async def warnings(api: client.ApiClient, namespace: str, name: str) -> Counter[str]:
    """The operator's Warning Events on the pod, by reason (kube-scheduler's left out)."""
    found = await event_reasons(api, namespace, f"involvedObject.name={name},type=Warning")
    return Counter({reason: n for reason, n in found.items() if reason in OURS})


async def test_claim_pods_that_never_fit_get_their_warning_and_one_that_fits_none(
    api: client.ApiClient,
    namespace: str,
    volcano_operator: OperatorFactory,
    tmp_path: Path,
) -> None:
    # the chart's rights as rendered with a `dra` section (left in place, as test_dra_pool does)
    values = {**session_values(), "config.dra.dynamicMIG": "false"}
    await install_operator_roles(api, values, (DRA_NS,))
    cluster_role = render_chart("clusterrole.yaml", values=values)
    for doc in cluster_role:
        await apply(api, doc)
    await wait_granted(api, [*cluster_role, *render_chart("clusterrolebinding.yaml")])

    group = unique("du")
    nodes = [f"{group}-{i}" for i in range(2)]
    released = {contract.ANN_CONFIG: WHOLE.to_annotation()}
    placed = {contract.LABEL_DEVICE_PLUGIN: "dra"}
    specs = [
        NodeSpec(n, "A30", 2, labels=placed, annotations=released, nvidia_device_plugin=False)
        for n in nodes
    ]
    try:
        await create_gpu_nodes(api, specs)
        await install_device_classes(api)
        for n in nodes:  # what the driver's kubelet plugin publishes there: two whole A30s
            await publish(api, n, fs.init_state(tmp_path / f"{n}.json", "A30", 2, node=n))
        operator = volcano_operator("mode: observe\ndra: {}\n")

        async def passed() -> bool:
            ctl = operator.controller
            return ctl is not None and ctl.volcano is not None and ctl.volcano.passes >= 1

        await eventually(passed, timeout=60, interval=0.2)
        cases = {"fits": "gpu.nvidia.com", "mig": "mig.nvidia.com", "tpu": "tpu.example.com"}
        for name, device_class in cases.items():
            await kubeapi.request(
                api,
                "POST",
                f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
                body=template(name, device_class),
                field_manager=None,
            )
            path = f"/api/v1/namespaces/{namespace}/pods"
            await kubeapi.request(
                api, "POST", path, body=claim_pod(name, name, grace=0), field_manager=None
            )
        expected = {
            "mig": Counter({"NoMatchingDRADevice": 1}),
            "tpu": Counter({"DeviceClassMissing": 1}),
        }

        async def warned() -> bool:
            return all([await warnings(api, namespace, n) == c for n, c in expected.items()])

        await eventually(warned, timeout=WITHIN, interval=0.3)

        async def bound() -> bool:
            pod = await kubeapi.request(api, "GET", f"/api/v1/namespaces/{namespace}/pods/fits")
            return pod["spec"].get("nodeName") in nodes

        await eventually(bound, timeout=WITHIN, interval=0.3)
        # a pass more: still one Event per pod and cause, none for the pod that fits
        ctl = operator.controller
        assert ctl is not None and ctl.volcano is not None
        before = ctl.volcano.passes
        ctl.volcano.request()

        async def another() -> bool:
            return ctl.volcano is not None and ctl.volcano.passes > before

        await eventually(another, timeout=30, interval=0.2)
        for name, counted in expected.items():
            assert await warnings(api, namespace, name) == counted, name
        assert await warnings(api, namespace, "fits") == Counter()
        body = await kubeapi.request(
            api,
            "GET",
            f"/api/v1/namespaces/{namespace}/events",
            query={"fieldSelector": "involvedObject.name=mig,reason=NoMatchingDRADevice"},
        )
        [event] = body["items"]
        assert "device.attributes['gpu.nvidia.com'].type == 'mig'" in event["message"]
        assert f"(DRA nodes: {', '.join(nodes)})" in event["message"]
    finally:
        path = f"/api/v1/namespaces/{namespace}/pods"
        await kubeapi.request(api, "DELETE", path, query={"gracePeriodSeconds": "0"})
        for n in nodes:
            await withdraw(api, n)
            with contextlib.suppress(kubeapi.NotFound):
                await kubeapi.request(api, "DELETE", kubeapi.node_path(n), field_manager=None)
        await remove_device_classes(api)

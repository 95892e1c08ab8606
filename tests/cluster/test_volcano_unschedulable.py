"""Warning Events on pods that can never be scheduled, from the whole controller: each cause has
its Event within seconds of the pod's creation, one per pod and cause however many passes run,
and a pod that fits gets none. The same run shows from the audit log that no configuration pass
lists Pods or DaemonSets across the cluster: the only such lists are the pod index's and the
DaemonSet informer's first listings."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import (
    ClusterUnderTest,
    NodeFactory,
    PolicyFactory,
    event_reasons,
    eventually,
    unique,
)
from tests.cluster.volcano_env import SCHED_CM, SCHED_NS, VolcanoEnv, pod, volcano_env
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.controller.snapshot import configmap_path
from vgpu_operator.core.volcano.unschedulable import REASONS

__all__ = ["volcano_env", "volcano_operator"]

WITHIN = 10.0  # seconds from a pod's creation to its Event

OURS = set(REASONS.values())
NUMBER, MEMORY, MODE = "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-mode"


async def warnings(api: client.ApiClient, namespace: str, name: str) -> Counter[str]:
    """The operator's Warning Events on the pod, by reason."""
    found = await event_reasons(api, namespace, f"involvedObject.name={name},type=Warning")
    # kube-scheduler's own (FailedScheduling on the default-scheduler pod) left out
    return Counter({reason: n for reason, n in found.items() if reason in OURS})


async def create(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> None:
    await kubeapi.request(
        api, "POST", f"/api/v1/namespaces/{namespace}/pods", body=body, field_manager=None
    )


@pytest.fixture
async def pods_removed(api: client.ApiClient, namespace: str) -> AsyncIterator[None]:
    """The test's pods are gone before the next test (a namespace is deleted in the background,
    and a pending vGPU pod left behind would be seen by the next test's rules)."""
    yield
    path = f"/api/v1/namespaces/{namespace}/pods"
    await kubeapi.request(api, "DELETE", path, query={"gracePeriodSeconds": "0"})

    async def gone() -> bool:
        return not (await kubeapi.request(api, "GET", path)).get("items")

    await eventually(gone, timeout=60, interval=0.3)


async def first_pass(operator: OperatorThread) -> None:
    async def passed() -> bool:
        ctl = operator.controller
        return ctl is not None and ctl.volcano is not None and ctl.volcano.passes >= 1

    await eventually(passed, timeout=60, interval=0.2)


async def passes_after(operator: OperatorThread, env: VolcanoEnv, count: int) -> None:
    """`count` more configuration passes, each woken by an edit of the scheduler ConfigMap's
    annotations (a change the rules do not care about)."""
    ctl = operator.controller
    assert ctl is not None and ctl.volcano is not None
    volcano = ctl.volcano
    for _ in range(count):
        before = volcano.passes
        await env.patch(
            configmap_path(SCHED_NS, SCHED_CM),
            {"metadata": {"annotations": {"test/touch": unique("t")}}},
        )

        async def passed(before: int = before) -> bool:
            return volcano.passes > before

        await eventually(passed, timeout=30, interval=0.2)


async def test_a_vgpu_pod_with_no_node_in_a_vgpu_mode_gets_its_warning(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    volcano_operator: OperatorFactory,
    pods_removed: None,
) -> None:
    await make_nodes("A100-SXM4-80GB", 1, prefix="whole")  # a GPU node, no vGPU mode
    operator = volcano_operator("mode: report")
    await first_pass(operator)
    began = time.monotonic()
    await create(api, namespace, pod(namespace, "lonely", limits={NUMBER: "1"}))

    async def warned() -> bool:
        return await warnings(api, namespace, "lonely") == Counter({"NoVGPUNode": 1})

    await eventually(warned, timeout=WITHIN, interval=0.2)
    assert time.monotonic() - began <= WITHIN


# pod name -> (limits, annotations, schedulerName, the Event reasons it must get)
CASES: dict[str, tuple[dict[str, str], dict[str, str], str, Counter[str]]] = {
    "fits": ({NUMBER: "1", MEMORY: "3000"}, {}, "volcano", Counter()),
    "fits-mig": ({NUMBER: "1", MEMORY: "3000"}, {MODE: "mig"}, "volcano", Counter()),
    "mig-too-big": (
        {NUMBER: "1", MEMORY: "50000"},
        {MODE: "mig"},
        "volcano",
        Counter({"NoFittingMIGGeometry": 1}),
    ),
    "memory-too-big": (
        {NUMBER: "1", MEMORY: "60000"},
        {},
        "volcano",
        Counter({"VGPUMemoryTooLarge": 1}),
    ),
    "too-many": ({NUMBER: "8"}, {}, "volcano", Counter({"VGPUNumberTooLarge": 1})),
    "legacy": (
        {"volcano.sh/gpu-memory": "1024"},
        {},
        "volcano",
        Counter({"GPUSharingDisabled": 1}),
    ),
    "default-scheduler": (
        {NUMBER: "1"},
        {},
        "default-scheduler",
        Counter({"VGPUNotScheduledByVolcano": 1}),
    ),
    "mode-nobody-runs": ({NUMBER: "1"}, {MODE: "mps"}, "volcano", Counter({"NoVGPUNode": 1})),
}


async def test_each_unschedulable_pod_gets_one_warning_per_cause_and_a_fitting_pod_none(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    namespace: str,
    volcano_env: VolcanoEnv,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
    pods_removed: None,
) -> None:
    local = cluster.require_audit()
    env = volcano_env
    group = unique("g")
    await env.add_control_node()
    await env.add_nodes("RTX-4090", 1, gpus=2, released=None, labels={"test/group": f"{group}-h"})
    [a100] = await env.add_nodes(
        "A100-SXM4-40GB", 1, gpus=1, released=None, labels={"test/group": f"{group}-m"}
    )
    await env.install()
    await env.wait_running()
    offset = local.audit_offset()
    operator = volcano_operator("mode: report")
    # 2 x RTX 4090 (24564 MiB) in hami-core; 1 x A100-SXM4-40GB in mig, 7g.40gb at most
    for mode in ("hami-core", "mig"):
        selector = {"matchLabels": {"test/group": f"{group}-{mode[0]}"}}
        await policies(mode[0], {"nodeSelector": selector, "mode": mode})

    async def released() -> bool:
        nodes = [await kubeapi.request(api, "GET", kubeapi.node_path(n)) for n in env.nodes]
        return all(contract.ANN_CONFIG in n["metadata"].get("annotations", {}) for n in nodes)

    await eventually(released, timeout=60, interval=0.3)
    await first_pass(operator)
    await passes_after(operator, env, 1)  # a pass that saw the nodes released
    ctl = operator.controller
    assert ctl is not None and ctl.unschedulable.context is not None
    modes = {(s.mode, s.gpus) for s in ctl.unschedulable.context.shapes}
    assert modes == {("hami-core", 2), ("mig", 1)}, (modes, a100)

    took: dict[str, float] = {}
    for name, (limits, pod_annotations, scheduler, _) in CASES.items():
        body = pod(namespace, name, limits=limits, annotations=pod_annotations)
        body["spec"]["schedulerName"] = scheduler
        if scheduler == "default-scheduler":
            # no toleration: kube-scheduler cannot bind it to the tainted vGPU nodes
            del body["spec"]["tolerations"]
        began = time.monotonic()
        await create(api, namespace, body)
        want = CASES[name][3]
        if want:

            async def warned(name: str = name, want: Counter[str] = want) -> bool:
                return await warnings(api, namespace, name) == want

            await eventually(warned, timeout=WITHIN, interval=0.2)
            took[name] = time.monotonic() - began
    assert max(took.values()) <= WITHIN, took

    await passes_after(operator, env, 3)  # passes check every pending pod again
    await asyncio.sleep(1)  # an Event posted by the last pass has landed
    got = {name: await warnings(api, namespace, name) for name in CASES}
    assert got == {name: case[3] for name, case in CASES.items()}

    # The audit log: every list of Pods or DaemonSets across the cluster by the operator is
    # one of its two informers' listings, made when it started; every pass lists namespaced.
    ctl = operator.controller
    assert ctl is not None and ctl.volcano is not None
    lists = [
        e
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e["verb"] == "list" and e["objectRef"]["resource"] in ("pods", "daemonsets")
    ]
    wide = [
        (e["objectRef"]["resource"], parse_qs(urlsplit(e["requestURI"]).query).get("fieldSelector"))
        for e in lists
        if "namespace" not in e["objectRef"]
    ]
    assert sorted(wide, key=str) == [
        ("daemonsets", None),
        ("pods", ["status.phase!=Succeeded,status.phase!=Failed"]),
    ]
    watched = ctl.cache  # the informers fill the controller's cache
    assert watched.daemonsets is not None
    assert watched.pods.informer.lists == 1 and watched.daemonsets.lists == 1
    namespaced = Counter(
        (e["objectRef"]["namespace"], parse_qs(urlsplit(e["requestURI"]).query)["labelSelector"][0])
        for e in lists
        if "namespace" in e["objectRef"]
    )
    assert set(namespaced) == {
        ("volcano-system", "app=volcano-scheduler"),
        ("kube-system", "name=volcano-device-plugin"),
    }
    assert min(namespaced.values()) >= ctl.volcano.passes >= 4

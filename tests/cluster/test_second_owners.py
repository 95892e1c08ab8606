"""Second owners of the pools' GPUs against the real apiserver: HAMi's own device plugin, the
kubelet plugin of NVIDIA's DRA driver and the GPU Operator's mig-manager, created as their
projects ship them (tests/kit/second_owners.py: HAMi v2.10.0's and the DRA driver v0.4.1's charts
rendered by helm, the GPU Operator v26.7.0's asset) beside simulated nodes of the operator's
pools. Their pods need not run: the rules read each DaemonSet's placement (and, in `doctor`, the
pods it already has). Each rule names the component, the nodes and the fix, in `doctor`'s
snapshot and in the controller's (every DaemonSet from its watch, no pod but its components');
the agent refuses a static layout where its Node shows the other owner. Where the agent cannot
see an owner (the DRA driver leaves nothing on the Node) the controller, which reads its
DaemonSet, releases no static layout to the node, and says why."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.agentkit import (
    Agents,
    agent_kubeconfig_path,
    agents,
    release,
    static,
    wait_event,
    wait_state,
)
from tests.cluster.auditkit import audit_offset
from tests.cluster.helpers import ClusterUnderTest, NodeFactory, PolicyFactory, eventually, unique
from tests.cluster.volcano_env import HAMI, MIG, managed_node
from tests.kit.second_owners import (
    HAMI_NODE_LABEL,
    HAMI_REGISTERED,
    dra_kubelet_plugin,
    hami_device_plugin,
    mig_manager,
)
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import OPERATOR_NAMESPACE, OPERATOR_USER
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.app import USER_AGENT
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.controller.snapshot import compact_daemonset, read_snapshot, workload_path
from vgpu_operator.core.nodes.gpu_owners import (
    DRA_KUBELET_PLUGIN,
    HAMI_REGISTER_ANNOTATION,
    LAYOUT_HELD,
)
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.rules.base import Finding
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.node import (
    GPU_OPERATOR_MIG_CONFIG_LABEL,
    GPU_OPERATOR_MIG_MANAGER_LABEL,
    NodeConfig,
)

__all__ = ["agent_kubeconfig_path", "agents"]  # fixtures

DRA_DS = "dra-driver-nvidia-gpu/dra-driver-nvidia-gpu-kubelet-plugin"
MUTATING = {"-mig", "-r", "-cgi", "-cci", "-dci", "-dgi"}
SEVEN = static({"1g.10gb": 7})
Create = Callable[[dict[str, Any]], Awaitable[str]]


@pytest.fixture
async def create(api: client.ApiClient) -> AsyncIterator[Create]:
    """`await create(daemonset)`: the DaemonSet as its project ships it, in its namespace
    (created when missing); deleted after the test."""
    made: list[str] = []

    async def apply(ds: dict[str, Any]) -> str:
        namespace = ds["metadata"]["namespace"]
        with contextlib.suppress(kubeapi.Conflict):
            await kubeapi.request(
                api, "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}}
            )
        await kubeapi.request(
            api, "POST", workload_path("DaemonSet", namespace), body=ds, field_manager="helm"
        )
        path = workload_path("DaemonSet", namespace, ds["metadata"]["name"])
        made.append(path)
        return path

    yield apply
    for path in made:
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(api, "DELETE", path, query={"propagationPolicy": "Background"})


async def pool_node(
    make_nodes: NodeFactory,
    model: str,
    released: NodeConfig | None,
    *,
    tainted: bool,
    labels: dict[str, str] | None = None,
) -> str:
    """A node as the controller leaves it in a pool (released, labelled, tainted unless the
    policy sets `nodeTaints: []`), or outside every pool."""
    extra = managed_node(released) if released else {"labels": {}, "annotations": {}}
    [name] = await make_nodes(
        model,
        1,
        gpus=1,
        labels={**extra["labels"], **(labels or {})},
        taints=extra.get("taints") if tainted else None,
        annotations=extra["annotations"],
        prefix="so",
    )
    return name


async def annotate(api: client.ApiClient, node: str, annotations: dict[str, str]) -> None:
    await kubeapi.request(
        api,
        "PATCH",
        kubeapi.node_path(node),
        body={"metadata": {"annotations": annotations}},
        content_type=kubeapi.MERGE_PATCH,
        field_manager="hami-device-plugin",
    )


async def doctor_findings(api: client.ApiClient, rule_id: str) -> list[Finding]:
    """What `doctor` reports: everything listed across the cluster."""
    snapshot = await read_snapshot(api, OperatorConfig())
    return run_rules(snapshot, only=[rule_id]).findings


async def controller_findings(api: client.ApiClient, rule_id: str) -> list[Finding]:
    """What the controller's pass reports: every DaemonSet (compact, as its watch holds them),
    the GPU pods (none here) and only its components' pods."""
    listed = await kubeapi.request(api, "GET", "/apis/apps/v1/daemonsets")
    daemonsets = [compact_daemonset(d) for d in listed["items"]]
    snapshot = await read_snapshot(api, OperatorConfig(), gpu_pods=[], daemonsets=daemonsets)
    return run_rules(snapshot, only=[rule_id]).findings


def named(findings: list[Finding]) -> dict[str, set[str]]:
    """Each finding's objects, by the first object's text."""
    return {str(f.objects[0]): {str(o) for o in f.objects[1:]} for f in findings}


async def test_hamis_own_stack_beside_volcanos_plugin(
    api: client.ApiClient, make_nodes: NodeFactory, agents: Agents, create: Create
) -> None:
    vgpu = await pool_node(make_nodes, "RTX-4090", HAMI, tainted=False, labels=HAMI_NODE_LABEL)
    outside = await pool_node(make_nodes, "RTX-4090", None, tainted=False, labels=HAMI_NODE_LABEL)
    # a static-MIG node whose GPUs HAMi's plugin registered before the policy tainted it
    h100 = await agents.node("H100-80GB-HBM3", 1, labels=HAMI_NODE_LABEL)
    await release(api, h100.name, SEVEN)
    await annotate(api, h100.name, {HAMI_REGISTER_ANNOTATION: HAMI_REGISTERED})
    await create(hami_device_plugin())

    for findings in (
        await doctor_findings(api, "hami-stack-conflict"),
        await controller_findings(api, "hami-stack-conflict"),
    ):
        assert named(findings) == {
            "DaemonSet kube-system/hami-device-plugin": {f"Node {vgpu}", f"Node {h100.name}"}
        }, findings
        [f] = findings
        assert f.severity == "error" and outside not in f.message
        assert f"{vgpu} (vGPU: Volcano's HAMi plugin serves it)" in f.message
        assert f"{h100.name} (static MIG: the agent partitions it)" in f.message
        assert "devicePlugin.nvidiaNodeSelector" in f.fix

    # the agent sees HAMi's registration on its Node and leaves the GPUs alone
    agent = agents.start(h100, retry=1.0)
    await wait_state(api, h100.name, "blocked", agent)
    event = await wait_event(api, h100.name, "AnotherMIGManager")
    assert event["message"].startswith("HAMi's own device plugin (hami-device-plugin) has")
    assert [e["argv"] for e in h100.gpus.log() if MUTATING & set(e["argv"])] == []


async def test_the_dra_drivers_kubelet_plugin_on_vgpu_and_static_mig_nodes(
    api: client.ApiClient, make_nodes: NodeFactory, create: Create
) -> None:
    vgpu = await pool_node(make_nodes, "A100-SXM4-80GB", MIG, tainted=False)
    fixed = await pool_node(make_nodes, "A100-SXM4-80GB", SEVEN, tainted=False)
    shielded = await pool_node(make_nodes, "A100-SXM4-80GB", HAMI, tainted=True)
    outside = await pool_node(make_nodes, "A100-SXM4-80GB", None, tainted=False)
    path = await create(dra_kubelet_plugin())

    for findings in (
        await doctor_findings(api, "dra-driver-conflict"),
        await controller_findings(api, "dra-driver-conflict"),
    ):
        ds = "DaemonSet dra-driver-nvidia-gpu/dra-driver-nvidia-gpu-kubelet-plugin"
        assert named(findings) == {ds: {f"Node {vgpu}", f"Node {fixed}"}}, findings
        [f] = findings
        assert shielded not in f.message and outside not in f.message
        assert "DynamicMIG feature gate is on" in f.message
        assert "destroys every MIG instance it did not create" in f.message
        assert "kubeletPlugin.nodeSelector" in f.fix

    # the chart without the gate: it hands out the same GPUs, MIG instances stay
    await kubeapi.request(api, "DELETE", path, query={"propagationPolicy": "Background"})
    await create(dra_kubelet_plugin(dynamic_mig=False))
    [f] = await doctor_findings(api, "dra-driver-conflict")
    assert "one GPU can go to two pods" in f.message and "DynamicMIG" not in f.message


@pytest.fixture
def audited(cluster: ClusterUnderTest, installed: Credentials) -> Iterator[OperatorThread]:
    """The controller (enforce mode, its configuration reconciler on) under the operator's
    identity, the bodies of its writes in the audit log (`request_audited_kubeconfig`)."""
    local = cluster.require_audit()
    kubeconfig = local.request_audited_kubeconfig(
        "operator-second-owners",
        OPERATOR_USER,
        ("system:serviceaccounts", f"system:serviceaccounts:{OPERATOR_NAMESPACE}"),
    )
    running = OperatorThread(
        Credentials(kubeconfig=str(kubeconfig)),
        options=ReconcilerOptions(resync_seconds=3600),
    ).start()
    yield running
    running.stop()


async def test_the_controller_holds_the_static_layout_where_the_dra_plugin_reaches(
    api: client.ApiClient,
    cluster: ClusterUnderTest,
    make_nodes: NodeFactory,
    create: Create,
    audited: OperatorThread,
    policies: PolicyFactory,
) -> None:
    """The controller reads the kubelet plugin's DaemonSet from its watch: a node joining a
    static-MIG pool that the plugin reaches gets the pool's labels and target but no released
    layout, the policy's status and a Node Event say why, and the layout goes out once the
    plugin has left (the audit log: no PATCH of the node released one before)."""
    local = cluster.require_audit()
    offset = audit_offset(local)
    path = await create(dra_kubelet_plugin())
    pool = unique("pool")
    [node] = await make_nodes("A100-SXM4-80GB", 1, gpus=1, labels={"test/pool": pool}, prefix="so")
    spec = {
        "nodeSelector": {"matchLabels": {"test/pool": pool}},
        "mode": "mig",
        "mig": {"partitioning": "static", "layout": [{"gpus": "all", "profiles": {"1g.10gb": 7}}]},
        "nodeTaints": [],  # no taint keeps the shipped plugin off: it stays on the node
    }
    name = await policies("held", spec)

    async def held() -> bool:
        status = (await kubeapi.request(api, "GET", kubeapi.policy_path(name))).get("status")
        problems = (status or {}).get("problemNodes") or []
        return [(p["node"], p["reason"]) for p in problems] == [(node, LAYOUT_HELD)]

    await eventually(held, timeout=30)
    status = (await kubeapi.request(api, "GET", kubeapi.policy_path(name)))["status"]
    [problem] = status["problemNodes"]
    said = f"{DRA_KUBELET_PLUGIN} reaches this node (DaemonSet {DRA_DS}, DynamicMIG on"
    assert said in problem["message"]
    assert f"releases no static MIG layout to {node}" in problem["message"]
    assert "kubeletPlugin.nodeSelector" in problem["message"]  # the fix
    labels, annotations = await node_meta(api, node)
    assert labels[contract.LABEL_POLICY] == name and labels[contract.LABEL_MODE] == "mig"
    assert contract.ANN_TARGET in annotations and contract.ANN_CONFIG not in annotations
    [event] = await controller_events(api, node, LAYOUT_HELD)
    assert event["type"] == "Warning" and said in event["message"]
    # the rule names the same node, and the hold
    [f] = await controller_findings(api, "dra-driver-conflict")
    assert f"{node} (static MIG: no layout released to its agent yet)" in f.message
    assert "releases no static MIG layout to 1 of them" in f.message

    # the plugin gone, the layout is released in the next pass
    gone = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # before the delete is sent
    await kubeapi.request(api, "DELETE", path, query={"propagationPolicy": "Background"})

    async def released() -> bool:
        config = NodeConfig.from_annotation(
            (await node_meta(api, node))[1].get(contract.ANN_CONFIG)
        )
        return config is not None and config.gpu_mig is not None

    await eventually(released, timeout=60)

    # the audit log: the pool's labels went out while the plugin was there, the layout after
    async def both_logged() -> bool:
        return any(config_sent(p) for p in node_patches(local, offset, node))

    await eventually(both_logged, timeout=15)
    patches = node_patches(local, offset, node)
    assert any(not config_sent(p) and p["at"] < gone for p in patches), patches
    assert all(p["at"] > gone for p in patches if config_sent(p)), patches


async def node_meta(api: client.ApiClient, node: str) -> tuple[dict[str, str], dict[str, str]]:
    meta = (await kubeapi.request(api, "GET", kubeapi.node_path(node)))["metadata"]
    return meta.get("labels") or {}, meta.get("annotations") or {}


async def controller_events(api: client.ApiClient, node: str, reason: str) -> list[dict[str, Any]]:
    """The controller's Events on the node with `reason` (the agent's are its own component)."""
    body = await kubeapi.request(
        api,
        "GET",
        "/api/v1/namespaces/default/events",
        query={"fieldSelector": f"involvedObject.kind=Node,involvedObject.name={node}"},
    )
    return [
        e
        for e in body.get("items") or []
        if e.get("reason") == reason and (e.get("source") or {}).get("component") == USER_AGENT
    ]


def node_patches(local: LocalCluster, offset: int, node: str) -> list[dict[str, Any]]:
    """The operator's accepted PATCHes of the node since `offset`: when, and the body."""
    return [
        {"at": str(e.get("requestReceivedTimestamp", "")), "body": e.get("requestObject") or {}}
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e.get("verb") == "patch"
        and (e.get("objectRef") or {}).get("resource") == "nodes"
        and (e.get("objectRef") or {}).get("name") == node
        and int((e.get("responseStatus") or {}).get("code", 0)) < 300
    ]


def config_sent(patch: dict[str, Any]) -> bool:
    """The PATCH releases a configuration to the agent (`vgpu.volcano.sh/config`)."""
    annotations = (patch["body"].get("metadata") or {}).get("annotations") or {}
    return annotations.get(contract.ANN_CONFIG) is not None


async def test_the_gpu_operators_mig_manager_on_the_pools_mig_nodes(
    api: client.ApiClient, make_nodes: NodeFactory, create: Create
) -> None:
    on = {GPU_OPERATOR_MIG_MANAGER_LABEL: "true", GPU_OPERATOR_MIG_CONFIG_LABEL: "all-balanced"}
    fixed = await pool_node(make_nodes, "A100-SXM4-80GB", SEVEN, tainted=True, labels=on)
    dynamic = await pool_node(make_nodes, "A100-SXM4-80GB", MIG, tainted=True, labels=on)
    hami_core = await pool_node(make_nodes, "A100-SXM4-80GB", HAMI, tainted=True, labels=on)
    off = {GPU_OPERATOR_MIG_MANAGER_LABEL: "false", GPU_OPERATOR_MIG_CONFIG_LABEL: "all-disabled"}
    switched_off = await pool_node(make_nodes, "A100-SXM4-80GB", SEVEN, tainted=True, labels=off)
    await create(mig_manager())

    for findings in (
        await doctor_findings(api, "mig-manager-conflict"),
        await controller_findings(api, "mig-manager-conflict"),
    ):
        [f] = findings
        assert {str(o) for o in f.objects} == {
            "DaemonSet gpu-operator/nvidia-mig-manager",
            f"Node {fixed}",
            f"Node {dynamic}",
        }
        assert hami_core not in f.message and switched_off not in f.message
        assert f"{fixed} (static MIG, the agent's: " in f.message
        assert f"{dynamic} (dynamic MIG, HAMi's plugin's: " in f.message
        assert "disableNvidiaMigManager: true on the policies (pool)" in f.fix
    # the agent's refusal on such a node: test_agent_hardware.py
    # test_the_gpu_operators_mig_manager_gets_the_node_and_the_agent_says_why

"""Leaving a pool as safely as arriving, against the real apiserver: GPU pods bound to kwok nodes
stand for running work, evictions go through the Eviction API, the operator runs under the
chart's RBAC. A deleted policy's nodes that run GPU pods leave `maxUnavailable` at a time, each
drained before the operator's labels and taints come off, its finalizer held until the last has
left; a PodDisruptionBudget fails a leave (the node stays its pool's, cordoned, the finalizer
held) until the deleted policy's spec is edited; `onDelete: Retain` leaves them untouched;
`vgpu-operator cleanup` lets a running operator move them out (draining GPU pods only with
`--evict-gpu-pods`: without it no pod is evicted, busy nodes stay configured and are named, their
policy keeps its finalizer), and by hand without one it strips no node under GPU pods unless
`--force`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory, PolicyFactory, eventually, patch_spec, unique
from tests.cluster.rolloutkit import cordoned, gpu_pod, pod, pool_spec, rollout_of, wait_running
from vgpu_operator import contract, kubeapi
from vgpu_operator.commands.cleanup import Cleanup
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.models.config import OperatorConfig

pytestmark = pytest.mark.cluster

ENDED = ("Succeeded", "Failed")


def operator_keys(obj: dict[str, Any]) -> list[str]:
    meta = obj["metadata"]
    keys = [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]
    return sorted(k for k in keys if k.startswith(f"{contract.GROUP}/"))


def has_taint(obj: dict[str, Any], key: str) -> bool:
    return any(t.get("key") == key for t in (obj.get("spec") or {}).get("taints") or [])


@dataclass
class LeaveWatcher:
    """Samples the policy, then its nodes (one LIST), then the pods of nodes just released."""

    api: client.ApiClient
    policy: str
    selector: str
    pods_of: dict[str, list[str]]
    most: int = 0
    released: list[str] = field(default_factory=list)
    released_with_pods: list[tuple[str, str]] = field(default_factory=list)
    gone_while_moving: list[list[str]] = field(default_factory=list)
    progress: set[str] = field(default_factory=set)  # the policy's Reconciling messages
    samples: int = 0

    async def sample(self) -> None:
        # The policy first: once it is gone, no node may be in transition afterwards.
        try:
            obj = await kubeapi.request(self.api, "GET", kubeapi.policy_path(self.policy))
        except kubeapi.NotFound:
            obj = None
        if obj is not None:
            assert contract.FINALIZER in (obj["metadata"].get("finalizers") or [])
            for c in (obj.get("status") or {}).get("conditions") or []:
                if c["type"] == "Reconciling":
                    self.progress.add(c.get("message", ""))
        listed = await kubeapi.request(
            self.api, "GET", kubeapi.node_path(), query={"labelSelector": self.selector}
        )
        moving, newly = [], []
        for node in listed.get("items", []):
            name = node["metadata"]["name"]
            labels = node["metadata"].get("labels") or {}
            if rollout_of(node) is not None or cordoned(node):
                moving.append(name)
            if contract.LABEL_POLICY not in labels and name not in self.released:
                self.released.append(name)
                newly.append(name)
        if obj is None and moving:
            self.gone_while_moving.append(moving)
        for name in newly:  # read after the node: a pod still running outlived the release
            for key in self.pods_of.get(name, []):
                held = await pod(self.api, key)
                if held is not None and (held.get("status") or {}).get("phase") not in ENDED:
                    self.released_with_pods.append((name, key))
        self.most = max(self.most, len(moving))
        self.samples += 1

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[LeaveWatcher]:
        async def loop() -> None:
            while True:
                await self.sample()
                await asyncio.sleep(0.2)

        task = asyncio.create_task(loop())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await self.sample()  # and once more after the end


async def node_events(api: client.ApiClient, node: str) -> list[tuple[str, str]]:
    """The rollout's Events on the node, in the order the apiserver stored them."""
    selector = f"involvedObject.kind=Node,involvedObject.name={node}"
    listed = await kubeapi.request(api, "GET", "/api/v1/events", query={"fieldSelector": selector})
    rollout = ("TransitionStarted", "ConfigurationReleased", "TransitionComplete")
    events = sorted(
        (e for e in listed.get("items") or [] if e.get("reason") in rollout),
        key=lambda e: int(e["metadata"]["resourceVersion"]),  # etcd's: the order of creation
    )
    return [(e["reason"], e.get("message", "")) for e in events]


async def configured(api: client.ApiClient, nodes: list[str], policy: str) -> bool:
    for name in nodes:
        obj = await kubeapi.request(api, "GET", kubeapi.node_path(name))
        labels = obj["metadata"].get("labels") or {}
        if labels.get(contract.LABEL_POLICY) != policy or not has_taint(
            obj, contract.DEFAULT_TAINT_KEY
        ):
            return False
    return True


async def gone(api: client.ApiClient, policy: str) -> bool:
    try:
        await kubeapi.request(api, "GET", kubeapi.policy_path(policy))
    except kubeapi.NotFound:
        return True
    return False


async def pods_on(
    api: client.ApiClient, namespace: str, nodes: list[str], prefix: str
) -> dict[str, list[str]]:
    keys = {n: [await gpu_pod(api, namespace, f"{prefix}-{i}", n)] for i, n in enumerate(nodes)}
    await wait_running(api, [k for ks in keys.values() for k in ks])
    return keys


async def test_a_deleted_policy_moves_its_nodes_out_two_at_a_time_each_drained_first(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    operator: OperatorThread,
) -> None:
    pool = unique("leave")
    nodes = await make_nodes("A100-SXM4-80GB", 6, labels={"test/pool": pool})
    rollout: dict[str, Any] = {"maxUnavailable": 2, "drain": {"timeoutSeconds": 60}}
    name = await policies("leave", pool_spec(pool, **rollout))
    await eventually(lambda: configured(api, nodes, name), timeout=30)
    watcher = LeaveWatcher(
        api, name, f"test/pool={pool}", await pods_on(api, namespace, nodes, "job")
    )

    async with watcher.running():
        await kubeapi.request(api, "DELETE", kubeapi.policy_path(name), field_manager=None)
        await eventually(lambda: gone(api, name), timeout=120)

    assert watcher.most == 2, f"at most 2 nodes in transition, and 2 reached: {watcher.most}"
    assert sorted(watcher.released) == sorted(nodes)
    assert watcher.released_with_pods == [], "a node left its pool with GPU pods running"
    assert watcher.gone_while_moving == [], "the finalizer went before every node had left"
    assert any("in transition" in m for m in watcher.progress), watcher.progress
    for node in nodes:
        obj = await kubeapi.request(api, "GET", kubeapi.node_path(node))
        assert not cordoned(obj), f"{node} left cordoned"
        assert operator_keys(obj) == [], (node, operator_keys(obj))
        assert not has_taint(obj, contract.DEFAULT_TAINT_KEY)
        assert [await pod(api, k) for k in watcher.pods_of[node]] == [None], "evicted"
        # its Events tell the steps: cordon and drain, release, end (posted one by one, so
        # their order on a loaded machine is not the apiserver's to keep)
        said = await node_events(api, node)
        started = f"leaving the pool of policy {name}: cordoned, draining 1 GPU pod(s)"
        assert ("TransitionStarted", started) in said, said
        assert sorted(r for r, _ in said) == [
            "ConfigurationReleased",
            "TransitionComplete",
            "TransitionStarted",
        ], said


async def test_retain_leaves_nodes_running_gpu_pods_untouched(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    operator: OperatorThread,
) -> None:
    pool = unique("keep")
    nodes = await make_nodes("A100-SXM4-80GB", 2, labels={"test/pool": pool})
    spec = {**pool_spec(pool, maxUnavailable=1), "onDelete": "Retain"}
    name = await policies("keep", spec)
    await eventually(lambda: configured(api, nodes, name), timeout=30)
    keys = await pods_on(api, namespace, nodes, "keep")
    before = {n: await kubeapi.request(api, "GET", kubeapi.node_path(n)) for n in nodes}

    await kubeapi.request(api, "DELETE", kubeapi.policy_path(name), field_manager=None)
    await eventually(lambda: gone(api, name), timeout=30)

    for node in nodes:
        obj = await kubeapi.request(api, "GET", kubeapi.node_path(node))
        labels, old = obj["metadata"]["labels"], before[node]["metadata"]["labels"]
        assert labels == {k: v for k, v in old.items() if k != contract.LABEL_POLICY}
        assert obj["spec"].get("taints") == before[node]["spec"].get("taints")
        assert obj["metadata"]["annotations"][contract.ANN_RETAINED] == name
        assert not cordoned(obj) and rollout_of(obj) is None
        for key in keys[node]:
            running = await pod(api, key)
            assert running is not None and not running["metadata"].get("deletionTimestamp")


class HeardCleanup(Cleanup):
    """`vgpu-operator cleanup` in-process, keeping what it says."""

    def __init__(self, *, force: bool = False, evict: bool = False) -> None:
        super().__init__(
            OperatorConfig(),
            dry_run=False,
            stop_timeout=30.0,
            leave_timeout=90.0,
            force=force,
            evict_gpu_pods=evict,
        )
        self.said: list[str] = []

    def say(self, line: str) -> None:
        self.said.append(line)


async def stand_in_controller(
    api: client.ApiClient, namespace: str, make_nodes: NodeFactory
) -> tuple[str, str]:
    """The controller's Deployment as the chart installs it, its pod run by kwok on a CPU node
    of its own (the test's operator thread does the controller's work)."""
    control = unique("control")
    await make_nodes(None, 1, labels={"test/role": control}, prefix="cpu")
    labels = {"app.kubernetes.io/name": "vgpu-operator", "test/role": control}
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vgpu-operator"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"test/role": control},
                    "containers": [{"name": "controller", "image": "registry.example/vo:1"}],
                },
            },
        },
    }
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    await kubeapi.request(api, "POST", path, body=body, field_manager=None)

    async def available() -> bool:
        obj = await kubeapi.request(api, "GET", f"{path}/vgpu-operator")
        return bool((obj.get("status") or {}).get("availableReplicas"))

    await eventually(available, timeout=60)
    return namespace, "vgpu-operator"


async def test_cleanup_lets_the_running_operator_move_nodes_out_and_keeps_retained_ones(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    operator: OperatorThread,
) -> None:
    pool, kept = unique("gone"), unique("kept")
    leaving = await make_nodes("A100-SXM4-80GB", 2, labels={"test/pool": pool})
    [retained] = await make_nodes("A100-SXM4-80GB", 1, labels={"test/pool": kept})
    gone_policy = await policies("gone", pool_spec(pool, maxUnavailable=1))
    kept_policy = await policies("kept", {**pool_spec(kept), "onDelete": "Retain"})
    await eventually(lambda: configured(api, leaving, gone_policy), timeout=30)
    await eventually(lambda: configured(api, [retained], kept_policy), timeout=30)
    keys = await pods_on(api, namespace, [*leaving, retained], "work")
    controller = await stand_in_controller(api, namespace, make_nodes)

    cleanup = HeardCleanup(evict=True)
    await cleanup.run_with(api, controller)

    said = "\n".join(cleanup.said)
    assert cleanup.failed == [] and cleanup.skipped == [], said
    for policy in (gone_policy, kept_policy):
        assert f"vgpunodepolicy {policy}: deleted; the controller moves its nodes out" in said
        assert await gone(api, policy)
    assert f"vgpunodepolicy {gone_policy}: its nodes have left; finalizer released" in said
    kept_said = "its nodes were left as they are (onDelete: Retain); finalizer released"
    assert f"vgpunodepolicy {kept_policy}: {kept_said}" in said
    assert any(f"vgpunodepolicy {gone_policy}: releasing" in line for line in cleanup.said)
    assert f"deployment {controller[0]}/{controller[1]}: scaled to 0" in said
    for node in leaving:  # moved out by the operator: drained, stripped, uncordoned
        obj = await kubeapi.request(api, "GET", kubeapi.node_path(node))
        assert operator_keys(obj) == [] and not cordoned(obj), (node, operator_keys(obj))
        assert [await pod(api, k) for k in keys[node]] == [None]
    obj = await kubeapi.request(api, "GET", kubeapi.node_path(retained))
    assert obj["metadata"]["annotations"][contract.ANN_RETAINED] == kept_policy
    assert has_taint(obj, contract.DEFAULT_TAINT_KEY) and not cordoned(obj)
    assert f"node {retained}: left everything: policy {kept_policy} was deleted" in said
    running = await pod(api, keys[retained][0])
    assert running is not None and not running["metadata"].get("deletionTimestamp")


async def test_cleanup_evicts_no_gpu_pod_unless_told_and_says_so(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    operator: OperatorThread,
) -> None:
    """The default uninstall: the idle node leaves through the gate, the busy one keeps its
    configuration and its pod, is named with the pod and the flag, and its policy keeps the
    finalizer; run again with --evict-gpu-pods (the controller back), it is drained and left."""
    pool = unique("noevict")
    busy, idle = await make_nodes("A100-SXM4-80GB", 2, labels={"test/pool": pool})
    name = await policies("noevict", pool_spec(pool, maxUnavailable=2))
    await eventually(lambda: configured(api, [busy, idle], name), timeout=30)
    [key] = (await pods_on(api, namespace, [busy], "noevict"))[busy]
    controller = await stand_in_controller(api, namespace, make_nodes)

    cleanup = HeardCleanup()
    await cleanup.run_with(api, controller)
    said = "\n".join(cleanup.said)
    assert [line.split(":")[0] for line in cleanup.skipped] == [f"node {busy}"], said
    assert key in cleanup.skipped[0] and "--evict-gpu-pods" in cleanup.skipped[0]
    assert f"vgpunodepolicy {name}: kept its finalizer" in said
    running = await pod(api, key)
    assert running is not None and not running["metadata"].get("deletionTimestamp"), "evicted"
    kept = await kubeapi.request(api, "GET", kubeapi.node_path(busy))
    assert kept["metadata"]["labels"][contract.LABEL_POLICY] == name and not cordoned(kept)
    assert has_taint(kept, contract.DEFAULT_TAINT_KEY)
    left = await kubeapi.request(api, "GET", kubeapi.node_path(idle))
    assert operator_keys(left) == [] and not has_taint(left, contract.DEFAULT_TAINT_KEY)
    assert not await gone(api, name)

    scale = f"/apis/apps/v1/namespaces/{controller[0]}/deployments/{controller[1]}/scale"
    body = {"spec": {"replicas": 1}}
    await kubeapi.request(api, "PATCH", scale, body=body, content_type=kubeapi.MERGE_PATCH)
    deployment = f"/apis/apps/v1/namespaces/{controller[0]}/deployments/{controller[1]}"

    async def available() -> bool:
        obj = await kubeapi.request(api, "GET", deployment)
        return bool((obj.get("status") or {}).get("availableReplicas"))

    await eventually(available, timeout=60)
    again = HeardCleanup(evict=True)
    await again.run_with(api, controller)
    assert again.skipped == [] and again.failed == [], again.said
    assert await gone(api, name)
    assert await pod(api, key) is None, "drained through the policy's rollout"
    obj = await kubeapi.request(api, "GET", kubeapi.node_path(busy))
    assert operator_keys(obj) == [] and not cordoned(obj)


async def test_cleanup_by_hand_without_the_operator_skips_nodes_running_gpu_pods(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    operator: OperatorThread,
) -> None:
    pool = unique("hand")
    busy, idle = await make_nodes("A100-SXM4-80GB", 2, labels={"test/pool": pool})
    name = await policies("hand", pool_spec(pool))
    await eventually(lambda: configured(api, [busy, idle], name), timeout=30)
    [key] = (await pods_on(api, namespace, [busy], "hand"))[busy]
    operator.stop()  # the operator is gone; its policy and its nodes are not

    cleanup = HeardCleanup()
    await cleanup.run_with(api)
    said = "\n".join(cleanup.said)
    assert [line.split(":")[0] for line in cleanup.skipped] == [f"node {busy}"], said
    assert key in cleanup.skipped[0] and "--force" in cleanup.skipped[0]
    untouched = await kubeapi.request(api, "GET", kubeapi.node_path(busy))
    assert untouched["metadata"]["labels"][contract.LABEL_POLICY] == name
    assert has_taint(untouched, contract.DEFAULT_TAINT_KEY)
    stripped = await kubeapi.request(api, "GET", kubeapi.node_path(idle))
    assert operator_keys(stripped) == [] and not has_taint(stripped, contract.DEFAULT_TAINT_KEY)

    forced = HeardCleanup(force=True)
    await forced.run_with(api)
    assert forced.skipped == [] and forced.failed == [], forced.said
    obj = await kubeapi.request(api, "GET", kubeapi.node_path(busy))
    assert operator_keys(obj) == [] and not has_taint(obj, contract.DEFAULT_TAINT_KEY)
    assert await pod(api, key) is not None, "cleanup evicts nothing: it only stops skipping"


async def test_a_pdb_fails_the_leave_holds_the_finalizer_and_a_spec_edit_retries_it(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    operator: OperatorThread,
) -> None:
    pool = unique("pdb")
    [node] = await make_nodes("A100-SXM4-80GB", 1, labels={"test/pool": pool})
    name = await policies("pdb", pool_spec(pool, drain={"timeoutSeconds": 4}))
    await eventually(lambda: configured(api, [node], name), timeout=30)
    key = await gpu_pod(api, namespace, "db-0", node, labels={"app": "db"})
    await wait_running(api, [key])
    path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "db"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }
    await kubeapi.request(api, "POST", path, body=pdb, field_manager=None)

    async def pdb_forbids() -> bool:
        status = (await kubeapi.request(api, "GET", f"{path}/db")).get("status") or {}
        return status.get("disruptionsAllowed") == 0 and status.get("currentHealthy") == 1

    await eventually(pdb_forbids, timeout=30)
    await kubeapi.request(api, "DELETE", kubeapi.policy_path(name), field_manager=None)

    async def reported() -> bool:
        obj = await kubeapi.request(api, "GET", kubeapi.policy_path(name))
        problems = (obj.get("status") or {}).get("problemNodes") or []
        return any(p["node"] == node and p["reason"] == "DrainTimeout" for p in problems)

    await eventually(reported, timeout=30)
    obj = await kubeapi.request(api, "GET", kubeapi.node_path(node))
    r = rollout_of(obj)
    assert r is not None and r.kind == "leave" and r.failed and key in r.message
    assert cordoned(obj), "onFailure KeepCordoned (the default)"
    assert obj["metadata"]["labels"][contract.LABEL_POLICY] == name, "still its pool's"
    assert has_taint(obj, contract.DEFAULT_TAINT_KEY)
    held = await pod(api, key)
    assert held is not None and not held["metadata"].get("deletionTimestamp")
    deleting = await kubeapi.request(api, "GET", kubeapi.policy_path(name))
    assert contract.FINALIZER in deleting["metadata"]["finalizers"]

    # the PDB gone and the spec of the policy being deleted edited: the leave starts again
    await kubeapi.request(api, "DELETE", f"{path}/db", field_manager=None)
    await patch_spec(api, name, {"rollout": {"drain": {"timeoutSeconds": 30}}})
    await eventually(lambda: gone(api, name), timeout=60)
    obj = await kubeapi.request(api, "GET", kubeapi.node_path(node))
    assert operator_keys(obj) == [] and not cordoned(obj)
    assert await pod(api, key) is None

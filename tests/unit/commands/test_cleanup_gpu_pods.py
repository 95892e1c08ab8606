"""`vgpu-operator cleanup` evicts no GPU pod unless told (issue 29): against an in-memory
cluster whose controller is the pure core (decide, plan, PATCH, the evictions it asks for,
finalizers), the default uninstall annotates the policy `evict-gpu-pods: "false"`, lets the idle
node leave through the gate, keeps the busy node configured with its pod, names both the pod and
the flag, and keeps the policy's finalizer; `--evict-gpu-pods` drains it through the rollout."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.kit.nodekit import HAMI, apply, node, parsed, policy, reconcile
from vgpu_operator import contract, kubeapi
from vgpu_operator.commands import cleanup_operator
from vgpu_operator.commands.cleanup import Cleanup
from vgpu_operator.commands.cli import build_parser
from vgpu_operator.core.cleanup_nodes import finalizers_kept, only_gpu_pod_nodes_left
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.rollout.decide import GpuPod, decide_cluster
from vgpu_operator.core.rollout.leave import plan_with_leaves
from vgpu_operator.models.config import OperatorConfig

CONTROLLER = ("vgpu-system", "vgpu-operator")
DEPLOYMENT = "/apis/apps/v1/namespaces/vgpu-system/deployments/vgpu-operator"
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def gpu_pod(name: str, node_name: str) -> dict[str, Any]:
    limits = {"volcano.sh/vgpu-number": "1"}
    return {
        "metadata": {"name": name, "namespace": "team"},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": limits}}],
        },
        "status": {"phase": "Running"},
    }


class Cluster:
    """Nodes, policies, pods, and a controller that runs while its Deployment is scaled up."""

    def __init__(self) -> None:
        body = {**HAMI, "rollout": {"maxUnavailable": 2}}
        raw = [
            node("busy", {"pool": "a"}, gpu="rtx4090"),
            node("idle", {"pool": "a"}, gpu="rtx4090"),
        ]
        configured, _ = reconcile(raw, [policy("p", body)])
        self.nodes = {n["metadata"]["name"]: n for n in configured}
        made = policy("p", body)
        made["metadata"]["finalizers"] = [contract.FINALIZER]
        made["metadata"]["resourceVersion"] = "1"
        self.policies = {"p": made}
        self.pods = {"team/train": gpu_pod("train", "busy")}
        self.running = True
        self.evicted: list[str] = []
        self.now = T0

    # -- the controller ---------------------------------------------------------------------
    def controller_pass(self) -> None:
        if not self.running:
            return
        facts = [node_facts(n) for n in self.nodes.values()]
        policies = parsed(self.policies.values())
        pods: dict[str, tuple[GpuPod, ...]] = {}
        for key, pod in self.pods.items():
            at = pod["spec"]["nodeName"]
            pods[at] = (*pods.get(at, ()), GpuPod(key=key))
        plan = decide_cluster(facts, policies, self.now, pods=pods)
        cluster = plan_with_leaves(facts, policies, steps=plan.steps, held=plan.held)
        for name, p in cluster.plans.items():
            if p.patch is not None:
                self.nodes[name] = apply(self.nodes[name], p.patch)
        for step in plan.steps.values():
            for key in step.evict:
                self.evicted.append(key)
                self.pods.pop(key, None)
        self.now += timedelta(seconds=5)
        for name, p in list(self.policies.items()):
            meta = p["metadata"]
            held = any(
                (n["metadata"].get("labels") or {}).get(contract.LABEL_POLICY) == name
                or contract.ANN_ROLLOUT in (n["metadata"].get("annotations") or {})
                for n in self.nodes.values()
            )
            if meta.get("deletionTimestamp") and not held:
                meta["finalizers"] = []
                del self.policies[name]

    # -- the API ----------------------------------------------------------------------------
    async def request(self, api: Any, method: str, path: str, **kw: Any) -> dict[str, Any]:
        body = kw.get("body")
        if path == DEPLOYMENT:
            ready = 1 if self.running else 0
            return {
                "spec": {"replicas": ready, "selector": {"matchLabels": {"app": "vo"}}},
                "status": {"availableReplicas": ready},
            }
        if path == DEPLOYMENT + "/scale":
            self.running = False
            return {}
        for prefix, objects in (
            (kubeapi.node_path(""), self.nodes),
            (kubeapi.policy_path(""), self.policies),
        ):
            if path.startswith(prefix.rstrip("/") + "/"):
                name = path.rsplit("/", 1)[1]
                if name not in objects:
                    raise kubeapi.NotFound(404, "NotFound")
                if method == "GET":
                    return copy.deepcopy(objects[name])
                if method == "DELETE":
                    objects[name]["metadata"]["deletionTimestamp"] = "2026-03-01T00:00:00Z"
                    self.controller_pass()
                    return {}
                assert method == "PATCH", method
                patch = dict(body)
                rv = (patch.get("metadata") or {}).get("resourceVersion")
                if rv is None:
                    patch = {
                        **patch,
                        "metadata": {
                            **patch["metadata"],
                            "resourceVersion": objects[name]["metadata"].get(
                                "resourceVersion", "1"
                            ),
                        },
                    }
                objects[name] = apply(objects[name], patch)
                if objects is self.policies and not objects[name]["metadata"].get("finalizers"):
                    del objects[name]
                self.controller_pass()
                return {}
        raise kubeapi.NotFound(404, "NotFound")  # the plugin DaemonSets, the agent

    async def list_all(self, api: Any, path: str, options: Any = None) -> kubeapi.Listing:
        if path == kubeapi.policy_path():
            self.controller_pass()
            items: list[Mapping[str, Any]] = list(copy.deepcopy(self.policies).values())
        elif path == kubeapi.node_path():
            items = list(copy.deepcopy(self.nodes).values())
        elif path == "/api/v1/pods":
            items = list(copy.deepcopy(self.pods).values())
        else:
            items = []  # the controller's own pods: gone
        return kubeapi.Listing(items=items, resource_version="1")


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    c = Cluster()
    monkeypatch.setattr(kubeapi, "request", c.request)
    monkeypatch.setattr(kubeapi, "list_all", c.list_all)
    monkeypatch.setattr(cleanup_operator, "POLL_SECONDS", 0.0)
    return c


class Heard(Cleanup):
    def __init__(self, evict: bool) -> None:
        super().__init__(
            OperatorConfig(),
            dry_run=False,
            stop_timeout=1.0,
            leave_timeout=30.0,
            evict_gpu_pods=evict,
        )
        self.said: list[str] = []

    def say(self, line: str) -> None:
        self.said.append(line)


async def test_the_default_uninstall_evicts_nothing_keeps_the_busy_node_and_says_so(
    cluster: Cluster,
) -> None:
    before = copy.deepcopy(cluster.nodes["busy"])
    cleanup = Heard(evict=False)
    await cleanup.run_with(object(), CONTROLLER)
    said = "\n".join(cleanup.said)
    assert cluster.evicted == [] and "team/train" in cluster.pods
    assert [line.split(":")[0] for line in cleanup.skipped] == ["node busy"], said
    assert "team/train" in cleanup.skipped[0] and "--evict-gpu-pods" in cleanup.skipped[0]
    busy = cluster.nodes["busy"]
    assert busy["metadata"]["labels"] == before["metadata"]["labels"]  # still configured
    assert busy["spec"] == before["spec"]
    assert contract.LABEL_POLICY not in cluster.nodes["idle"]["metadata"]["labels"]  # it left
    p = cluster.policies["p"]  # deleted, its finalizer kept for a later run
    assert p["metadata"]["annotations"][contract.ANN_EVICT_GPU_PODS] == "false"
    assert p["metadata"]["deletionTimestamp"] and p["metadata"]["finalizers"]
    assert "vgpunodepolicy p: kept its finalizer" in said
    assert "every node left runs GPU pods" in said


async def test_evict_gpu_pods_drains_through_the_rollout(cluster: Cluster) -> None:
    cleanup = Heard(evict=True)
    await cleanup.run_with(object(), CONTROLLER)
    assert cleanup.skipped == [] and cleanup.failed == [], cleanup.said
    assert cluster.evicted == ["team/train"]
    assert cluster.policies == {}
    for n in cluster.nodes.values():
        assert contract.LABEL_POLICY not in n["metadata"]["labels"]


def test_the_flag_parses() -> None:
    parser = build_parser()
    assert parser.parse_args(["cleanup", "--evict-gpu-pods"]).evict_gpu_pods is True
    assert parser.parse_args(["cleanup"]).evict_gpu_pods is False


def test_only_busy_nodes_left_and_the_finalizers_they_keep() -> None:
    raw = [node("busy", {contract.LABEL_POLICY: "p"}), node("idle", {contract.LABEL_POLICY: "p"})]
    assert not only_gpu_pod_nodes_left(raw, {"p"}, {"busy"})
    assert only_gpu_pod_nodes_left(raw[:1], {"p"}, {"busy"})
    assert only_gpu_pod_nodes_left(raw, {"q"}, set())  # nothing of theirs left
    deleting = policy("p", HAMI, deleting=True)
    assert finalizers_kept(raw, [deleting], {"busy"}) == {"p": ["busy"]}
    assert finalizers_kept(raw, [policy("p", HAMI)], {"busy"}) == {}  # not deleted: released

"""The impersonation matrix (`impersonationkit.check_matrix` asks it): each row one request of a
ServiceAccount of the chart (the controller's, the node agent's, the uninstall hook's), what the
chart must not let it do with the refuser it names (RBAC, or an admission policy of
admission-policies.yaml), and the calls the operator, the agent and the hook really make, which
must be let through. Writes are server-side dry runs (`dryRun=All`: admission runs, nothing is
stored), so a rule that failed to refuse would still leave the cluster as it was.

The controller's Node writes by key (_nodekeys.tpl): it may not label, taint or annotate a Node
with a key of no one's list (any node alike: `example.com/anything` is in neither install's
config.policyKeys), nor remove a user's label, nor a `kubernetes.io/` label even when the
node's ownership record lists it; it may remove a label and a taint the record lists that no
list names any more (`Scene.released`: the release after the list was narrowed).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tests.cluster.helpers import unique
from tests.cluster.volcano_env import PLUGIN_DS, PLUGIN_NS, SCHED_NS
from vgpu_devcluster.install import OPERATOR_NAMESPACE
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import workload_path

STRATEGIC = "application/strategic-merge-patch+json"
DRY_RUN = {"dryRun": "All"}
SCHED_DEPLOY = "volcano-scheduler"
RBAC = "rbac"  # refused by the authorizer: "... cannot <verb> resource ..."
OBJECTS = "vgpu-operator-objects"  # refused by this ValidatingAdmissionPolicy
WORKLOADS = "vgpu-operator-workloads"
AGENT_NODE = "vgpu-operator-agent-own-node"
DENY_LABEL = "vgpu.volcano.sh/evictions"
# On the node whose ownership record lists keys no config.policyKeys names (`Scene.released`):
RELEASED = "example.com/released"  # label and taint the operator set before the list narrowed
USERS = "example.com/users"  # a user's label, not in the record
SYSTEM = "node-role.kubernetes.io/gpu"  # Kubernetes' own; a forged record lists it too
ARBITRARY = "example.com/anything"  # in no install's config.policyKeys


@dataclass(frozen=True)
class Row:
    """One request: who, what, and (for a forbidden row) who refuses it."""

    what: str
    who: str  # "operator", "agent", "hook"
    method: str
    path: str
    body: Any = None
    content_type: str = kubeapi.MERGE_PATCH
    refused_by: str = ""  # RBAC or a policy's name; "" for an allowed row
    query: dict[str, str] = field(default_factory=lambda: dict(DRY_RUN))


@dataclass
class Scene:
    """What the rows are about: the objects made for the test."""

    node_a: str  # the agent's pod runs here
    node_b: str
    released: str  # labels RELEASED, USERS, SYSTEM; taint RELEASED; a record of RELEASED, SYSTEM
    released_taints: list[dict[str, Any]]  # its taints as stored (RELEASED's, once Ready)
    agent_pod: str
    plugin_container: str
    plugin_args: list[str]
    scheduler_container: str
    host_pid: bool
    kube_system_pod: str  # a pod in kube-system that is not the plugin's
    evictable: str  # namespace/name: a pod in a namespace with no opt-out
    opted_out: str  # namespace/name: a pod in a namespace labelled vgpu.volcano.sh/evictions=deny
    fullname: str = "vgpu-operator"  # the release's fullname: its policies' and accounts' names
    namespace: str = OPERATOR_NAMESPACE  # the release namespace (the agent's pod runs there)

    def policy(self, name: str) -> str:
        """A policy of this install by its default name (`vgpu-operator-objects`, ...)."""
        return self.fullname + name.removeprefix("vgpu-operator")


def ds_path() -> str:
    return workload_path("DaemonSet", PLUGIN_NS, PLUGIN_DS)


def deploy_path() -> str:
    return workload_path("Deployment", SCHED_NS, SCHED_DEPLOY)


def template(spec: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"template": {"spec": spec}}}


def event(namespace: str, kind: str, name: str, ref_namespace: str = "") -> dict[str, Any]:
    involved = {"kind": kind, "name": name, "apiVersion": "v1"}
    if ref_namespace:
        involved["namespace"] = ref_namespace
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": unique("ev"), "namespace": namespace},
        "involvedObject": involved,
        "reason": "Test",
        "message": "impersonation matrix",
        "type": "Normal",
        "source": {"component": "vgpu-operator-agent"},
    }


def eviction(key: str, **delete_options: Any) -> tuple[str, dict[str, Any]]:
    namespace, _, name = key.partition("/")
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if delete_options:
        body["deleteOptions"] = delete_options
    return f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body


def forbidden_rows(s: Scene) -> list[Row]:
    c = s.plugin_container
    node_a, node_b = kubeapi.node_path(s.node_a), kubeapi.node_path(s.node_b)
    evict_system = eviction(f"kube-system/{s.kube_system_pod}")
    evict_opted_out = eviction(s.opted_out)
    evict_now = eviction(s.evictable, gracePeriodSeconds=0)
    taint = {"key": ARBITRARY, "value": "x", "effect": "NoExecute"}
    released = kubeapi.node_path(s.released)
    taint_any = {"spec": {"taints": [{"key": ARBITRARY, "value": "x", "effect": "NoSchedule"}]}}
    rows = [
        # -- the controller: the plugin DaemonSet, beyond args, nodeSelector, tolerations --
        Row("DS image", "operator", "PATCH", ds_path(),
            template({"containers": [{"name": c, "image": "evil.example.com/x:1"}]}),
            STRATEGIC, WORKLOADS),
        Row("DS serviceAccountName", "operator", "PATCH", ds_path(),
            template({"serviceAccountName": "default"}), STRATEGIC, WORKLOADS),
        Row("DS hostPID", "operator", "PATCH", ds_path(),
            template({"hostPID": not s.host_pid}), STRATEGIC, WORKLOADS),
        Row("DS hostNetwork", "operator", "PATCH", ds_path(),
            template({"hostNetwork": True}), STRATEGIC, WORKLOADS),
        Row("DS hostPath volume /", "operator", "PATCH", ds_path(),
            template({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
            STRATEGIC, WORKLOADS),
        Row("DS privileged container", "operator", "PATCH", ds_path(),
            template({"containers": [{"name": c, "securityContext": {"privileged": True}}]}),
            STRATEGIC, WORKLOADS),
        Row("DS container command", "operator", "PATCH", ds_path(),
            template({"containers": [{"name": c, "command": ["/bin/sh", "-c", "id"]}]}),
            STRATEGIC, WORKLOADS),
        Row("DS container env", "operator", "PATCH", ds_path(),
            template({"containers": [{"name": c, "env": [{"name": "X", "value": "y"}]}]}),
            STRATEGIC, WORKLOADS),
        Row("DS initContainer", "operator", "PATCH", ds_path(),
            template({"initContainers": [{"name": "i", "image": "busybox"}]}),
            STRATEGIC, WORKLOADS),
        Row("DS object label", "operator", "PATCH", ds_path(),
            {"metadata": {"labels": {"example.com/x": "y"}}}, kubeapi.MERGE_PATCH, WORKLOADS),
        Row("DS foreign object annotation", "operator", "PATCH", ds_path(),
            {"metadata": {"annotations": {"example.com/x": "y"}}}, kubeapi.MERGE_PATCH,
            WORKLOADS),
        Row("DS template annotation", "operator", "PATCH", ds_path(),
            {"spec": {"template": {"metadata": {"annotations": {"example.com/x": "y"}}}}},
            STRATEGIC, WORKLOADS),
        Row("DS updateStrategy", "operator", "PATCH", ds_path(),
            {"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None}}},
            STRATEGIC, WORKLOADS),
        Row("DS priorityClassName", "operator", "PATCH", ds_path(),
            template({"priorityClassName": "example-high"}), STRATEGIC, WORKLOADS),
        # -- the controller: the scheduler Deployment --
        Row("Deployment image", "operator", "PATCH", deploy_path(),
            template({"containers": [{"name": s.scheduler_container, "image": "evil:1"}]}),
            STRATEGIC, WORKLOADS),
        Row("Deployment replicas", "operator", "PATCH", deploy_path(),
            {"spec": {"replicas": 0}}, kubeapi.MERGE_PATCH, WORKLOADS),
        Row("Deployment serviceAccountName", "operator", "PATCH", deploy_path(),
            template({"serviceAccountName": "default"}), STRATEGIC, WORKLOADS),
        # -- the controller: objects RBAC or the objects policy keep from it --
        Row("create kube-system/aws-auth", "operator", "POST",
            "/api/v1/namespaces/kube-system/configmaps",
            {"metadata": {"name": "aws-auth"}, "data": {"mapRoles": "[]"}}, refused_by=OBJECTS),
        Row("delete a kube-system pod not the plugin's", "operator", "DELETE",
            f"/api/v1/namespaces/kube-system/pods/{s.kube_system_pod}", refused_by=OBJECTS),
        Row("evict in kube-system", "operator", "POST", evict_system[0], evict_system[1],
            refused_by=OBJECTS),
        Row("evict in an opted-out namespace", "operator", "POST", evict_opted_out[0],
            evict_opted_out[1], refused_by=OBJECTS),
        Row("evict with gracePeriodSeconds 0", "operator", "POST", evict_now[0], evict_now[1],
            refused_by=OBJECTS),
        Row("operator changes a Node's finalizers", "operator", "PATCH", node_b,
            {"metadata": {"finalizers": ["example.com/keep"]}}, refused_by=OBJECTS),
        Row("operator changes a Node's ownerReferences", "operator", "PATCH", node_b,
            {"metadata": {"ownerReferences": [
                {"apiVersion": "v1", "kind": "Namespace", "name": "default", "uid": "0"}]}},
            refused_by=OBJECTS),
        Row("operator changes a Node's providerID", "operator", "PATCH", node_b,
            {"spec": {"providerID": "kwok://elsewhere"}}, refused_by=OBJECTS),
        # -- the controller: Node keys (config.policyKeys, _nodekeys.tpl), any node alike --
        Row("operator taints every node with an arbitrary key: node A", "operator", "PATCH",
            node_a, taint_any, refused_by=OBJECTS),
        Row("operator taints every node with an arbitrary key: node B", "operator", "PATCH",
            node_b, taint_any, refused_by=OBJECTS),
        Row("operator labels a node with an arbitrary key", "operator", "PATCH", node_b,
            {"metadata": {"labels": {ARBITRARY: "x"}}}, refused_by=OBJECTS),
        Row("operator sets the agent's state label", "operator", "PATCH", node_b,
            {"metadata": {"labels": {contract.LABEL_STATE: "success"}}}, refused_by=OBJECTS),
        Row("operator annotates a Node with a foreign key", "operator", "PATCH", node_b,
            {"metadata": {"annotations": {ARBITRARY: "x"}}}, refused_by=OBJECTS),
        Row("operator removes a user's label its record does not list", "operator", "PATCH",
            released, {"metadata": {"labels": {USERS: None}}}, refused_by=OBJECTS),
        Row("operator removes a kubernetes.io label its record lists", "operator", "PATCH",
            released, {"metadata": {"labels": {SYSTEM: None}}}, refused_by=OBJECTS),
        Row("operator adds a taint under a recorded key no list names", "operator", "PATCH",
            released, {"spec": {"taints": [*s.released_taints, {
                "key": RELEASED, "value": "x", "effect": "PreferNoSchedule"}]}},
            refused_by=OBJECTS),
        Row("patch kube-proxy DaemonSet", "operator", "PATCH",
            workload_path("DaemonSet", "kube-system", "kube-proxy"),
            {"metadata": {"labels": {"x": "y"}}}, refused_by=RBAC),
        Row("patch coredns ConfigMap", "operator", "PATCH",
            "/api/v1/namespaces/kube-system/configmaps/coredns", {"data": {"x": "y"}},
            refused_by=RBAC),
        Row("read Secrets", "operator", "GET", "/api/v1/namespaces/kube-system/secrets",
            refused_by=RBAC, query={}),
        Row("create a Node", "operator", "POST", "/api/v1/nodes",
            {"metadata": {"name": unique("fake")}}, refused_by=RBAC),
        Row("delete a Node", "operator", "DELETE", node_b, refused_by=RBAC),
        Row("delete the scheduler Deployment", "operator", "DELETE", deploy_path(),
            refused_by=RBAC),
        Row("create a pod", "operator", "POST", "/api/v1/namespaces/kube-system/pods",
            {"metadata": {"name": "x"},
             "spec": {"containers": [{"name": "c", "image": "busybox"}]}}, refused_by=RBAC),
        Row("create a ClusterRoleBinding", "operator", "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {"metadata": {"name": unique("crb")},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "cluster-admin"},
             "subjects": [{"kind": "User", "name": "x"}]}, refused_by=RBAC),
        Row("delete its own admission policy binding", "operator", "DELETE",
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/"
            + s.policy(OBJECTS),
            refused_by=RBAC),
        # -- the agent --
        Row("agent patches another Node", "agent", "PATCH", node_b,
            {"metadata": {"labels": {contract.LABEL_STATE: "success"}}}, refused_by=AGENT_NODE),
        Row("agent changes its Node's finalizers", "agent", "PATCH", node_a,
            {"metadata": {"finalizers": ["example.com/keep"]}}, refused_by=AGENT_NODE),
        Row("agent changes its Node's ownerReferences", "agent", "PATCH", node_a,
            {"metadata": {"ownerReferences": [
                {"apiVersion": "v1", "kind": "Namespace", "name": "default", "uid": "0"}]}},
            refused_by=AGENT_NODE),
        Row("agent taints its Node", "agent", "PATCH", node_a,
            {"spec": {"taints": [taint]}}, refused_by=AGENT_NODE),
        Row("agent cordons its Node", "agent", "PATCH", node_a,
            {"spec": {"unschedulable": True}}, refused_by=AGENT_NODE),
        Row("agent sets a foreign label", "agent", "PATCH", node_a,
            {"metadata": {"labels": {"example.com/foreign": "x"}}}, refused_by=AGENT_NODE),
        Row("agent sets the operator's config annotation", "agent", "PATCH", node_a,
            {"metadata": {"annotations": {contract.ANN_CONFIG: "{}"}}}, refused_by=AGENT_NODE),
        Row("agent Event in kube-system", "agent", "POST",
            "/api/v1/namespaces/kube-system/events",
            event("kube-system", "Pod", s.kube_system_pod, "kube-system"), refused_by=AGENT_NODE),
        Row("agent Event about another Node", "agent", "POST", "/api/v1/namespaces/default/events",
            event("default", "Node", s.node_b), refused_by=AGENT_NODE),
        Row("agent Event about another pod", "agent", "POST",
            f"/api/v1/namespaces/{s.namespace}/events",
            event(s.namespace, "Pod", "someone-else", s.namespace),
            refused_by=AGENT_NODE),
        Row("agent events.k8s.io Event in kube-system", "agent", "POST",
            "/apis/events.k8s.io/v1/namespaces/kube-system/events",
            {"apiVersion": "events.k8s.io/v1", "kind": "Event",
             "metadata": {"name": unique("ev"), "namespace": "kube-system"},
             "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "x/y",
             "reportingInstance": "x", "action": "Test", "reason": "Test", "type": "Normal",
             "regarding": {"kind": "Node", "name": s.node_a}}, refused_by=AGENT_NODE),
        Row("agent deletes its Node", "agent", "DELETE", node_a, refused_by=RBAC),
        Row("agent evicts a pod", "agent", "POST", eviction(s.evictable)[0],
            eviction(s.evictable)[1], refused_by=RBAC),
        Row("agent patches the plugin DaemonSet", "agent", "PATCH", ds_path(),
            {"metadata": {"labels": {"x": "y"}}}, refused_by=RBAC),
        # -- the uninstall hook --
        Row("hook DS image", "hook", "PATCH", ds_path(),
            template({"containers": [{"name": c, "image": "evil.example.com/x:1"}]}),
            STRATEGIC, WORKLOADS),
        Row("hook DS hostPID", "hook", "PATCH", ds_path(),
            template({"hostPID": not s.host_pid}), STRATEGIC, WORKLOADS),
        Row("hook evicts a pod", "hook", "POST", eviction(s.evictable)[0],
            eviction(s.evictable)[1], refused_by=RBAC),
    ]  # fmt: skip
    # this install's policy names
    return [
        r if r.refused_by == RBAC else dataclasses.replace(r, refused_by=s.policy(r.refused_by))
        for r in rows
    ]


def allowed_rows(s: Scene) -> list[Row]:
    """Calls the operator, the agent and the hook make (core/volcano/workload_writes.py,
    controller/rollout.py, agent/nodeapi.py, commands/cleanup.py), dry runs."""
    c = s.plugin_container
    node_a = kubeapi.node_path(s.node_a)
    restart = {
        "spec": {
            "template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "x"}}}
        }
    }
    placement = template(
        {
            "nodeSelector": {contract.LABEL_DEVICE_PLUGIN: "hami"},
            "tolerations": [{"key": "example.com/pool", "operator": "Exists"}],
        }
    )
    placement["metadata"] = {"annotations": {contract.ANN_PLACEMENT: "{}"}}
    evict = eviction(s.evictable)
    return [
        Row("DS args", "operator", "PATCH", ds_path(),
            template({"containers": [{"name": c, "args": [*s.plugin_args, "--x=1"]}]}),
            STRATEGIC),
        Row("DS placement and its record", "operator", "PATCH", ds_path(), placement, STRATEGIC),
        Row("DS rollout restart", "operator", "PATCH", ds_path(), restart, STRATEGIC),
        Row("Deployment rollout restart", "operator", "PATCH", deploy_path(), restart,
            STRATEGIC),
        Row("Deployment args", "operator", "PATCH", deploy_path(),
            template({"containers": [{"name": s.scheduler_container, "args": ["--x=1"]}]}),
            STRATEGIC),
        Row("node labels, taint, cordon", "operator", "PATCH", node_a,
            {"metadata": {"labels": {contract.LABEL_POLICY: "p",
                                     "volcano.sh/vgpu.enabled": "true",
                                     contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL: "false"},
                          "annotations": {contract.ANN_TARGET: "{}"}},
             "spec": {"unschedulable": True,
                      "taints": [{"key": contract.DEFAULT_TAINT_KEY, "value": "x",
                                  "effect": "NoSchedule"}]}}),
        Row("remove a label and taint the record lists, no longer in the list", "operator",
            "PATCH", kubeapi.node_path(s.released),
            {"metadata": {"labels": {RELEASED: None}, "annotations": {contract.ANN_OWNED: None}},
             "spec": {"taints": [t for t in s.released_taints if t["key"] != RELEASED]
                      or None}}),
        Row("evict a GPU pod", "operator", "POST", evict[0], evict[1]),
        Row("agent state label", "agent", "PATCH", node_a,
            {"metadata": {"labels": {contract.LABEL_STATE: "success"}}}),
        Row("agent inventory annotation", "agent", "PATCH", node_a,
            {"metadata": {"annotations": {contract.ANN_INVENTORY: "{}"}}}),
        Row("agent Event about its Node", "agent", "POST", "/api/v1/namespaces/default/events",
            event("default", "Node", s.node_a)),
        Row("agent Event about its Pod", "agent", "POST",
            f"/api/v1/namespaces/{s.namespace}/events",
            event(s.namespace, "Pod", s.agent_pod, s.namespace)),
        Row("hook removes placement", "hook", "PATCH", ds_path(),
            template({"nodeSelector": None, "tolerations": []}), STRATEGIC),
    ]  # fmt: skip

"""The chart's least-privilege structure, as rendered:

- the admission policies and their bindings are in a `helm template` given no flags at all (no
  `--api-versions`, no `--kube-version`): nothing in the chart asks `.Capabilities` whether to
  render them, and the chart refuses a Kubernetes below 1.30, where they would not work;
- every pod of the chart mounts a ServiceAccount token only where the table below says its
  workload calls the apiserver, and every ServiceAccount mounts none unasked;
- the controller's pods (and the pods that carry its token or the hook's cluster-wide rights)
  stay off GPU nodes by default, overridably;
- the uninstall hook's objects, its cluster-wide ClusterRole and binding among them, are deleted
  whether the hook succeeds or fails, and before a new uninstall recreates them.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
import yaml

from tests.kit.chart_pods import pods
from vgpu_devcluster import binaries
from vgpu_devcluster.install import (
    AGENT_ADMISSION_POLICY,
    OPERATOR_ADMISSION_POLICY,
    chart_dir,
    render_chart,
)

Doc = dict[str, Any]
MONITORING_APIS = tuple(
    f"monitoring.coreos.com/v1/{kind}"
    for kind in ("PodMonitor", "ServiceMonitor", "PrometheusRule")
)


def _helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binaries.ensure("helm")), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _everything(values: dict[str, str] | None = None) -> list[Doc]:
    """Every object the chart renders, the monitoring ones included."""
    return render_chart(values=values, api_versions=MONITORING_APIS)


# -- admission policies: always rendered ------------------------------------------------------

# the plugin DaemonSets' and the scheduler Deployment's fields (admission-policies.yaml)
WORKLOADS_POLICY = "vgpu-operator-workloads"


def test_helm_template_with_no_flags_renders_every_admission_policy_and_binding() -> None:
    done = _helm("template", str(chart_dir()))
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    policies = {d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {
        d["metadata"]["name"]: d["spec"]
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    assert policies == {OPERATOR_ADMISSION_POLICY, AGENT_ADMISSION_POLICY, WORKLOADS_POLICY}
    assert {b["policyName"] for b in bindings.values()} == policies
    assert all(b["validationActions"] == ["Deny"] for b in bindings.values()), bindings
    for policy in (d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"):
        assert policy["spec"]["failurePolicy"] == "Fail", policy["metadata"]["name"]


def test_evictions_are_refused_in_kube_system_and_the_denied_namespaces() -> None:
    """The objects policy refuses the controller's evictions in kube-system (always), in
    admissionPolicies.evictions.deniedNamespaces and in a namespace labelled
    vgpu.volcano.sh/evictions=deny; the namespaces are in its CEL, once each."""
    values = {"admissionPolicies.evictions.deniedNamespaces": "{team-a,kube-system}"}
    docs = render_chart("admission-policies.yaml", values=values)
    policy = next(d for d in docs if d["metadata"]["name"] == OPERATOR_ADMISSION_POLICY)
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert any(r["resources"] == ["pods/eviction"] for r in rules), rules
    cel = " ".join(v["expression"] for v in policy["spec"]["validations"])
    assert '["kube-system","team-a"]' in cel, cel
    assert "'vgpu.volcano.sh/evictions'" in cel


ACTION = re.compile(r"\{\{(?!-?\s*/\*).*?\}\}", re.DOTALL)  # a template action, not a comment


def test_no_template_asks_capabilities_about_the_admission_api() -> None:
    """No `.Capabilities` test in the admission policies' template, and none about their API
    anywhere: the render cannot depend on what `helm template` is told."""
    for template in (chart_dir() / "templates").rglob("*"):
        if not template.is_file():
            continue
        for action in ACTION.findall(template.read_text()):
            assert "admissionregistration" not in action or "Capabilities" not in action, action
            if template.name == "admission-policies.yaml":
                assert "Capabilities" not in action, action


@pytest.mark.parametrize("version", ["1.28.0", "1.29.15", "v1.29.9-eks-1234"])
def test_a_kubernetes_below_1_30_is_refused(version: str) -> None:
    done = _helm("template", str(chart_dir()), "--kube-version", version)
    assert done.returncode != 0, f"helm template accepted Kubernetes {version}"
    assert ">=1.30.0-0" in done.stderr, done.stderr


@pytest.mark.parametrize("version", ["1.30.0", "v1.30.4-eks-1234", "1.31.0-gke.100"])
def test_kubernetes_1_30_and_vendor_builds_of_it_are_accepted(version: str) -> None:
    done = _helm("template", str(chart_dir()), "--kube-version", version)
    assert done.returncode == 0, done.stderr


# -- ServiceAccount tokens: only where the apiserver is called ------------------------------

# Every workload the chart renders (all enabled), by name: does its pod call the apiserver?
NEEDS_THE_API: dict[str, tuple[bool, str]] = {
    "vgpu-operator": (
        True,
        "the controller: watches Nodes, policies, pods, the Volcano/HAMi objects; writes them",
    ),
    "vgpu-operator-agent": (
        True,
        "the node agent: watches and patches its own Node (the pod-bound token's node-name "
        "claim is what its admission policy checks), posts Events",
    ),
    "vgpu-operator-cleanup": (
        True,
        "the uninstall hook: deletes the policies, scales the controller, strips the nodes",
    ),
    "vgpu-operator-test-doctor": (True, "`helm test`: doctor reads the cluster"),
}


def test_every_pod_mounts_a_token_exactly_when_its_workload_calls_the_apiserver() -> None:
    docs = _everything()
    rendered = dict(pods(docs))
    assert set(rendered) == set(NEEDS_THE_API), "a workload is missing from NEEDS_THE_API"
    for name, pod in rendered.items():
        needs, why = NEEDS_THE_API[name]
        # explicit on every pod: its ServiceAccount mounts none by default
        assert pod.get("automountServiceAccountToken") is needs, (name, why)


def test_no_service_account_mounts_its_token_unasked() -> None:
    accounts = [d for d in _everything() if d["kind"] == "ServiceAccount"]
    names = {a["metadata"]["name"] for a in accounts}
    assert names == {"vgpu-operator", "vgpu-operator-agent", "vgpu-operator-cleanup"}
    for account in accounts:
        assert account.get("automountServiceAccountToken") is False, account["metadata"]["name"]
    # and each pod runs as one of them, not as the namespace's `default`
    assert {pod["serviceAccountName"] for _, pod in pods(_everything())} <= names


# -- off GPU nodes -----------------------------------------------------------------------------

GFD_GPU_NODE = {"nvidia.com/gpu.present": "true", "kubernetes.io/os": "linux"}
CPU_NODE = {"kubernetes.io/os": "linux"}
# the GPU Operator's node labeller sets "false" on a node whose GPUs are gone
# (NVIDIA/gpu-operator@v26.7.0:controllers/nodelabeling_controller.go)
FORMER_GPU_NODE = {"nvidia.com/gpu.present": "false", "kubernetes.io/os": "linux"}


def _matches(expression: Doc, labels: dict[str, str]) -> bool:
    key, operator = expression["key"], expression["operator"]
    values = expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":  # a node without the label matches NotIn (node affinity semantics)
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {operator} not modelled here")


def _schedulable_on(pod: Doc, labels: dict[str, str]) -> bool:
    """The pod's nodeSelector and required nodeAffinity admit a node with `labels`."""
    if any(labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    required = (
        ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    if not required:
        return True
    return any(
        all(_matches(e, labels) for e in term.get("matchExpressions") or []) for term in required
    )


# The pods that carry the controller's token or the hook's cluster-wide rights.
OFF_GPU_NODES = ("vgpu-operator", "vgpu-operator-cleanup", "vgpu-operator-test-doctor")


def test_the_controller_and_its_token_carriers_stay_off_gpu_nodes_by_default() -> None:
    rendered = dict(pods(_everything()))
    for name in OFF_GPU_NODES:
        pod = rendered[name]
        assert not _schedulable_on(pod, GFD_GPU_NODE), name
        assert _schedulable_on(pod, CPU_NODE), name
        assert _schedulable_on(pod, FORMER_GPU_NODE), name
    # exactly where the agent is not
    agent = rendered["vgpu-operator-agent"]
    for node in (GFD_GPU_NODE, CPU_NODE, FORMER_GPU_NODE):
        assert _schedulable_on(agent, node) != _schedulable_on(rendered["vgpu-operator"], node)


def test_the_gpu_node_default_is_overridable() -> None:
    anywhere = dict(pods(_everything({"affinity.nodeAffinity": "null"})))
    for name in OFF_GPU_NODES:
        assert "affinity" not in anywhere[name], name
        assert _schedulable_on(anywhere[name], GFD_GPU_NODE), name
    # a podAntiAffinity of the user's keeps the default nodeAffinity beside it, and reaches
    # only the controller's replicas (the Job and the test Pod get the nodeAffinity alone)
    values = {
        "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight": "1",
        "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        ".podAffinityTerm.topologyKey": "kubernetes.io/hostname",
    }
    both = dict(pods(_everything(values)))
    assert set(both["vgpu-operator"]["affinity"]) == {"nodeAffinity", "podAntiAffinity"}
    assert not _schedulable_on(both["vgpu-operator"], GFD_GPU_NODE)
    for name in ("vgpu-operator-cleanup", "vgpu-operator-test-doctor"):
        assert set(both[name]["affinity"]) == {"nodeAffinity"}, name
    # nodeSelector, too, reaches all three
    pinned = dict(pods(_everything({"nodeSelector.node-role\\.kubernetes\\.io/infra": ""})))
    for name in OFF_GPU_NODES:
        assert pinned[name]["nodeSelector"] == {"node-role.kubernetes.io/infra": ""}, name


# -- the uninstall hook's objects never outlive it ----------------------------------------------

HOOK = "helm.sh/hook"
DELETE_POLICY = "helm.sh/hook-delete-policy"


def _annotations(doc: Doc) -> dict[str, str]:
    return doc["metadata"].get("annotations") or {}


def test_every_uninstall_hook_object_is_deleted_on_success_on_failure_and_before_a_rerun() -> None:
    hook_docs = render_chart("cleanup-hook.yaml")
    kinds = {d["kind"] for d in hook_docs}
    assert {"ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Job"} <= kinds
    for doc in hook_docs:
        what = (doc["kind"], doc["metadata"]["name"])
        annotations = _annotations(doc)
        # nothing in the template is an ordinary release object (it would stay until uninstall)
        assert annotations.get(HOOK) == "pre-delete", what
        policies = set(annotations[DELETE_POLICY].split(","))
        assert policies == {"before-hook-creation", "hook-succeeded", "hook-failed"}, what
    # the Job's output is printed by Helm before a failed Job is deleted
    [job] = [d for d in hook_docs if d["kind"] == "Job"]
    assert _annotations(job)["helm.sh/hook-output-log-policy"] == "hook-failed"
    # the rights exist before the Job starts (lower weight)
    weights = {d["kind"]: int(_annotations(d)["helm.sh/hook-weight"]) for d in hook_docs}
    assert all(w < weights["Job"] for k, w in weights.items() if k != "Job"), weights


def test_the_only_hooks_are_the_uninstall_cleanup_and_the_helm_test() -> None:
    hooks = {
        (d["kind"], d["metadata"]["name"]): _annotations(d)
        for d in _everything()
        if HOOK in _annotations(d)
    }
    assert {a[HOOK] for a in hooks.values()} == {"pre-delete", "test"}
    [(test, annotations)] = [(k, a) for k, a in hooks.items() if a[HOOK] == "test"]
    # the test Pod keeps its log for `helm test --logs`; it holds no rights of its own
    assert test == ("Pod", "vgpu-operator-test-doctor")
    assert annotations[DELETE_POLICY] == "before-hook-creation"

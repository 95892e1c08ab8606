"""Install the operator's CRDs and the chart's ServiceAccount and RBAC into a cluster, and get
credentials for that ServiceAccount: the operator then runs exactly as installed by Helm would
let it (tests and the demo both use this)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from vgpu_devcluster import binaries
from vgpu_devcluster.cluster import write_kubeconfig
from vgpu_operator import kubeapi
from vgpu_operator.kubeapi.credentials import Credentials

OPERATOR_NAMESPACE = "vgpu-system"
OPERATOR_SERVICE_ACCOUNT = "vgpu-operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_SERVICE_ACCOUNT}"
AGENT_SERVICE_ACCOUNT = "vgpu-operator-agent"
AGENT_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{AGENT_SERVICE_ACCOUNT}"
CLEANUP_SERVICE_ACCOUNT = "vgpu-operator-cleanup"  # the pre-delete hook's (cleanup-hook.yaml)
CLEANUP_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{CLEANUP_SERVICE_ACCOUNT}"

_PLURALS = {
    "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "CustomResourceDefinition": "customresourcedefinitions",
    "ConfigMap": "configmaps",
    "DaemonSet": "daemonsets",
    "Deployment": "deployments",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "VGPUNodePolicy": "vgpunodepolicies",
    "Node": "nodes",
    "Pod": "pods",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}

# The API the chart's admission policies use (Kubernetes 1.30+, the chart's kubeVersion). The
# chart renders them whatever the cluster serves (no `.Capabilities` test), so passing it to
# `helm template` changes nothing; callers that still pass it beside other APIs may.
VAP_API = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
OPERATOR_ADMISSION_POLICY = "vgpu-operator-objects"
AGENT_ADMISSION_POLICY = "vgpu-operator-agent-own-node"
# What install_operator_access installs from the chart, with the Roles of rbac-roles.yaml
# (`install_operator_roles`; the agent's admission policy is installed by
# `install_agent_admission`: it admits only tokens bound to a pod on the node).
OPERATOR_TEMPLATES = (
    "serviceaccount.yaml",
    "clusterrole.yaml",
    "clusterrolebinding.yaml",
    "leader-election-rbac.yaml",
    "admission-policies.yaml",
)


def chart_dir() -> Path:
    return binaries.repo_root() / "charts" / "vgpu-operator"


def crds_dir() -> Path:
    return binaries.repo_root() / "crds"


def object_path(manifest: dict[str, Any]) -> str:
    api_version: str = manifest["apiVersion"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    meta = manifest["metadata"]
    ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"{base}{ns}/{_PLURALS[manifest['kind']]}/{meta['name']}"


async def apply(api: client.ApiClient, manifest: dict[str, Any]) -> dict[str, Any]:
    """Create the object, or replace it if it exists (a small `kubectl apply`)."""
    path = object_path(manifest)
    try:
        return await kubeapi.request(
            api, "POST", path.rsplit("/", 1)[0], body=manifest, field_manager=None
        )
    except kubeapi.Conflict:
        pass
    current = await kubeapi.request(api, "GET", path)
    manifest = {**manifest, "metadata": {**manifest["metadata"]}}
    manifest["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    return await kubeapi.request(api, "PUT", path, body=manifest, field_manager=None)


def render_chart(
    *templates: str,
    values: dict[str, Any] | None = None,
    api_versions: tuple[str, ...] = (),
    values_files: tuple[Path, ...] = (),
) -> list[dict[str, Any]]:
    """`helm template` of the chart, optionally only some templates, for a cluster serving
    `api_versions` besides the built-in ones (the monitoring objects need theirs), with
    `values_files` (`-f`) and then `values` (`--set`)."""
    helm = binaries.ensure("helm")
    args = [str(helm), "template", "vgpu-operator", str(chart_dir()), "-n", OPERATOR_NAMESPACE]
    args += ["--kube-version", binaries.KUBERNETES_VERSION]
    for api_version in api_versions:
        args += ["--api-versions", api_version]
    for path in values_files:
        args += ["-f", str(path)]
    for key, value in (values or {}).items():
        args += ["--set", f"{key}={value}"]
    for t in templates:
        args += ["--show-only", f"templates/{t}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


async def install_operator_access(
    api: client.ApiClient, directory: Path, values: dict[str, Any] | None = None
) -> Credentials:
    """CRDs, namespace, ServiceAccount and RBAC from the chart (rendered with `values`, `--set`
    style, e.g. the test session's config.policyKeys); a kubeconfig in `directory` with the
    ServiceAccount's token. Returns once the RBAC is in force (`wait_granted`)."""
    for f in sorted(crds_dir().glob("*.yaml")):
        await apply(api, yaml.safe_load(f.read_text()))
    await apply(
        api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}}
    )
    docs = render_chart(*OPERATOR_TEMPLATES, values=values)
    docs = [d for d in docs if d["metadata"]["name"] != AGENT_ADMISSION_POLICY]
    for doc in docs:
        await apply(api, doc)
    await install_operator_roles(api, {})
    credentials = await service_account_credentials(api, OPERATOR_SERVICE_ACCOUNT, directory)
    await wait_crds_established(api)
    await wait_granted(api, docs)
    return credentials


async def install_operator_roles(
    api: client.ApiClient, values: dict[str, Any], namespaces: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The controller's Roles on the Volcano/HAMi objects (rbac-roles.yaml) as the chart renders
    them for `values` (`config.*`: the values the test's operator configuration is rendered
    from), only those in `namespaces` when given, their namespaces created when missing; returns
    what it applied, once it is in force (`wait_granted`). The Roles' namespaces (Volcano's and
    HAMi's) exist where Volcano is installed; on a test cluster they may not yet."""
    docs = [
        d
        for d in render_chart("rbac-roles.yaml", values=values)
        if not namespaces or d["metadata"]["namespace"] in namespaces
    ]
    for namespace in sorted({d["metadata"]["namespace"] for d in docs}):
        await ensure_namespace(api, namespace)
    for doc in docs:
        await apply(api, doc)
    await wait_granted(api, docs)
    return docs


async def install_agent_access(api: client.ApiClient, directory: Path) -> Credentials:
    """The node agent's ServiceAccount and RBAC from the chart; that ServiceAccount's token (the
    agent then runs with exactly what the chart grants the DaemonSet)."""
    await apply(
        api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}}
    )
    docs = render_chart("agent-serviceaccount.yaml", "agent-rbac.yaml")
    for doc in docs:
        await apply(api, doc)
    credentials = await service_account_credentials(api, AGENT_SERVICE_ACCOUNT, directory)
    await wait_granted(api, docs)
    return credentials


async def install_cleanup_access(api: client.ApiClient, directory: Path) -> Credentials:
    """The pre-delete hook's ServiceAccount and RBAC as the chart renders them (cleanup-hook.yaml,
    without its Job: kwok runs no container), left installed; that ServiceAccount's token (the
    cleanup then runs with exactly what the chart grants the hook)."""
    await ensure_namespace(api, OPERATOR_NAMESPACE)
    docs = [d for d in render_chart("cleanup-hook.yaml") if d["kind"] != "Job"]
    for namespace in sorted({d["metadata"]["namespace"] for d in docs if d["kind"] == "Role"}):
        await ensure_namespace(api, namespace)
    for doc in docs:
        await apply(api, doc)
    credentials = await service_account_credentials(api, CLEANUP_SERVICE_ACCOUNT, directory)
    await wait_granted(api, docs)
    return credentials


async def wait_granted(
    api: client.ApiClient, docs: list[dict[str, Any]], timeout: float = 30.0
) -> None:
    """Until the apiserver grants what the Roles and ClusterRoles in `docs` grant the
    ServiceAccounts their bindings in `docs` name: a SubjectAccessReview of each rule (its first
    verb, resource and name) per subject. The RBAC authorizer reads Roles and bindings from an
    informer cache, so a grant just applied may not be in force yet: an operator started at once
    was refused (403) every call for a moment."""
    roles = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    reviews: list[dict[str, Any]] = []
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        namespace = binding["metadata"].get("namespace", "")
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"]))
        for subject in binding.get("subjects") or []:
            if role is None or subject["kind"] != "ServiceAccount":
                continue
            user = f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
            for rule in role["rules"]:
                resource, _, subresource = rule["resources"][0].partition("/")
                attributes = {
                    "verb": rule["verbs"][0],
                    "group": rule["apiGroups"][0],
                    "resource": resource,
                    "subresource": subresource,
                    "namespace": namespace,
                    "name": (rule.get("resourceNames") or [""])[0],
                }
                reviews.append({"spec": {"user": user, "resourceAttributes": attributes}})
    deadline = time.monotonic() + timeout
    for review in reviews:
        while True:
            answer = await kubeapi.request(
                api,
                "POST",
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                body=review,
                field_manager=None,
            )
            if answer["status"].get("allowed"):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"not granted after {timeout}s: {review['spec']}")
            await asyncio.sleep(0.1)


async def install_agent_admission(api: client.ApiClient) -> list[dict[str, Any]]:
    """The chart's admission policy (and binding) that lets the agent change only its own Node;
    returns what it applied (for `remove`). The agent's tokens must then be bound to a pod on
    its node (`bound_token`)."""
    docs = [
        d
        for d in render_chart("admission-policies.yaml")
        if d["metadata"]["name"] == AGENT_ADMISSION_POLICY
    ]
    for doc in docs:
        await apply(api, doc)
    return docs


async def remove(api: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    """Delete these objects (bindings before their policies), ignoring those already gone."""
    for doc in reversed(docs):
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(api, "DELETE", object_path(doc), field_manager=None)


async def ensure_namespace(api: client.ApiClient, name: str) -> None:
    with contextlib.suppress(kubeapi.Conflict):
        await kubeapi.request(
            api, "POST", "/api/v1/namespaces", body={"metadata": {"name": name}}, field_manager=None
        )


async def bound_token(
    api: client.ApiClient, service_account: str, pod: str, pod_namespace: str
) -> str:
    """A token of `service_account` bound to a pod (TokenRequest with a Pod boundObjectRef):
    the apiserver adds the pod's node as the claim authentication.kubernetes.io/node-name
    (Kubernetes 1.32+), which the agent's admission policy checks."""
    uid = (await kubeapi.request(api, "GET", f"/api/v1/namespaces/{pod_namespace}/pods/{pod}"))[
        "metadata"
    ]["uid"]
    token = await kubeapi.request(
        api,
        "POST",
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/serviceaccounts/{service_account}/token",
        body={
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod, "uid": uid},
            }
        },
        field_manager=None,
    )
    return str(token["status"]["token"])


async def service_account_credentials(
    api: client.ApiClient, name: str, directory: Path
) -> Credentials:
    """A kubeconfig (`directory/kubeconfig-<name>`) with a TokenRequest token of the
    ServiceAccount `name` (a day long), and credentials that read it."""
    token = await kubeapi.request(
        api,
        "POST",
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/serviceaccounts/{name}/token",
        body={"spec": {"expirationSeconds": 86400}},
        field_manager=None,
    )
    ca = api.configuration.ssl_ca_cert
    path = write_kubeconfig(
        directory / f"kubeconfig-{name}",
        str(api.configuration.host),
        token["status"]["token"],
        Path(ca) if ca else None,
        f"system:serviceaccount:{OPERATOR_NAMESPACE}:{name}",
    )
    return Credentials(kubeconfig=str(path))


async def wait_crds_established(api: client.ApiClient, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    for f in sorted(crds_dir().glob("*.yaml")):
        name = yaml.safe_load(f.read_text())["metadata"]["name"]
        while True:
            crd = await kubeapi.request(
                api, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            )
            conds = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout}s")
            await asyncio.sleep(0.2)

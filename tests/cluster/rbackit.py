"""Reading the audit log for the RBAC check (test_rbac_audit.py): which identities are the
chart's ServiceAccounts, what each of their requests asked for, what the apiserver's authorizer
decided and why, and the SubjectAccessReview that asks it again; and clients as those
ServiceAccounts: the admin impersonating one (`acting_as`), one's own token (`token_kubeconfig`),
the agent's token bound to a pod of it on a node (`agent_on`)."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client, config

from tests.cluster.helpers import unique
from vgpu_devcluster import auditlog
from vgpu_devcluster.cluster import write_kubeconfig
from vgpu_devcluster.install import (
    AGENT_USER,
    CLEANUP_USER,
    OPERATOR_NAMESPACE,
    OPERATOR_USER,
    chart_dir,
    render_chart,
)
from vgpu_operator import kubeapi

Call = tuple[str, str, str, str, str, str]  # verb, group, resource, subresource, namespace, name
DECISION = "authorization.k8s.io/decision"  # "allow" or "forbid": RBAC's answer
REASON = "authorization.k8s.io/reason"  # which binding of which role allowed it
# What the chart's ServiceAccounts installed by vgpu_devcluster.install are (their RBAC stays
# installed for the whole session): the controller's, the agent's, the pre-delete hook's.
INSTALLED = (OPERATOR_USER, AGENT_USER, CLEANUP_USER)
SA_PREFIX = "system:serviceaccount:"
HELM_AGENT = "Helm/"  # Helm's user agent (`helm install`, `helm uninstall`)
# The chart's lease name (values.yaml leaderElection.leaseName). The leader-election tests run
# the operator under fresh lease names, each with the chart's Role rendered for that name and
# deleted afterwards (test_leader_processes.py `lease_name`): their calls are checked as the
# release's, which test_leader_election.py shows the value carries to the Role.
RELEASE_LEASE = "vgpu-operator"
_ALLOWED_BY = re.compile(r'allowed by (?:Cluster)?RoleBinding "([^"/]+)(?:/[^"]*)?"')

# The node label and taint keys the suite's policies ask for beyond the chart's defaults
# (values.yaml config.policyKeys): the session's admission policy lists them as a user's values
# would (`session_values`). matrixkit.py's arbitrary keys are not among them.
SUITE_LABEL_KEYS = (
    "team",
    "tier",
    "team/pool",
    "old/label",
    "new/label",
    "suspended/edit",
    "rotated/after",
    "restart/after",
    "failover/edit",
)
SUITE_TAINT_KEYS = ("example.com/gpu-pool",)


def chart_policy_keys() -> dict[str, list[str]]:
    """The chart's default config.policyKeys (values.yaml)."""
    values = yaml.safe_load((chart_dir() / "values.yaml").read_text())
    keys: dict[str, list[str]] = values["config"]["policyKeys"]
    return keys


def session_values() -> dict[str, str]:
    """`helm --set` values the session's chart objects are rendered with: the chart's
    policyKeys and the suite's (`vgpu_devcluster.install.install_operator_access`)."""
    chart = chart_policy_keys()

    def listed(keys: Iterable[str]) -> str:
        return "{" + ",".join(keys) + "}"

    return {
        "config.policyKeys.labels": listed([*chart["labels"], *SUITE_LABEL_KEYS]),
        "config.policyKeys.taints": listed([*chart["taints"], *SUITE_TAINT_KEYS]),
    }


# The audit lines the check reads (the log of a whole session is large; kwok's status writes
# alone are most of it): requests of ServiceAccounts, and what Helm stores and creates.
# and the apiserver's identity Lease (created at each start).
_NEEDLES = (
    b'"username":"system:serviceaccount:',
    b'"resource":"serviceaccounts"',
    b"sh.helm.",
    b'"name":"apiserver-',
)
# A starting kube-apiserver serves requests before its RBAC authorizer has filled its caches
# (its readyz check `informer-sync` waits for them), so a client reconnecting at once is refused
# for a moment; the local control plane restarts its apiserver in test_apiserver_restart.py.
START_SECONDS = 5.0


@contextlib.asynccontextmanager
async def acting_as(kubeconfig: Path, user: str) -> AsyncIterator[client.ApiClient]:
    """The admin impersonating `user` (a ServiceAccount: the apiserver adds its groups): RBAC
    and admission judge `user`, and the audit log names the admin as the user and `user` as
    `impersonatedUser` (test_rbac_audit.py leaves such probes out of its session check)."""
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    api.set_default_header("Impersonate-User", user)
    async with api:
        yield api


async def token_kubeconfig(
    api: client.ApiClient,
    namespace: str,
    account: str,
    directory: Path,
    *,
    bound_to: Mapping[str, Any] | None = None,
) -> Path:
    """A kubeconfig in `directory` with a TokenRequest token of the ServiceAccount, what its pods
    get (its own identity, not the admin impersonating it); `bound_to`: a pod of it, the token
    bound to that pod (the apiserver then adds the node-name and pod-name claims)."""
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    name = f"kubeconfig-{namespace}-{account}"
    if bound_to is not None:
        pod = bound_to["metadata"]
        spec["boundObjectRef"] = {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": pod["name"],
            "uid": pod["uid"],
        }
        name += f"-{pod['name']}"
    token = await kubeapi.request(
        api,
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        body={"spec": spec},
        field_manager=None,
    )
    ca = api.configuration.ssl_ca_cert
    return write_kubeconfig(
        directory / name,
        str(api.configuration.host),
        str(token["status"]["token"]),
        Path(ca) if ca else None,
        f"system:serviceaccount:{namespace}:{account}",
    )


@contextlib.asynccontextmanager
async def agent_on(
    api: client.ApiClient, node: str, namespace: str, account: str, directory: Path
) -> AsyncIterator[tuple[str, client.ApiClient]]:
    """A pod of the agent's ServiceAccount on `node` and a client with a token bound to it (the
    apiserver adds the node-name and pod-name claims)."""
    pod = unique("agent")
    pods = f"/api/v1/namespaces/{namespace}/pods"
    body = {
        "metadata": {"name": pod},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "containers": [{"name": "agent", "image": "vgpu-operator"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }
    created = await kubeapi.request(api, "POST", pods, body=body, field_manager=None)
    try:
        path = await token_kubeconfig(api, namespace, account, directory, bound_to=created)
        async with await config.new_client_from_config(config_file=str(path)) as agent:
            yield pod, agent
    finally:
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(api, "DELETE", f"{pods}/{pod}", query={"gracePeriodSeconds": "0"})


def session_events(audit_log: Path) -> list[dict[str, Any]]:
    """The audit events of the whole session that concern ServiceAccounts or Helm releases."""
    lines, _ = auditlog.whole_lines(audit_log)
    return [json.loads(line) for line in lines if any(n in line for n in _NEEDLES)]


def username(event: dict[str, Any]) -> str:
    """Who made the request, as authenticated: an impersonating admin stays the admin (the
    audit event names the impersonated user apart, in `impersonatedUser`)."""
    return str((event.get("user") or {}).get("username", ""))


def call_of(event: dict[str, Any]) -> Call | None:
    ref = event.get("objectRef") or {}
    if "resource" not in ref:
        return None  # a non-resource URL (discovery), allowed to every authenticated user
    return (
        event["verb"],
        ref.get("apiGroup", ""),
        ref["resource"],
        ref.get("subresource", ""),
        ref.get("namespace", ""),
        ref.get("name", ""),
    )


def calls_of(events: Iterable[dict[str, Any]]) -> set[Call]:
    return {c for e in events if (c := call_of(e)) is not None}


def decision(event: dict[str, Any]) -> str:
    return str((event.get("annotations") or {}).get(DECISION, ""))


def forbidden(events: Iterable[dict[str, Any]]) -> list[str]:
    """Requests RBAC refused, as lines a person can follow up (when, who, how, what)."""
    return [
        f"{e.get('requestReceivedTimestamp')} {username(e)} [{e.get('userAgent', '')}] "
        f"{e['verb']} {e['requestURI']}"
        for e in events
        if decision(e) == "forbid"
    ]


def as_released(call: Call) -> Call:
    verb, group, resource, subresource, namespace, name = call
    if (group, resource, namespace) == ("coordination.k8s.io", "leases", OPERATOR_NAMESPACE):
        return (verb, group, resource, subresource, namespace, name and RELEASE_LEASE)
    return call


async def allowed(api: client.ApiClient, user: str, call: Call) -> bool:
    """The apiserver's answer now, for `user` (a ServiceAccount, with its groups) and `call`."""
    verb, group, resource, subresource, namespace, name = call
    attrs = {"verb": verb, "group": group, "resource": resource, "subresource": subresource}
    attrs |= {"namespace": namespace, "name": name}
    # the groups every token of a ServiceAccount carries (system:authenticated: Kubernetes'
    # own grants to everyone, e.g. system:basic-user's SelfSubjectReview)
    account_namespace = user.removeprefix(SA_PREFIX).split(":")[0]
    groups = [
        "system:serviceaccounts",
        f"system:serviceaccounts:{account_namespace}",
        "system:authenticated",
    ]
    review = await kubeapi.request(
        api,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={"spec": {"user": user, "groups": groups, "resourceAttributes": attrs}},
        field_manager=None,
    )
    return bool(review["status"].get("allowed"))


@dataclass(frozen=True)
class Release:
    """A Helm release of the chart made in the session: its namespace, its fullname and the
    ServiceAccounts Helm created for it."""

    namespace: str
    fullname: str
    accounts: frozenset[str]

    @property
    def users(self) -> list[str]:
        return [f"{SA_PREFIX}{self.namespace}:{a}" for a in sorted(self.accounts)]

    def bindings(self) -> set[str]:
        """The names of the RoleBindings and ClusterRoleBindings the chart renders for it."""
        docs = render_chart(values={"fullnameOverride": self.fullname})
        return {
            d["metadata"]["name"]
            for d in docs
            if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        }


def helm_releases(events: list[dict[str, Any]]) -> list[Release]:
    """The chart's releases Helm installed in the session, from the ServiceAccounts Helm
    created (201): per namespace, the fullname is the one of those names the chart renders
    every other from (the controller's; the agent's and the hook's add a suffix to it)."""
    created: dict[str, set[str]] = {}
    for e in events:
        ref = e.get("objectRef") or {}
        if (
            e["verb"] == "create"
            and ref.get("resource") == "serviceaccounts"
            and str(e.get("userAgent", "")).startswith(HELM_AGENT)
            and (e.get("responseStatus") or {}).get("code") == 201
        ):
            created.setdefault(ref.get("namespace", ""), set()).add(ref.get("name", ""))
    # Helm keeps each release in a Secret sh.helm.release.v1.<release>.v<revision>: every
    # namespace that got one must have had the release's ServiceAccounts found above.
    # (Only the operator's chart: a release that made no Deployment is another chart's, such as
    # the CRD-only one of test_crd_upgrade_helm.py.)
    charted = {
        (e.get("objectRef") or {}).get("namespace", "")
        for e in events
        if e["verb"] == "create"
        and (e.get("objectRef") or {}).get("resource") == "deployments"
        and str(e.get("userAgent", "")).startswith(HELM_AGENT)
    }
    stored = {
        (e.get("objectRef") or {}).get("namespace", "")
        for e in events
        if e["verb"] == "create"
        and (e.get("objectRef") or {}).get("resource") == "secrets"
        and str((e.get("objectRef") or {}).get("name", "")).startswith("sh.helm.release.v1.")
    } & charted
    missing = stored - set(created)
    assert not missing, f"Helm releases whose ServiceAccounts were not found: {missing}"
    releases = []
    for namespace, names in sorted(created.items()):
        for fullname in sorted(names, key=len):
            rendered = {
                d["metadata"]["name"]
                for d in render_chart(values={"fullnameOverride": fullname})
                if d["kind"] == "ServiceAccount"
            }
            if names <= rendered:
                releases.append(Release(namespace, fullname, frozenset(names)))
                break
        else:
            raise AssertionError(f"Helm created ServiceAccounts {names} in {namespace}: no release")
    return releases


def granted_by(event: dict[str, Any]) -> str | None:
    """The binding RBAC allowed the request by (`authorization.k8s.io/reason`), by name."""
    match = _ALLOWED_BY.search(str((event.get("annotations") or {}).get(REASON, "")))
    return match.group(1) if match else None


def granted_to_everyone(event: dict[str, Any]) -> bool:
    """Allowed by Kubernetes' own grants to every authenticated user (system:basic-user's
    SelfSubjectReview, system:discovery), not by anything of the chart's."""
    reason = str((event.get("annotations") or {}).get(REASON, ""))
    return reason.endswith('to Group "system:authenticated"')


def _at(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["requestReceivedTimestamp"]))


def apiserver_starts(events: Iterable[dict[str, Any]]) -> list[datetime]:
    """When an apiserver (re)started: it creates its identity Lease (kube-system/apiserver-*)."""
    return [
        _at(e)
        for e in events
        if e["verb"] == "create"
        and username(e) == "system:apiserver"
        and (e.get("objectRef") or {}).get("resource") == "leases"
        and str((e.get("objectRef") or {}).get("name", "")).startswith("apiserver-")
        and (e.get("responseStatus") or {}).get("code") == 201
    ]


def at_a_start(event: dict[str, Any], starts: Iterable[datetime]) -> bool:
    """Was the request made within START_SECONDS of an apiserver start?"""
    return any(abs((_at(event) - t).total_seconds()) <= START_SECONDS for t in starts)

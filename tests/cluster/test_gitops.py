"""GitOps on the real apiserver, with `kubectl apply --server-side` as Argo CD applies (field
manager `argocd-controller`):

- a policy manifest re-applied after the operator reconciled it: no conflict, no change (the
  operator writes only the status and its finalizer), and a change in git still applies;
- the chart's rendered manifests re-applied: nothing the chart sets changes (the applier's
  managedFields, generation, resourceVersion; `kubectl diff --server-side` empty);
- the CRD upgrade path: an older CRD without a field (as Helm created it), then `kubectl apply
  --server-side --force-conflicts -f crds/`, and a policy using the field is accepted and stored.

The Volcano/HAMi objects the operator writes: test_gitops_volcano.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import subprocess
from functools import partial
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.auditkit import gone
from tests.cluster.helpers import EXAMPLES, NodeFactory, documents, eventually, unique
from tests.cluster.ssa import (
    ARGO,
    covered,
    differences,
    entry,
    kubectl,
    no_diff,
    owned,
    owned_by,
    server_side_apply,
)
from tests.cluster.volcano_env import (
    SCHED_NS,
    volcano_env,
)
from tests.cluster.volcano_ops import volcano_operator
from vgpu_devcluster import binaries
from vgpu_devcluster.install import (
    apply,
    chart_dir,
    crds_dir,
    ensure_namespace,
)
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.runner import OperatorThread

pytestmark = pytest.mark.cluster

__all__ = ["volcano_env", "volcano_operator"]

# -- the user's policy ---------------------------------------------------------------------


async def test_policy_manifest_reapplied_server_side_changes_nothing(
    api: client.ApiClient, kubeconfig: Path, make_nodes: NodeFactory, operator: OperatorThread
) -> None:
    group = unique("gitops")
    [node] = await make_nodes("A100-SXM4-80GB", 1, gpus=2, labels={"node-pool": group})
    [policy] = documents((EXAMPLES / "dedicated-vgpu-pool" / "policy.yaml").read_text())
    name = unique("gitops")
    policy["metadata"]["name"] = name
    policy["spec"]["nodeSelector"]["matchLabels"] = {"node-pool": group}
    manifest = yaml.safe_dump(policy)
    try:
        await server_side_apply(kubeconfig, manifest)

        async def reconciled() -> bool:
            got = await kubeapi.request(api, "GET", kubeapi.node_path(node))
            obj = await kubeapi.request(api, "GET", kubeapi.policy_path(name))
            status = obj.get("status") or {}
            return (
                got["metadata"]["labels"].get(contract.LABEL_POLICY) == name
                and status.get("observedGeneration") == obj["metadata"]["generation"]
            )

        await eventually(reconciled, timeout=60)
        await asyncio.sleep(1.1)  # managedFields times are in seconds: a write would show
        before = await kubeapi.request(api, "GET", kubeapi.policy_path(name))
        # the operator owns nothing of what git says: only the status, its finalizer and
        # Kopf's bookkeeping annotations (under the operator's own prefix)
        others = {m["manager"] for m in before["metadata"]["managedFields"]} - {ARGO}
        assert others, before["metadata"]["managedFields"]
        for manager in others:
            for path in owned_by(before, manager):
                assert (
                    path[0] == "status"
                    or path[:2] == ("metadata", "finalizers")
                    or (path[:2] == ("metadata", "annotations") and path[2] in KOPF_ANNOTATIONS)
                ), (manager, path)
        await no_diff(kubeconfig, manifest)
        [after] = await server_side_apply(kubeconfig, manifest)  # no --force-conflicts
        # git's fields untouched (its entry's time would move with any write of them); what
        # else changed meanwhile is the operator's status (it may report again at any time)
        assert entry(after, ARGO) == entry(before, ARGO)
        assert after["metadata"]["generation"] == before["metadata"]["generation"]
        changed = differences(before, after)
        assert all(p[0] == "status" or p[:2] in BOOKKEEPING for p in changed), changed

        # A change in git still applies without a conflict.
        policy["spec"]["hamiCore"]["deviceSplitCount"] = 5
        [changed] = await server_side_apply(kubeconfig, yaml.safe_dump(policy))
        assert changed["spec"]["hamiCore"]["deviceSplitCount"] == 5
        assert changed["metadata"]["generation"] == before["metadata"]["generation"] + 1
    finally:
        await delete_policy(api, name)


# What every write changes (a status write too).
BOOKKEEPING = {("metadata", "resourceVersion"), ("metadata", "managedFields")}
# Kopf's own marks on the policies it handles (controller.handlers: the operator's prefix):
# nolar/kopf@1.45.2:kopf/_cogs/configs/conventions.py (`kopf-managed`) and diffbase.py
KOPF_ANNOTATIONS = {
    f"{contract.GROUP}/kopf-managed",
    f"{contract.GROUP}/last-handled-configuration",
}


async def delete_policy(api: client.ApiClient, name: str) -> None:
    with contextlib.suppress(kubeapi.NotFound):
        await kubeapi.request(api, "DELETE", kubeapi.policy_path(name), field_manager=None)

    await eventually(partial(gone, api, name), timeout=30)


# -- the chart ------------------------------------------------------------------------------


# Kinds whose status the cluster's controllers keep writing (resourceVersion moves with it).
STATUS_WRITTEN = {"Deployment", "DaemonSet", "PodDisruptionBudget"}


async def test_chart_manifests_reapplied_server_side_change_nothing(
    api: client.ApiClient, kubeconfig: Path, installed: object
) -> None:
    """`helm template | kubectl apply --server-side`, three times, as Argo CD renders and
    applies the chart (its own release name and namespace here, so nothing of the session's
    install is touched). Hooks are left out: a GitOps tool runs them at their phase, not on
    every sync."""
    release = unique("gitops")
    await ensure_namespace(api, release)
    await ensure_namespace(api, SCHED_NS)
    # No --api-versions or --kube-version, as a pipeline that knows nothing of the cluster runs
    # it: the admission policies are rendered all the same.
    args = [str(binaries.ensure("helm")), "template", release, str(chart_dir()), "-n", release]
    args += ["--set", f"fullnameOverride={release}", "--no-hooks"]
    rendered = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    kinds = {d["kind"] for d in documents(rendered)}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds, kinds
    try:
        first = await server_side_apply(kubeconfig, rendered)
        assert len(first) == len(documents(rendered)) >= 15
        await asyncio.sleep(1.1)  # managedFields times are in seconds: a write would show
        await no_diff(kubeconfig, rendered)
        second = await server_side_apply(kubeconfig, rendered)
        await asyncio.sleep(1.1)
        third = await server_side_apply(kubeconfig, rendered)
        for a, b, c in zip(first, second, third, strict=True):
            what = (a["kind"], a["metadata"]["name"])
            # Nothing the chart sets changed: the same fields owned, the same generation, and
            # whatever changed meanwhile is the cluster's controllers' own (the admission
            # policies' type checking, the Deployment's rollout and revision, the
            # PodDisruptionBudget's counts).
            for x, y in ((a, b), (b, c)):
                assert entry(y, ARGO)["fieldsV1"] == entry(x, ARGO)["fieldsV1"], what
                assert y["metadata"].get("generation") == x["metadata"].get("generation"), what
                mine = owned(entry(y, ARGO)["fieldsV1"])
                changed = differences(x, y)
                assert not any(
                    covered(p, mine) or covered(m, {p}) for p in changed for m in mine
                ), (
                    what,
                    changed,
                )
            # From the second sync on not even the applier's entry is touched. (The first one
            # after a controller's first server-side status write, the admission policies' type
            # checking, re-stamps the applier's managedFields time once: the apiserver's doing,
            # with the same fields and spec.)
            assert entry(c, ARGO) == entry(b, ARGO), what
            if c["kind"] not in STATUS_WRITTEN:
                assert c["metadata"]["resourceVersion"] == b["metadata"]["resourceVersion"], what
    finally:
        await kubectl(
            kubeconfig, "delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=rendered
        )
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(api, "DELETE", f"/api/v1/namespaces/{release}")


# -- the CRD upgrade path ------------------------------------------------------------------

ADDED_FIELD = "suspend"  # an optional field, read by no CEL rule


async def test_crd_upgrade_with_server_side_apply_adds_a_field(
    api: client.ApiClient, kubeconfig: Path, installed: object
) -> None:
    """A cluster whose CRD came from an older release (created by Helm, which never upgrades
    crds/) lacks a field; `kubectl apply --server-side -f crds/` names the conflict with Helm's
    field manager, with `--force-conflicts` it takes the CRD over, and a policy using the field
    is then accepted and stored."""
    [path] = sorted(crds_dir().glob("*.yaml"))
    current = yaml.safe_load(path.read_text())
    crd_path = (
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{current['metadata']['name']}"
    )
    older = copy.deepcopy(current)
    for version in older["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert ADDED_FIELD not in json.dumps(spec.get("x-kubernetes-validations", []))
        del spec["properties"][ADDED_FIELD]
    live = await kubeapi.request(api, "GET", crd_path)
    older["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    await kubeapi.request(api, "PUT", crd_path, body=older, field_manager="helm")
    name = unique("upgrade")
    body = {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {"node-pool": name}},
            "mode": "hami-core",
            ADDED_FIELD: True,
        },
    }
    strict = {"fieldValidation": "Strict"}
    try:

        async def old_schema_served() -> bool:
            try:
                await kubeapi.request(
                    api, "POST", kubeapi.policy_path(), body=body, query={"dryRun": "All", **strict}
                )
            except kubeapi.ApiError as exc:
                return exc.status in (400, 422) and ADDED_FIELD in exc.body
            return False

        await eventually(old_schema_served, timeout=30, interval=0.3)

        # Helm created the CRD (field manager "helm"): taking its fields over is the intent, and
        # a plain server-side apply says whose they are and asks for exactly that.
        upgrade = ("apply", "--server-side", "-f", str(crds_dir()))
        code, _, err = await kubectl(kubeconfig, *upgrade)
        assert code != 0 and 'conflict with "helm"' in err and "--force-conflicts" in err, err
        code, _, err = await kubectl(kubeconfig, *upgrade, "--force-conflicts")
        assert code == 0, err

        async def accepted() -> bool:
            try:
                await kubeapi.request(api, "POST", kubeapi.policy_path(), body=body, query=strict)
            except kubeapi.ApiError as exc:
                refusals.append(exc)  # the new schema not served yet
                return False
            return True

        refusals: list[kubeapi.ApiError] = []

        await eventually(accepted, timeout=30, interval=0.3)
        assert all(ADDED_FIELD in exc.body for exc in refusals), refusals
        stored = await kubeapi.request(api, "GET", kubeapi.policy_path(name))
        assert stored["spec"][ADDED_FIELD] is True
    finally:
        await apply(api, current)  # whatever happened, the session's CRD is the current one
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(api, "DELETE", kubeapi.policy_path(name), field_manager=None)

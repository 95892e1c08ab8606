"""The Volcano/HAMi objects the operator writes, kept in git: the two set-ups of
examples/gitops/, on the real apiserver with `kubectl apply --server-side` as Argo CD syncs
(field manager `argocd-controller`, conflicts forced).

- `report` mode: git keeps owning every field; a sync finds nothing to change and the operator
  writes none of them.
- `enforce`: the fields the operator writes are owned by its field manager alone; a sync
  without a rule would write git's values over exactly those fields (which is why the example's
  `ignoreDifferences` names them, by `managedFieldsManagers: [vgpu-operator]`), and a sync that
  respects the rule changes no value.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import (
    EXAMPLES,
    ClusterUnderTest,
    PolicyFactory,
    documents,
    eventually,
    unique,
)
from tests.cluster.ssa import (
    ARGO,
    Obj,
    covered,
    differences,
    entry,
    get,
    no_diff,
    owned_by,
    put,
    server_side_apply,
)
from tests.cluster.volcano_env import (
    DEVICE_CM,
    NODE_CM,
    PLUGIN_NS,
    SCHED_CM,
    SCHED_NS,
    VolcanoEnv,
    consistent_condition,
    hami,
    volcano_env,
)
from tests.cluster.volcano_ops import OperatorFactory, operator_writes, volcano_operator
from vgpu_devcluster.install import object_path
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path

pytestmark = pytest.mark.cluster

__all__ = ["volcano_env", "volcano_operator"]


def argo_ignored(example: str) -> dict[tuple[str, str, str], Obj]:
    """(kind, namespace, name) -> the ignoreDifferences entry of the `volcano-hami`
    Application in an examples/gitops file."""
    [app] = [
        d
        for d in documents((EXAMPLES / "gitops" / example).read_text())
        if d["kind"] == "Application" and d["metadata"]["name"] == "volcano-hami"
    ]
    return {
        (i["kind"], i["namespace"], i["name"]): i for i in app["spec"].get("ignoreDifferences", [])
    }


def git_copy(env: VolcanoEnv, live: dict[str, Obj]) -> list[Obj]:
    """What git holds: the ConfigMaps as installed (read back: ConfigMaps have no defaults),
    the plugin DaemonSet and the scheduler Deployment as the environment generates them."""
    docs: list[Obj] = []
    for path in (
        configmap_path(SCHED_NS, SCHED_CM),
        configmap_path(PLUGIN_NS, DEVICE_CM),
        configmap_path(PLUGIN_NS, NODE_CM),
    ):
        meta = live[path]["metadata"]
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "data": live[path]["data"],
            }
        )
    docs.append(env.plugin_daemonset())
    docs.append(env.scheduler_deployment("v1.15.0"))
    for doc in docs:
        doc.setdefault("apiVersion", "apps/v1")
    return docs


async def live_objects(api: client.ApiClient, docs: list[Obj]) -> list[Obj]:
    return [await kubeapi.request(api, "GET", object_path(d)) for d in docs]


def dump(docs: list[Obj]) -> str:
    return yaml.safe_dump_all(docs)


async def test_volcano_objects_in_git_report_mode_and_operator_owned(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    kubeconfig: Path,
    volcano_env: VolcanoEnv,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    env = volcano_env
    group = unique("g")
    await env.add_control_node()
    await env.add_nodes("RTX-4090", 1, gpus=2, released=None, labels={"test/group": group})
    await env.install(scheduler_conf="seed002_scheduler.conf")
    await env.wait_running()
    configmaps = {
        p: await kubeapi.request(api, "GET", p)
        for p in (
            configmap_path(SCHED_NS, SCHED_CM),
            configmap_path(PLUGIN_NS, DEVICE_CM),
            configmap_path(PLUGIN_NS, NODE_CM),
        )
    }
    git = git_copy(env, configmaps)
    await server_side_apply(kubeconfig, dump(git), "--force-conflicts")  # adopted by "Argo CD"

    # (b) report mode: git keeps owning everything, a sync finds nothing to do.
    offset = local.audit_offset()
    op = volcano_operator("mode: report")
    policy = await policies("gitops", hami(group))

    async def reported() -> bool:
        cond = await consistent_condition(api, policy)
        return cond.get("reason") == "Inconsistent" and "report mode" in cond.get("message", "")

    try:
        await eventually(reported, timeout=60)
    except AssertionError:
        obj = await kubeapi.request(api, "GET", kubeapi.policy_path(policy))
        raise AssertionError(json.dumps(obj.get("status"))) from None
    before = await live_objects(api, git)
    await no_diff(kubeconfig, dump(git))
    synced = await server_side_apply(kubeconfig, dump(git), "--force-conflicts")
    for a, b in zip(before, synced, strict=True):
        assert entry(b, ARGO) == entry(a, ARGO), a["metadata"]["name"]
        assert b["metadata"].get("generation") == a["metadata"].get("generation")
        assert not owned_by(b, contract.FIELD_MANAGER), a["metadata"]["name"]
    writes = operator_writes(local, offset)
    assert not {w for w in writes if w[1] in ("configmaps", "daemonsets", "deployments")}, writes
    op.stop()

    # (a) enforce: the operator writes; what it writes only its field manager owns.
    offset = local.audit_offset()
    op = volcano_operator(restart_settle_seconds=1.0)

    async def consistent() -> bool:
        # the ConfigMaps rewritten: no error left (the plugin's placement, a restart, may wait
        # for the restart limits and is reported as a warning meanwhile)
        cond = await consistent_condition(api, policy)
        return cond.get("status") == "True" or cond.get("reason") == "Warnings"

    try:
        await eventually(consistent, timeout=90)
    except AssertionError:
        raise AssertionError(json.dumps(await consistent_condition(api, policy))) from None
    op.stop()  # what a GitOps tool meets once the operator has written
    written = {
        (w[1], w[2], w[3])
        for w in operator_writes(local, offset)
        if w[1] in ("configmaps", "daemonsets", "deployments")
    }
    assert written
    ignored = argo_ignored("argocd-operator-owns.yaml")
    assert argo_ignored("argocd-report-mode.yaml") == {}
    live = await live_objects(api, git)
    kinds = {"ConfigMap": "configmaps", "DaemonSet": "daemonsets", "Deployment": "deployments"}
    reverted: set[tuple[str, str, str]] = set()
    for doc, obj in zip(git, live, strict=True):
        key = (doc["kind"], doc["metadata"]["namespace"], doc["metadata"]["name"])
        mine = owned_by(obj, contract.FIELD_MANAGER)
        if (kinds[doc["kind"]], key[1], key[2]) in written:
            assert mine, key
        # Argo CD without a rule: its forced sync would write git's values over the operator's
        # fields where git sets them too (and no other field differs). Fields git does not set
        # (a restart's annotation) are left alone by a server-side apply and need no rule.
        [would] = await server_side_apply(
            kubeconfig, dump([doc]), "--force-conflicts", "--dry-run=server"
        )
        changed = differences(
            {k: would.get(k) for k in ("data", "spec")}, {k: obj.get(k) for k in ("data", "spec")}
        )
        assert all(covered(p, mine) for p in changed), (key, changed, mine)
        if not changed:
            continue
        reverted.add(key)
        rule = ignored.get(key)
        assert rule is not None, f"a sync would revert the operator's {changed} of {key}"
        assert contract.FIELD_MANAGER in rule["managedFieldsManagers"], rule
        # With the rule and RespectIgnoreDifferences: the ignored fields are sent as they are
        # live, and the sync changes no value (at most Argo CD becomes their co-owner).
        respected = copy.deepcopy(doc)
        for p in mine:
            put(respected, p, get(obj, p))
        [after] = await server_side_apply(kubeconfig, dump([respected]), "--force-conflicts")
        assert after["metadata"].get("generation") == obj["metadata"].get("generation"), key
        for part in ("data", "spec"):
            assert differences(after.get(part), obj.get(part)) == set(), (key, part)
    assert reverted, written  # the operator wrote fields git sets, which the rules keep

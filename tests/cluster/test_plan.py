"""`vgpu-operator plan` against the real apiserver, as a subprocess: a policy not applied yet
(`-f`, exit 1, its nodes enter), the same policy once the operator has applied it (`plan NAME`,
exit 0), a mode change of that pool while GPU pods run on it (exit 1: every node disruptive,
the pods named, the rollout order by maxUnavailable; the same plan offline, over what
`doctor --save-snapshot` read), and bad input (exit 2: usage, as
commands/exitcodes.py's table says). It only reads: the audit log has no write of its user in
the meantime."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import (
    ClusterUnderTest,
    NodeFactory,
    PolicyFactory,
    cli,
    eventually,
    unique,
)
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.runner import OperatorThread

pytestmark = pytest.mark.cluster


async def plan(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    return await cli("plan", "--kubeconfig", str(kubeconfig), *args)


def policy_file(tmp_path: Path, name: str, spec: dict[str, Any]) -> Path:
    doc = {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def gpu_pod(namespace: str, name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": "nvidia/cuda:12.2.0-base-ubuntu22.04",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


# The time of a plan, in the rollout's records of the nodes it takes (`since`, `started`).
PLAN_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def at_any_time(data: Any) -> Any:
    """`data` with every time to the microsecond (a plan's "now") masked."""
    return json.loads(PLAN_TIME.sub("<now>", json.dumps(data)))


def writes_by_admin(cluster: ClusterUnderTest, offset: int) -> list[dict[str, Any]]:
    local = cluster.require_audit()
    return [
        e
        for e in local.audit_events(user="admin", offset=offset)
        if e["verb"] not in ("get", "list", "watch")
    ]


async def test_plan_a_new_policy_then_a_mode_change_with_gpu_pods(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    kubeconfig: Path,
    tmp_path: Path,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    operator: OperatorThread,
    namespace: str,
) -> None:
    pool = unique("plan")
    nodes = await make_nodes("A100-SXM4-80GB", 3, gpus=8, labels={"test/pool": pool})
    spec: dict[str, Any] = {
        "nodeSelector": {"matchLabels": {"test/pool": pool}},
        "mode": "hami-core",
        "rollout": {"maxUnavailable": 2},
    }
    # a policy not applied yet: its nodes enter the pool; nothing is written
    offset = cluster.require_audit().audit_offset()
    code, out, err = await plan(kubeconfig, "-f", str(policy_file(tmp_path, "new-pool", spec)))
    assert code == 1, out + err
    for name in nodes:
        assert f"  + {name} -> new-pool (hami-core)" in out, out
    assert "neither Volcano nor HAMi's plugin is installed" in out
    assert writes_by_admin(cluster, offset) == []

    # applied and converged: nothing more to do
    name = await policies("pool", spec)

    async def configured() -> bool:
        for n in nodes:
            node = await kubeapi.request(api, "GET", kubeapi.node_path(n))
            if node["metadata"].get("labels", {}).get(contract.LABEL_POLICY) != name:
                return False
        return True

    await eventually(configured, timeout=60)
    code, out, err = await plan(kubeconfig, name)
    assert code == 0, out + err
    assert out.startswith(f"Plan for {name}:\n  nothing would change.\n"), out

    # GPU pods on two nodes, then a change of the pool's mode
    for i in (0, 2):
        await kubeapi.request(
            api,
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            body=gpu_pod(namespace, f"train-{i}", nodes[i]),
        )

    async def running() -> bool:
        pods = await kubeapi.request(api, "GET", f"/api/v1/namespaces/{namespace}/pods")
        return sorted(p["status"].get("phase") for p in pods["items"]) == ["Running"] * 2

    await eventually(running, timeout=60)
    changed = {**spec, "mode": "mig", "mig": {"partitioning": "dynamic"}}
    offset = cluster.require_audit().audit_offset()
    code, out, err = await plan(
        kubeconfig, "-f", str(policy_file(tmp_path, name, changed)), "-o", "json"
    )
    assert code == 1, out + err
    result = json.loads(out)
    by_node = {n["node"]: n for n in result["nodes"]}
    assert set(by_node) == set(nodes)
    assert {n["disruptive"] for n in by_node.values()} == {"mode hami-core -> mig"}
    assert by_node[nodes[0]]["gpuPods"] == [f"{namespace}/train-0"]
    assert by_node[nodes[1]]["gpuPods"] == []
    assert by_node[nodes[2]]["gpuPods"] == [f"{namespace}/train-2"]
    assert not any(n["enters"] or n["leaves"] for n in by_node.values())
    assert [w["nodes"] for w in result["rollout"]] == [sorted(nodes)[:2], sorted(nodes)[2:]]
    # the node PATCH carries the new mode and the resourceVersion it was computed from
    patch = by_node[nodes[0]]["patch"]
    assert patch["metadata"]["labels"][contract.LABEL_MODE] == "mig"
    assert patch["metadata"]["resourceVersion"]

    # the same plan offline, over what `doctor --save-snapshot` read: no kubeconfig
    saved = tmp_path / "cluster.json"
    code, _, err = await cli(
        "doctor", "--kubeconfig", str(kubeconfig), "--save-snapshot", str(saved)
    )
    assert code in (0, 1) and f"saved the snapshot to {saved}" in err, err
    changed_file = str(policy_file(tmp_path, name, changed))
    code, out, err = await cli("plan", "--snapshot", str(saved), "-f", changed_file, "-o", "json")
    assert code == 1, out + err
    # planned at the time the snapshot was read: the rollout's stamps are that time, and all
    # else is the online plan's
    read_at = json.loads(saved.read_text())["readAt"]
    assert read_at in out, out
    assert at_any_time(json.loads(out)) == at_any_time(result)
    assert writes_by_admin(cluster, offset) == []
    # still as it was: plan wrote nothing
    node = await kubeapi.request(api, "GET", kubeapi.node_path(nodes[0]))
    assert node["metadata"]["labels"][contract.LABEL_MODE] == "hami-core"

    # bad input: exit 2 (usage) with the field named
    bad = {**spec, "mode": "mig", "mig": {"partitioning": "static"}}
    code, out, err = await plan(kubeconfig, "-f", str(policy_file(tmp_path, "bad", bad)))
    assert code == 2 and "spec.mig" in err, err
    code, out, err = await plan(kubeconfig, unique("absent"))
    assert code == 2 and "plan -f FILE" in err, err

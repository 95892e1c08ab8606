"""`mode: observe` says when a deferred restart would go (issue 25's must-show): the scheduler
reads what changed after its pod started, but it was restarted a moment ago and
`restarts.minIntervalSeconds` is an hour, so enforce would restart it only an hour after that
restart. The Deployment gets one `WouldRestart` Event whose message carries "(due T)", T that
hour later; another pass does not post it again."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import eventually
from tests.cluster.volcano_env import SCHED_CM, SCHED_DEPLOY, SCHED_NS, VolcanoEnv, volcano_env
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path, workload_path
from vgpu_operator.core.nodes.status import change_stamp
from vgpu_operator.core.volcano.restarts import RESTARTED_AT
from vgpu_operator.core.volcano.times import parse_time

pytestmark = pytest.mark.cluster

__all__ = ["volcano_env", "volcano_operator"]

MIN_INTERVAL = 3600
DUE = re.compile(r"\(due (\S+)\)")


async def events_on(api: client.ApiClient, obj: dict[str, Any]) -> list[dict[str, Any]]:
    m = obj["metadata"]
    body = await kubeapi.request(
        api,
        "GET",
        f"/api/v1/namespaces/{m['namespace']}/events",
        query={"fieldSelector": f"involvedObject.uid={m['uid']}"},
    )
    return list(body.get("items") or [])


async def test_observe_posts_a_deferred_restart_with_its_due_time(
    api: client.ApiClient,
    volcano_env: VolcanoEnv,
    volcano_operator: OperatorFactory,
) -> None:
    env = volcano_env
    await env.add_control_node()
    nodes = await env.add_nodes("RTX-4090", 1, gpus=2, released=None)
    await env.install(scheduler_conf="seed000_scheduler.conf", consistent=True)
    # a rollout restart of the scheduler a moment ago (`kubectl rollout restart`)
    restarted = datetime.now(UTC)
    deployment = workload_path("Deployment", SCHED_NS, SCHED_DEPLOY)
    await env.patch(
        deployment,
        {
            "spec": {
                "template": {"metadata": {"annotations": {RESTARTED_AT: change_stamp(restarted)}}}
            }
        },
    )
    await env.wait_running()
    # then what it reads changed (as the operator stamps its own writes): its pod is stale
    await env.patch(
        configmap_path(SCHED_NS, SCHED_CM),
        {
            "metadata": {
                "annotations": {contract.ANN_DATA_CHANGED_AT: change_stamp(datetime.now(UTC))}
            }
        },
    )

    op = volcano_operator(f"mode: observe\nrestarts:\n  minIntervalSeconds: {MIN_INTERVAL}\n")
    dep = await kubeapi.request(api, "GET", deployment)
    found: list[dict[str, Any]] = []

    async def would_restart() -> bool:
        found[:] = [e for e in await events_on(api, dep) if e["reason"] == "WouldRestart"]
        return bool(found)

    await eventually(would_restart, timeout=60, interval=0.5)
    [event] = found
    assert event["type"] == "Normal"
    ref = event["involvedObject"]
    assert (ref["kind"], ref["namespace"], ref["name"]) == ("Deployment", SCHED_NS, SCHED_DEPLOY)
    message = event["message"]
    assert message.startswith("observe mode: enforce would restart: "), message
    assert message.endswith(")") and " (due " in message, message
    assert "what the scheduler reads once changed at" in message, message
    match = DUE.search(message)
    assert match is not None, message
    due = parse_time(match.group(1))
    assert due is not None, message
    # an hour after the last restart (the stamp is whole seconds)
    expected = restarted + timedelta(seconds=MIN_INTERVAL)
    assert abs(due - expected) < timedelta(seconds=2), (due, expected)

    # another pass (a node label edit is watched): the same deferred restart, not posted again
    assert op.controller is not None and op.controller.volcano is not None
    passes = op.controller.volcano.passes
    await env.patch(kubeapi.node_path(nodes[0]), {"metadata": {"labels": {"test/nudge": "1"}}})

    async def another_pass() -> bool:
        volcano = op.controller.volcano if op.controller is not None else None
        return volcano is not None and volcano.passes > passes

    await eventually(another_pass, timeout=30, interval=0.2)
    assert await would_restart() and len(found) == 1, found
    assert found[0].get("count", 1) == 1, found
    # observe wrote nothing: the scheduler was not restarted
    dep_now = await kubeapi.request(api, "GET", deployment)
    annotations = dep_now["spec"]["template"]["metadata"]["annotations"]
    assert annotations[RESTARTED_AT] == change_stamp(restarted)

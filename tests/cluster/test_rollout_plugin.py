"""Safe transitions with the device plugin running (its DaemonSet real, the process simulated): a
split-count change on 10 nodes is released `maxUnavailable` nodes at a time, without cordon or
drain, each node's plugin pod replaced once and its new registration verified before the next."""

from __future__ import annotations

import asyncio
import contextlib

from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually, unique
from tests.cluster.rolloutkit import config_of, cordoned, rollout_of
from tests.cluster.test_volcano_restarts import steady
from tests.cluster.volcano_env import PLUGIN_NS, VolcanoEnv, volcano_env
from tests.cluster.volcano_ops import OperatorFactory, pods_created, volcano_operator
from vgpu_operator import kubeapi
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, parse_register

__all__ = ["volcano_env", "volcano_operator"]


async def test_a_split_count_change_restarts_at_most_max_unavailable_plugin_pods_at_a_time(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    volcano_env: VolcanoEnv,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    env = volcano_env
    group = unique("split")
    await env.add_control_node()
    nodes = await env.add_nodes("RTX-4090", 10, gpus=2, released=None, labels={"test/g": group})
    await env.install()
    volcano_operator("restarts: {minIntervalSeconds: 1}", restart_settle_seconds=0.5)
    spec = {
        "nodeSelector": {"matchLabels": {"test/g": group}},
        "mode": "hami-core",
        "hamiCore": {"deviceSplitCount": 10},
        "rollout": {"maxUnavailable": 3, "stepTimeoutSeconds": 60},
    }
    name = await policies("split", spec)

    async def registered(count: int) -> set[str]:
        done = set()
        for n in nodes:
            obj = await kubeapi.request(api, "GET", kubeapi.node_path(n))
            raw = (obj["metadata"].get("annotations") or {}).get(REGISTER_ANNOTATION, "")
            records = parse_register(raw) if raw else []
            if records and {r.count for r in records} == {count}:
                done.add(n)
        return done

    async def all_registered() -> bool:
        return await registered(10) == set(nodes)

    await steady(env, nodes)  # the placement patch (one DaemonSet rollout) is behind us
    await eventually(all_registered, timeout=90, interval=0.5)
    await env.wait_running()
    before = await env.plugin_pods()
    offset = local.audit_offset()

    most = 0  # nodes released to the new count whose plugin has not registered it yet
    in_transition = 0
    seen_cordon = False

    async def watch() -> None:
        nonlocal most, in_transition, seen_cordon
        while True:
            objs = [await kubeapi.request(api, "GET", kubeapi.node_path(n)) for n in nodes]
            fresh = await registered(4)
            released = {
                o["metadata"]["name"]
                for o in objs
                if (c := config_of(o)) and c.hami_core and c.hami_core.device_split_count == 4
            }
            most = max(most, len(released - fresh))
            in_transition = max(in_transition, sum(1 for o in objs if rollout_of(o)))
            seen_cordon = seen_cordon or any(cordoned(o) for o in objs)
            await asyncio.sleep(0.2)

    task = asyncio.create_task(watch())
    try:
        await kubeapi.request(
            api,
            "PATCH",
            kubeapi.policy_path(name),
            body={"spec": {"hamiCore": {"deviceSplitCount": 4}}},
            content_type=kubeapi.MERGE_PATCH,
            field_manager=None,
        )

        async def done() -> bool:
            objs = [await kubeapi.request(api, "GET", kubeapi.node_path(n)) for n in nodes]
            return await registered(4) == set(nodes) and not any(rollout_of(o) for o in objs)

        await eventually(done, timeout=150, interval=0.5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    assert 1 <= most <= 3, most
    assert in_transition == 3, in_transition
    assert not seen_cordon, "a split-count change cordons nothing"
    after = await env.plugin_pods()
    assert set(after) == set(before) and not set(after.values()) & set(before.values())
    assert pods_created(local, offset, PLUGIN_NS) == len(nodes)  # each plugin pod once

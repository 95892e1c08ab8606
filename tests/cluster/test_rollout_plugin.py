"""Safe transitions with the device plugin running (its DaemonSet real, the process simulated): a
split-count change on 10 nodes is released `maxUnavailable` nodes at a time, without cordon or
drain, each node's plugin pod replaced once and its new registration verified before the next."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually, unique
from tests.cluster.rolloutkit import TransitionCount, config_of, cordoned, rollout_of
from tests.cluster.volcano_env import PLUGIN_NS, VolcanoEnv, steady, volcano_env
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

    def restarting(obj: Mapping[str, Any]) -> bool:
        """Released the new count, its plugin pod not yet replaced and registered with it."""
        config = config_of(dict(obj))
        raw = (obj["metadata"].get("annotations") or {}).get(REGISTER_ANNOTATION)
        fresh = bool(raw) and {r.count for r in parse_register(raw)} == {4}
        released = bool(config and config.hami_core and config.hami_core.device_split_count == 4)
        return released and not fresh

    def is_cordoned(obj: Mapping[str, Any]) -> bool:
        return cordoned(dict(obj))

    # every committed state of the nodes (a watch): the exact most at once
    selector = f"test/g={group}"
    count = TransitionCount(api, selector)
    plugins = TransitionCount(api, selector, counts=restarting)
    cordons = TransitionCount(api, selector, counts=is_cordoned)
    async with count.running(), plugins.running(), cordons.running():
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

    assert 1 <= plugins.most <= 3, plugins.most  # plugin pods restarting at once
    assert count.most == 3, count.most
    assert cordons.most == 0, "a split-count change cordons nothing"
    after = await env.plugin_pods()
    assert set(after) == set(before) and not set(after.values()) & set(before.values())
    assert pods_created(local, offset, PLUGIN_NS) == len(nodes)  # each plugin pod once

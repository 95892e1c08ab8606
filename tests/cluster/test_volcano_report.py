"""`report` mode writes nothing to any Volcano/HAMi object (every resourceVersion unchanged),
while the findings reach people: the policies' `ConfigConsistent` condition, one Warning Event
per finding (not one per pass), the `vgpu_operator_findings` metric. The same cluster under
`enforce` then changes them and becomes consistent."""

from __future__ import annotations

from collections import Counter

from kubernetes_asyncio import client
from prometheus_client import REGISTRY

from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, event_reasons, eventually, unique
from tests.cluster.volcano_env import (
    NODE_CM,
    PLUGIN_NS,
    SCHED_CM,
    SCHED_NS,
    VOLCANO_OBJECTS,
    VolcanoEnv,
    consistent_condition,
    volcano_env,
)
from tests.cluster.volcano_ops import (
    OperatorFactory,
    operator_writes,
    volcano_operator,
)
from vgpu_operator import kubeapi
from vgpu_operator.controller.snapshot import configmap_path

__all__ = ["volcano_env", "volcano_operator"]


async def warning_events(api: client.ApiClient, namespace: str, name: str) -> Counter[str]:
    """Warning Events on the ConfigMap `name` as it exists now (by uid: the names are the same
    in every test)."""
    obj = await kubeapi.request(api, "GET", configmap_path(namespace, name))
    uid = obj["metadata"]["uid"]
    return await event_reasons(api, namespace, f"involvedObject.uid={uid},type=Warning")


async def test_report_mode_writes_nothing_and_enforce_does(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    volcano_env: VolcanoEnv,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    env = volcano_env
    group = unique("g")
    await env.add_control_node()
    [node] = await env.add_nodes("RTX-4090", 1, gpus=2, released=None, labels={"test/group": group})
    # Seed 002's scheduler conf: deviceshare reads the device config from volcano-system.
    await env.install(scheduler_conf="seed002_scheduler.conf")
    await env.wait_running()
    versions = await env.resource_versions()
    assert set(versions) >= set(VOLCANO_OBJECTS[:3]) | set(VOLCANO_OBJECTS[-2:])

    offset = local.audit_offset()
    op = volcano_operator("mode: report")
    policy = await policies(
        "r", {"nodeSelector": {"matchLabels": {"test/group": group}}, "mode": "hami-core"}
    )

    async def reported() -> bool:
        cond = await consistent_condition(api, policy)
        return cond.get("status") == "False" and "device-config-location" in cond.get("message", "")

    await eventually(reported, timeout=60, interval=0.5)
    cond = await consistent_condition(api, policy)
    assert cond["reason"] == "Inconsistent"
    assert "device-config-location" in cond["message"] and "report mode" in cond["message"]

    # More passes (node label edits are watched): still nothing written, Events not repeated.
    assert op.controller.volcano is not None
    passes = op.controller.volcano.passes
    for i in range(3):
        await env.patch(kubeapi.node_path(node), {"metadata": {"labels": {"test/nudge": str(i)}}})

        async def another_pass(target: int = passes + i + 1) -> bool:
            return op.controller.volcano is not None and op.controller.volcano.passes >= target

        await eventually(another_pass, timeout=30, interval=0.2)
    assert await env.resource_versions() == versions
    writes = operator_writes(local, offset)
    touched = {w for w in writes if w[1] in ("configmaps", "daemonsets", "deployments", "pods")}
    assert touched == set(), writes
    events = await warning_events(api, SCHED_NS, SCHED_CM)
    assert events["ConfigDeviceConfigLocation"] == 1, events
    # the node has no entry and its policy's is what its plugin uses without one: nothing for
    # the plugin to re-read, so no warning (core.volcano.config_adoption); enforce still writes it
    node_events = await warning_events(api, PLUGIN_NS, NODE_CM)
    assert node_events["ConfigNodeConfigRendered"] == 0, node_events
    assert (
        REGISTRY.get_sample_value(
            "vgpu_operator_findings", {"rule": "device-config-location", "severity": "error"}
        )
        == 1.0
    )

    # The same cluster under enforce: the scheduler conf and the node config are rewritten.
    op.stop()
    offset = local.audit_offset()
    volcano_operator(restart_settle_seconds=1.0)

    async def consistent() -> bool:
        return (await consistent_condition(api, policy)).get("status") == "True"

    await eventually(consistent, timeout=120, interval=0.5)
    after = await env.resource_versions()
    changed = {p for p in versions if after.get(p) != versions[p]}
    assert {configmap_path(SCHED_NS, SCHED_CM), configmap_path(PLUGIN_NS, NODE_CM)} <= changed
    writes = operator_writes(local, offset)
    assert writes[("patch", "configmaps", SCHED_NS, SCHED_CM)] == 1
    assert writes[("patch", "configmaps", PLUGIN_NS, NODE_CM)] == 1
    assert (
        REGISTRY.get_sample_value(
            "vgpu_operator_findings", {"rule": "device-config-location", "severity": "error"}
        )
        is None
    )

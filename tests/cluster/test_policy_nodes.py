"""VGPUNodePolicy -> nodes, against the real apiserver with the operator running under its
ServiceAccount and the chart's RBAC."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import (
    NodeFactory,
    PolicyFactory,
    eventually,
    patch_spec,
    unique,
)
from tests.cluster.poolkit import (
    VGPU_TAINT,
    clean,
    configured_by,
    hami_policy,
    labels,
    node,
    relabel,
    taints,
    wait_nodes,
)
from tests.cluster.rbackit import chart_policy_keys
from vgpu_operator import contract
from vgpu_operator.commands import doctor
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi import NotFound, policy_path, request
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import OperatorConfig

USER_TAINT = {"key": "team/dedicated", "value": "ml", "effect": "NoSchedule"}


async def test_pool_lifecycle_keeps_user_labels_and_taints(
    api: client.ApiClient,
    operator: OperatorThread,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    pool = unique("pool")
    nodes = await make_nodes(
        "A100-SXM4-80GB", 2, labels={"test/pool": pool, "team": "ml"}, taints=[USER_TAINT]
    )
    name = await policies("hami", hami_policy(pool))
    await wait_nodes(api, nodes, configured_by(name))
    first = await node(api, nodes[0])
    assert labels(first)[contract.LABEL_MODE] == "hami-core"
    assert USER_TAINT in taints(first)
    assert labels(first)["team"] == "ml"
    ann = first["metadata"]["annotations"]
    assert ann[contract.ANN_TARGET] == ann[contract.ANN_CONFIG]

    # A new matching node joins the pool.
    [joined] = await make_nodes("A100-SXM4-80GB", 1, labels={"test/pool": pool})
    await wait_nodes(api, [joined], configured_by(name))

    # A node relabelled out of the selector: only the operator's labels and taints go.
    await relabel(api, nodes[1], {"test/pool": "elsewhere"})
    await wait_nodes(api, [nodes[1]], clean)
    left = await node(api, nodes[1])
    assert labels(left)["team"] == "ml"
    assert taints(left) == [USER_TAINT]

    # Policy deleted: every node clean, the user's taint still there; the policy is gone.
    await request(api, "DELETE", policy_path(name), field_manager=None)
    await wait_nodes(api, [nodes[0], joined], clean)
    assert USER_TAINT in taints(await node(api, nodes[0]))

    async def gone() -> bool:
        try:
            await request(api, "GET", policy_path(name))
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=20)


async def test_policy_label_change_swaps_labels(
    api: client.ApiClient,
    operator: OperatorThread,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    pool = unique("pool")
    nodes = await make_nodes("H100-80GB-HBM3", 2, labels={"test/pool": pool})
    name = await policies("swap", hami_policy(pool, nodeLabels={"old/label": "x"}))
    await wait_nodes(api, nodes, lambda o: labels(o).get("old/label") == "x")
    await patch_spec(api, name, {"nodeLabels": {"old/label": None, "new/label": "y"}})
    await wait_nodes(
        api,
        nodes,
        lambda o: labels(o).get("new/label") == "y" and "old/label" not in labels(o),
    )


async def policy_status(api: client.ApiClient, name: str) -> dict[str, Any]:
    obj = await request(api, "GET", policy_path(name))
    return dict(obj.get("status") or {})


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


async def test_excluded_node_is_untouched_and_suspended_policy_changes_nothing(
    api: client.ApiClient,
    operator: OperatorThread,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    pool = unique("pool")
    [excluded] = await make_nodes(
        "A30", 1, labels={"test/pool": pool, contract.LABEL_EXCLUDE: "true"}
    )
    [member] = await make_nodes("A30", 1, labels={"test/pool": pool})
    name = await policies("ex", hami_policy(pool))
    await wait_nodes(api, [member], configured_by(name))
    before = await node(api, excluded)
    assert clean(before)

    # Suspend, then change the spec and add a node: nothing moves while suspended.
    await patch_spec(api, name, {"suspend": True, "nodeLabels": {"suspended/edit": "1"}})
    [late] = await make_nodes("A30", 1, labels={"test/pool": pool})

    async def observed_suspended() -> bool:
        status = await policy_status(api, name)
        return status.get("observedGeneration") == 2

    await eventually(observed_suspended, timeout=20)
    assert clean(await node(api, late))
    assert "suspended/edit" not in labels(await node(api, member))
    untouched = await node(api, excluded)
    assert labels(untouched) == labels(before)
    assert taints(untouched) == taints(before)

    # Resume: the edit and the late node are applied.
    await patch_spec(api, name, {"suspend": False})
    await wait_nodes(api, [member, late], lambda o: labels(o).get("suspended/edit") == "1")
    assert clean(await node(api, excluded))


async def test_equal_priority_overlap_is_a_conflict_and_higher_priority_wins(
    api: client.ApiClient,
    operator: OperatorThread,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    pool = unique("pool")
    [shared] = await make_nodes("A100-SXM4-80GB", 1, labels={"test/pool": pool, "zone": pool})
    a = await policies("a", hami_policy(pool, priority=5))
    await wait_nodes(api, [shared], configured_by(a))
    configured = await node(api, shared)
    b = await policies(
        "b",
        {"nodeSelector": {"matchLabels": {"zone": pool}}, "mode": "whole-gpu", "priority": 5},
    )

    async def both_conflicted() -> bool:
        sa, sb = await policy_status(api, a), await policy_status(api, b)
        ca, cb = condition(sa, "Conflict"), condition(sb, "Conflict")
        return (
            ca.get("status") == "True"
            and cb.get("status") == "True"
            and shared in ca.get("message", "")
            and b in ca.get("message", "")
            and a in cb.get("message", "")
        )

    await eventually(both_conflicted, timeout=20)
    after = await node(api, shared)
    assert labels(after) == labels(configured)
    assert taints(after) == taints(configured)

    # Raising b's priority resolves it: b wins, its mode applies, a's conflict clears.
    await patch_spec(api, b, {"priority": 6})
    await wait_nodes(
        api,
        [shared],
        lambda o: (
            labels(o).get(contract.LABEL_POLICY) == b
            and labels(o).get(contract.LABEL_MODE) == "whole-gpu"
            and VGPU_TAINT not in taints(o)
        ),
    )

    async def conflict_cleared() -> bool:
        return condition(await policy_status(api, a), "Conflict").get("status") != "True"

    await eventually(conflict_cleared, timeout=20)


async def test_ready_and_observed_generation_follow_kstatus(
    api: client.ApiClient,
    operator: OperatorThread,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    pool = unique("pool")
    nodes = await make_nodes("RTX-4090", 2, labels={"test/pool": pool})
    name = await policies("ks", hami_policy(pool))

    async def ready_at(generation: int) -> bool:
        status = await policy_status(api, name)
        return (
            status.get("observedGeneration") == generation
            and condition(status, "Ready").get("status") == "True"
            and condition(status, "Ready").get("observedGeneration", generation) == generation
            and condition(status, "Stalled").get("status", "False") == "False"
            and status.get("matchedNodes") == 2
        )

    await eventually(lambda: ready_at(1), timeout=30)
    await patch_spec(api, name, {"hamiCore": {"deviceSplitCount": 4}})
    await eventually(lambda: ready_at(2), timeout=30)
    await wait_nodes(
        api,
        nodes,
        lambda o: '"deviceSplitCount":4' in o["metadata"]["annotations"][contract.ANN_CONFIG],
    )


@pytest.fixture
def keyed_operator(installed: Credentials) -> Iterator[OperatorThread]:
    """The controller with the chart's default config.policyKeys (values.yaml), as a `helm
    install` configures it; stopped after the test's policies are deleted (it is requested
    before `policies`)."""
    config = OperatorConfig.model_validate({"policyKeys": chart_policy_keys()})
    running = OperatorThread(
        installed, options=ReconcilerOptions(resync_seconds=3600), config=config
    ).start()
    yield running
    running.stop()


async def test_a_policy_asking_for_an_unlisted_taint_key_is_refused_while_others_converge(
    api: client.ApiClient,
    kubeconfig: Path,
    keyed_operator: OperatorThread,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    """A policy tainting with a key config.policyKeys does not list is refused as a whole: its
    status says Stalled, PolicyKeyNotListed, naming the policy, the key and the chart value,
    and its node is not written; a policy with the listed default keys converges beside it.
    `doctor` (rule policy-keys), given the same configuration, names the same key."""
    listed, unlisted = unique("pool"), unique("pool")
    good_nodes = await make_nodes("A30", 2, gpus=1, labels={"test/pool": listed})
    [held] = await make_nodes("A30", 1, gpus=1, labels={"test/pool": unlisted})
    key = "example.com/unlisted"
    bad = await policies(
        "unlisted",
        hami_policy(unlisted, nodeTaints=[{"key": key, "value": "x", "effect": "NoSchedule"}]),
    )
    good = await policies("listed", hami_policy(listed))
    await wait_nodes(api, good_nodes, configured_by(good))

    async def refused() -> bool:
        stalled = condition(await policy_status(api, bad), "Stalled")
        return stalled.get("status") == "True" and stalled.get("reason") == "PolicyKeyNotListed"

    await eventually(refused, timeout=20)
    message = condition(await policy_status(api, bad), "Stalled")["message"]
    assert f"policy {bad} asks for the taint key {key}" in message, message
    assert "config.policyKeys.taints" in message, message
    assert clean(await node(api, held))
    _, results = await doctor.check(str(kubeconfig), None, keyed_operator.config, ["policy-keys"])
    found = [f for f in results.findings if any(o.name == bad for o in f.objects)]
    assert [f.message.split(" (")[0] for f in found] == [
        f"spec.nodeTaints: policy {bad} asks for the taint key {key}"
    ], results.findings

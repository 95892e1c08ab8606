"""One MIG manager per GPU: where the GPU Operator's mig-manager is configured (its labels on the
Node) or HAMi's own device plugin has registered the GPUs (its annotation on the Node; the agent
reads no Pods and no DaemonSets) the agent applies no static layout and reports `blocked`."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.kit.memapi import MemoryNodeApi
from tests.kit.migkit import DYN, SEVEN
from tests.kit.second_owners import HAMI_REGISTERED
from tests.kit.smi_samples import FakeNode
from vgpu_operator import contract
from vgpu_operator.agent import decide
from vgpu_operator.agent.loop import Agent, AgentOptions
from vgpu_operator.core.nodes.gpu_owners import HAMI_REGISTER_ANNOTATION, gpu_operator_mig_manager
from vgpu_operator.models.node import GPU_OPERATOR_MIG_CONFIG_LABEL as CONFIG
from vgpu_operator.models.node import GPU_OPERATOR_MIG_MANAGER_LABEL as DEPLOY

Make = Callable[..., FakeNode]
MUTATING = {"-mig", "-r", "-cgi", "-cci", "-dci", "-dgi"}


@pytest.mark.parametrize(
    ("labels", "configured"),
    [
        ({}, False),
        ({DEPLOY: "true"}, True),
        ({DEPLOY: "paused-for-mig-change"}, True),
        ({CONFIG: "all-balanced"}, True),  # the label alone: the manager is expected
        ({CONFIG: "all-disabled", DEPLOY: "true"}, True),
        # deploy=false: the DaemonSet's nodeSelector (…mig-manager=true) no longer matches, the
        # GPU Operator's default `all-disabled` config label left behind does not matter
        ({CONFIG: "all-disabled", DEPLOY: "false"}, False),
    ],
)
def test_when_the_gpu_operators_mig_manager_is_configured(
    labels: dict[str, str], configured: bool
) -> None:
    said = gpu_operator_mig_manager(labels)
    assert (said is not None) is configured
    if said is not None:
        assert all(f"{k}={v}" in said for k, v in labels.items())


async def test_a_static_layout_is_not_applied_and_the_node_says_why(fake_node: Make) -> None:
    fake = fake_node("H100 80GB HBM3", 1)
    api = MemoryNodeApi("n1", {contract.ANN_CONFIG: SEVEN})
    assert api.obj is not None
    api.obj["metadata"]["labels"][CONFIG] = "all-1g.10gb"
    agent = Agent(api, fake.driver, AgentOptions())
    out = await agent.act()
    assert out is not None and (out.state, out.reason) == ("blocked", "another MIG manager")
    assert "nvidia.com/mig.config=all-1g.10gb" in out.message
    assert "disableNvidiaMigManager: true" in out.message
    assert api.state == "blocked"
    assert [e for e in fake.log() if MUTATING & set(e["argv"])] == []  # type: ignore[arg-type]
    (event,) = api.events
    assert (event["type"], event["reason"]) == ("Warning", "AnotherMIGManager")
    assert api.annotation(contract.ANN_INVENTORY) is not None  # the hardware is still reported

    # the policy turns the GPU Operator's manager off: the next action applies the layout
    api.obj["metadata"]["labels"][DEPLOY] = "false"
    out = await agent.act("retry")
    assert out is not None and out.state == "success", out.message


async def test_dynamic_mode_is_not_blocked(fake_node: Make) -> None:
    # dynamic partitioning only turns MIG on (only static layouts are blocked)
    fake = fake_node("H100 80GB HBM3", 1)
    api = MemoryNodeApi("n1", {contract.ANN_CONFIG: DYN})
    assert api.obj is not None
    api.obj["metadata"]["labels"][DEPLOY] = "true"
    out = await Agent(api, fake.driver, AgentOptions()).act()
    assert out is not None and out.state == "success", out.message


async def test_hamis_own_plugin_registered_here_blocks_a_static_layout(fake_node: Make) -> None:
    fake = fake_node("H100 80GB HBM3", 1)
    api = MemoryNodeApi(
        "n1", {contract.ANN_CONFIG: SEVEN, HAMI_REGISTER_ANNOTATION: HAMI_REGISTERED}
    )
    out = await Agent(api, fake.driver, AgentOptions()).act()
    assert out is not None and (out.state, out.reason) == ("blocked", "another MIG manager")
    assert out.message.startswith(
        "HAMi's own device plugin (hami-device-plugin) has registered this node's GPUs"
    )
    assert HAMI_REGISTER_ANNOTATION in out.message and 'gpu: "on"' in out.message
    assert [e for e in fake.log() if MUTATING & set(e["argv"])] == []  # type: ignore[arg-type]


def test_every_other_owner_is_named_with_its_fix() -> None:
    view = decide.node_view(
        {
            "metadata": {
                "name": "n1",
                "labels": {DEPLOY: "true"},
                "annotations": {contract.ANN_CONFIG: SEVEN, HAMI_REGISTER_ANNOTATION: "[]"},
            }
        }
    )
    why = decide.mig_manager_block(view, decide.released(view))
    assert why is not None
    assert why.startswith("the GPU Operator's mig-manager is configured on this node")
    assert "disableNvidiaMigManager: true" in why
    assert "also HAMi's own device plugin (hami-device-plugin) has registered" in why
    dynamic = decide.node_view(
        {
            "metadata": {
                "name": "n1",
                "annotations": {contract.ANN_CONFIG: DYN, HAMI_REGISTER_ANNOTATION: "[]"},
            }
        }
    )
    assert decide.mig_manager_block(dynamic, decide.released(dynamic)) is None  # turns MIG on only

"""The agent refuses to destroy or reset what the kubelet has allocated to a pod: the fake
nvidia-smi run as a subprocess, the kubelet's PodResources API served by the double over a unix
socket (tests/kit/podresources.py), asked by the agent's own helper process."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.kit.memapi import MemoryNodeApi
from tests.kit.migkit import config, static
from tests.kit.podresources import Held, PodResourcesDouble, socket_path
from tests.kit.smi_samples import FakeNode
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator import contract
from vgpu_operator.agent.apply import Reason, reconcile_gpus
from vgpu_operator.agent.kubelet import PodResourcesGuard
from vgpu_operator.agent.loop import Agent, AgentOptions

Make = Callable[..., FakeNode]
TWO = static({"profiles": {"3g.40gb": 2}})
SEVEN = static({"profiles": {"1g.10gb": 7}})


@pytest.fixture
def kubelet() -> Iterator[PodResourcesDouble]:
    double = PodResourcesDouble(socket_path()).start()
    try:
        yield double
    finally:
        double.stop()


def guard(double: PodResourcesDouble) -> PodResourcesGuard:
    return PodResourcesGuard(double.socket, timeout=10)


def gpus(node: FakeNode) -> list[Any]:
    return copy.deepcopy(node.load()["gpus"])


def mig_uuids(node: FakeNode, gpu: int) -> list[str]:
    """The MIG device UUIDs of a GPU, by GPU instance (what `nvidia-smi -L` lists)."""
    gis = sorted(node.load()["gpus"][gpu]["gis"], key=lambda g: g["id"])
    return [gi["cis"][0]["uuid"] for gi in gis]


async def two_instances(fake_node: Make, count: int = 1) -> FakeNode:
    node = fake_node("A100-SXM4-80GB", count)
    assert (await reconcile_gpus(node.driver, TWO, None)).state == "success"
    return node


async def test_an_idle_instance_allocated_to_a_pod_is_not_destroyed(
    fake_node: Make, kubelet: PodResourcesDouble
) -> None:
    node = await two_instances(fake_node)
    kubelet.held = [Held("train-0", "nvidia.com/mig-3g.40gb", [mig_uuids(node, 0)[1]], "ml")]
    before, destroyed = gpus(node), node.count("destroyed_gi")
    out = await reconcile_gpus(node.driver, SEVEN, TWO, guard=guard(kubelet))
    assert (out.state, out.reason) == ("blocked", Reason.IN_USE), out.message
    assert "pod ml/train-0" in out.message and "nvidia.com/mig-3g.40gb" in out.message
    assert gpus(node) == before and node.count("destroyed_gi") == destroyed
    assert kubelet.calls == 1
    assert out.inventory is not None and out.inventory.applied == TWO  # still the old one


async def test_nothing_allocated_on_that_gpu_lets_the_change_run(
    fake_node: Make, kubelet: PodResourcesDouble
) -> None:
    node = await two_instances(fake_node, 2)
    # a pod holds GPU 1's instance, GPU 0 has nothing: GPU 0 changes, GPU 1 is blocked
    kubelet.held = [Held("eval", "nvidia.com/mig-3g.40gb", [f"{mig_uuids(node, 1)[0]}::2"])]
    out = await reconcile_gpus(node.driver, SEVEN, TWO, guard=guard(kubelet))
    assert out.state == "blocked" and "GPU 1 " in out.message, out.message
    assert len(node.load()["gpus"][0]["gis"]) == 7 and len(node.load()["gpus"][1]["gis"]) == 2
    # the pod goes: the retry changes GPU 1 too
    kubelet.held = []
    again = await reconcile_gpus(node.driver, SEVEN, TWO, guard=guard(kubelet))
    assert (again.state, again.reason) == ("success", Reason.APPLIED), again.message


async def test_a_pod_on_an_instance_that_stays_does_not_block(
    fake_node: Make, kubelet: PodResourcesDouble
) -> None:
    node = fake_node("A100-SXM4-80GB", 1)
    mixed = static({"profiles": {"3g.40gb": 1, "1g.10gb": 4}})
    assert (await reconcile_gpus(node.driver, mixed, None)).state == "success"
    keep = next(g for g in node.load()["gpus"][0]["gis"] if g["profile_id"] == 9)
    kubelet.held = [Held("keep", "nvidia.com/mig-3g.40gb", [keep["cis"][0]["uuid"]])]
    out = await reconcile_gpus(
        node.driver, static({"profiles": {"3g.40gb": 1, "2g.20gb": 2}}), mixed, guard=guard(kubelet)
    )
    assert out.state == "success", out.message
    assert kubelet.calls == 1  # asked: the plan destroyed the 1g instances
    assert keep in node.load()["gpus"][0]["gis"]  # the pod's instance is untouched


async def test_an_allocation_that_cannot_be_mapped_blocks(
    fake_node: Make, kubelet: PodResourcesDouble
) -> None:
    node = await two_instances(fake_node)
    uuid = node.load()["gpus"][0]["uuid"]
    # HAMi's slot IDs say nothing of the GPU the pod got (agent.allocations)
    kubelet.held = [Held("vgpu", "volcano.sh/vgpu-number", [f"{uuid}-4"])]
    before = gpus(node)
    out = await reconcile_gpus(node.driver, config("hami-core"), TWO, guard=guard(kubelet))
    assert out.state == "blocked" and "pod default/vgpu" in out.message, out.message
    assert "HAMi" in out.message and gpus(node) == before


async def test_a_kubelet_that_cannot_be_asked_changes_nothing(fake_node: Make) -> None:
    node = await two_instances(fake_node)
    before = gpus(node)
    missing = PodResourcesGuard(socket_path(), timeout=5)  # no server on it
    out = await reconcile_gpus(node.driver, SEVEN, TWO, guard=missing)
    assert (out.state, out.reason) == ("failed", Reason.KUBELET), out.message
    assert "no kubelet PodResources socket" in out.message and gpus(node) == before


async def test_creating_only_does_not_ask(fake_node: Make, kubelet: PodResourcesDouble) -> None:
    node = fake_node("H100 80GB HBM3", 1, mig=True)
    out = await reconcile_gpus(node.driver, TWO, None, guard=guard(kubelet))
    assert out.state == "success", out.message
    assert kubelet.calls == 0


@pytest.mark.parametrize("name", fs.HOSTILE_PROCESS_NAMES)
@pytest.mark.parametrize("message", [False, True])
async def test_a_process_named_like_the_empty_list_message_blocks(
    fake_node: Make, name: str, message: bool
) -> None:
    """The review's case: two instances, one such process, released to hami-core."""
    node = await two_instances(fake_node)
    with fs.edit(node.state) as s:
        s["no_processes_message"] = message
    gi = node.load()["gpus"][0]["gis"][1]["id"]
    fs.add_process(node.state, 0, 4242, name, gi=gi)
    before, destroyed = gpus(node), node.count("destroyed_gi")
    out = await reconcile_gpus(node.driver, config("hami-core"), TWO)
    assert (out.state, out.reason) == ("blocked", Reason.IN_USE), out.message
    assert "(pid 4242)" in out.message
    assert gpus(node) == before and node.count("destroyed_gi") == destroyed


async def test_the_empty_list_message_alone_is_no_process(fake_node: Make) -> None:
    node = await two_instances(fake_node)
    with fs.edit(node.state) as s:
        s["no_processes_message"] = True
    out = await reconcile_gpus(node.driver, config("hami-core"), TWO)
    assert out.state == "success", out.message
    assert node.load()["gpus"][0]["gis"] == []


async def test_the_agent_reports_blocked_with_the_pod(
    fake_node: Make, kubelet: PodResourcesDouble
) -> None:
    node = await two_instances(fake_node)
    kubelet.held = [Held("train-0", "nvidia.com/gpu", [node.load()["gpus"][0]["uuid"]])]
    api = MemoryNodeApi("n1", {contract.ANN_CONFIG: SEVEN.to_annotation()})
    agent = Agent(api, node.driver, AgentOptions(resync=3600, guard=guard(kubelet)))
    outcome = await agent.act("start")
    assert outcome is not None and outcome.state == "blocked", outcome
    assert api.state == "blocked" and len(node.load()["gpus"][0]["gis"]) == 2
    assert any("default/train-0" in e["message"] for e in api.events)


def test_the_flag_names_the_socket_or_turns_the_check_off() -> None:
    import argparse

    from vgpu_operator.agent.cli import add_subcommand
    from vgpu_operator.agent.podresources_wire import DEFAULT_SOCKET

    parser = argparse.ArgumentParser()
    add_subcommand(parser.add_subparsers())
    assert parser.parse_args(["agent"]).pod_resources_socket == DEFAULT_SOCKET
    assert parser.parse_args(["agent", "--pod-resources-socket="]).pod_resources_socket == ""
    args = parser.parse_args(["agent", "--pod-resources-socket=/k/pr.sock"])
    assert (args.pod_resources_socket, args.pod_resources_timeout) == ("/k/pr.sock", 10.0)

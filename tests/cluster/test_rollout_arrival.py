"""First configurations through the rollout gate, against the real apiserver with the real node
agent: ten busy MIG nodes (kwok nodes running GPU pods, each with `vgpu-operator agent` as a
subprocess over the fake nvidia-smi, its A100 in MIG mode with one 7g.80gb instance in use)
adopted by a static-layout policy with `maxUnavailable: 1`; then, with new GPU pods on them, a
layout change that widens the selector over three more busy MIG nodes at the same time, and the
`vgpu.volcano.sh/config` annotation deleted from a node not yet moved while another node is in
transition.

`GateWatch` sees every committed state of the nodes and of the pods: never more than one node in
transition, and every release (the first configuration, the one after the lost annotation, the
widened nodes') committed on a cordoned node with its transition record, after each of its GPU
pods was evicted and gone (`core.rollout.arrival`: a node without a released configuration goes
through the gate when it is busy and its GPUs may change)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.agentkit import (
    Agents,
    GpuNode,
    agent_kubeconfig_path,
    agents,
    static,
)
from tests.cluster.helpers import NodeFactory, PolicyFactory, eventually, patch_spec, unique
from tests.cluster.rolloutkit import (
    GateWatch,
    config_of,
    cordoned,
    rollout_of,
    wait_running,
)
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.agentproc import FakeGpus, fake_model
from vgpu_devcluster.fakesmi_mig import MigArgs, run_mig
from vgpu_operator import contract
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi import MERGE_PATCH, Conflict, node_path, request
from vgpu_operator.models.inventory import Inventory

__all__ = ["agent_kubeconfig_path", "agents"]  # fixtures

MODEL = "A100-SXM4-80GB"
# Profile IDs of an A100-80GB (models/gpu_catalog.py, as `nvidia-smi mig -lgip` prints them):
# 7g.80gb=0, 4g.40gb=5, 3g.40gb=9. Layouts of few instances: each instance costs the agent a few
# nvidia-smi calls, and the 23 transitions run one after another.
WHOLE_INSTANCE = "0"
FIRST = {"3g.40gb": 2}
SECOND, SECOND_IDS = {"4g.40gb": 1}, Counter({5: 1})


def layout(profiles: dict[str, int]) -> dict[str, Any]:
    return {"partitioning": "static", "layout": [{"profiles": profiles}]}


async def busy_mig_nodes(
    agents: Agents, make_nodes: NodeFactory, count: int, labels: dict[str, str]
) -> list[GpuNode]:
    """`count` nodes with one A100 each, MIG on with one 7g.80gb instance (what a pod asking
    `nvidia.com/mig-7g.80gb` runs on), and their agents started."""
    names = await make_nodes(MODEL, count, gpus=1, labels=labels)
    nodes = []
    for name in names:
        gpus = FakeGpus.create(agents.directory / name, name, fake_model(MODEL), 1, mig=True)
        state = gpus.load()
        create = MigArgs("cgi")
        create.cgi, create.default_ci = [WHOLE_INSTANCE], True
        assert run_mig(state, state["gpus"], create).rc == 0
        fs.save(gpus.state, state)
        node = GpuNode(name, gpus)
        agents.start(node)
        nodes.append(node)
    return nodes


def config_of_text(text: str) -> dict[str, int]:
    config = config_of({"metadata": {"annotations": {contract.ANN_CONFIG: text}}})
    assert config is not None and config.mig is not None
    [entry] = config.mig.layout or []
    return dict(entry.profiles)


async def listed(api: client.ApiClient, selector: str) -> list[dict[str, Any]]:
    body = await request(api, "GET", node_path(), query={"labelSelector": selector})
    return list(body.get("items") or [])


def inventory_of(obj: dict[str, Any]) -> Inventory | None:
    annotations = obj["metadata"].get("annotations") or {}
    return Inventory.from_annotation(annotations.get(contract.ANN_INVENTORY))


def settled_on(obj: dict[str, Any], profiles: dict[str, int]) -> bool:
    """Released `profiles`, applied by the agent, the transition over."""
    config, inv = config_of(obj), inventory_of(obj)
    labels = obj["metadata"].get("labels") or {}
    return (
        config is not None
        and config.same_hardware_as(static(profiles))
        and inv is not None
        and inv.applied == config
        and labels.get(contract.LABEL_STATE) == "success"
        and rollout_of(obj) is None
        and not cordoned(obj)
    )


async def all_settled(
    api: client.ApiClient, selector: str, nodes: list[GpuNode], profiles: dict[str, int]
) -> None:
    names = {n.name for n in nodes}

    async def settled() -> bool:
        objs = [o for o in await listed(api, selector) if o["metadata"]["name"] in names]
        return len(objs) == len(names) and all(settled_on(o, profiles) for o in objs)

    settled.__name__ = f"settled on {profiles}"
    await eventually(settled, timeout=240)


async def lose_config_while_another_moves(
    api: client.ApiClient, gate: GateWatch, selector: str, pool: list[GpuNode]
) -> str:
    """Delete the `config` annotation from a node of `pool` not yet moved (still on FIRST, no
    transition of its own) while another node is in transition; the PATCH carries the
    resourceVersion of the listing that showed both. Returns the node."""
    names = {n.name for n in pool}
    for _ in range(50):
        await gate.until(lambda: bool(gate.moving()))
        objs = await listed(api, selector)
        moving = {o["metadata"]["name"] for o in objs if rollout_of(o) or cordoned(o)}
        waiting = sorted(
            (o for o in objs if o["metadata"]["name"] in names - moving and settled_on(o, FIRST)),
            key=lambda o: str(o["metadata"]["name"]),
        )
        assert waiting, "every node moved before one could lose its configuration"
        if not moving:
            continue  # between two transitions: the watch shows the next one soon
        node = waiting[-1]  # the rollout takes nodes by name: the last moves last
        meta = node["metadata"]
        body = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "annotations": {contract.ANN_CONFIG: None},
            }
        }
        try:
            await request(
                api,
                "PATCH",
                node_path(meta["name"]),
                body=body,
                content_type=MERGE_PATCH,
                field_manager=None,
            )
        except Conflict:
            continue  # written meanwhile (a heartbeat, its agent): look again
        return str(meta["name"])
    raise AssertionError("no node could lose its configuration while another moved")


async def test_busy_mig_nodes_adopted_a_lost_config_and_a_widened_selector_one_at_a_time(
    api: client.ApiClient,
    namespace: str,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    operator: OperatorThread,
    agents: Agents,
) -> None:
    first, more, group = unique("adopt"), unique("widen"), unique("arrival")
    selector = f"test/arrival={group}"
    pool = await busy_mig_nodes(agents, make_nodes, 10, {"test/pool": first, "test/arrival": group})
    later = await busy_mig_nodes(agents, make_nodes, 3, {"test/pool": more, "test/arrival": group})
    everyone = pool + later

    async def reported() -> bool:  # each agent's inventory: MIG on, the instance there
        objs = await listed(api, selector)
        invs = [inventory_of(o) for o in objs]
        return len(objs) == len(everyone) and all(
            i is not None and i.gpus and i.gpus[0].instances for i in invs
        )

    await eventually(reported, timeout=90)

    gate = GateWatch(api, selector, namespace)
    async with gate.running():
        whole = [
            await gate.place(f"whole-{i}", node.name, {"nvidia.com/mig-7g.80gb": "1"})
            for i, node in enumerate(everyone)
        ]
        await wait_running(api, whole)
        spec = {
            "nodeSelector": {"matchLabels": {"test/pool": first}},
            "mode": "mig",
            "mig": layout(FIRST),
            "rollout": {"maxUnavailable": 1, "drain": {"timeoutSeconds": 60}},
        }
        name = await policies("arrival", spec)
        await all_settled(api, selector, pool, FIRST)
        assert not (gate.releases.keys() & {n.name for n in later}), "not in the pool yet"

        # new work on the moved nodes, then a layout change that also widens the selector
        slices = [
            await gate.place(f"slice-{i}", node.name, {"nvidia.com/mig-3g.40gb": "1"})
            for i, node in enumerate(pool)
        ]
        await wait_running(api, slices)
        pools = [{"key": "test/pool", "operator": "In", "values": [first, more]}]
        widened = {"matchLabels": None, "matchExpressions": pools}
        await patch_spec(api, name, {"mig": layout(SECOND), "nodeSelector": widened})
        lost = await lose_config_while_another_moves(api, gate, selector, pool)
        await all_settled(api, selector, everyone, SECOND)

    assert gate.violations == [], gate.violations
    assert gate.most == 1, gate.most
    texts = {n: [config_of_text(t) for t in ts] for n, ts in gate.releases.items()}
    for node in pool:  # the lost annotation's node too: its loss released nothing
        assert texts[node.name] == [FIRST, SECOND], (node.name, texts[node.name])
    for node in later:
        assert texts[node.name] == [SECOND], (node.name, texts[node.name])
    assert lost in {n.name for n in pool}
    assert gate.evicted == gate.gone == set(whole + slices), "every GPU pod evicted"
    for node in everyone:  # what the agent left on the GPU
        assert node.layout(0) == SECOND_IDS, (node.name, node.layout(0))
        assert node.effects("destroyed_gi"), node.name

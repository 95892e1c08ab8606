"""A `volcano-vgpu-node-config` entry a person wrote before the operator came is theirs: kept,
merged with what the policy needs (their fields the policy does not set stay, the device filters
united, so a GPU they excluded is never offered again), and put back exactly as they wrote it
when the node leaves the pool (core/volcano/render/node_config.py, entry_origins). On the real
apiserver with the operator under the chart's RBAC; the audit log shows the node-config written
twice (the merge, the restoration) and nothing else of the person's objects."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually, unique
from tests.cluster.volcano_env import NODE_CM, PLUGIN_NS, VolcanoEnv, hami, volcano_env
from tests.cluster.volcano_ops import OperatorFactory, operator_writes, volcano_operator
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path
from vgpu_operator.kubeapi import policy_path

__all__ = ["volcano_env", "volcano_operator"]


async def entries(api: client.ApiClient) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The node-config's entries by node name, and its annotations."""
    cm = await kubeapi.request(api, "GET", configmap_path(PLUGIN_NS, NODE_CM))
    doc = json.loads(cm["data"]["config.json"])
    by_name = {e["name"]: e for e in doc.get("nodeconfig") or []}
    return by_name, cm["metadata"].get("annotations") or {}


async def test_a_hand_written_entry_is_kept_merged_and_put_back(
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
    await env.install(scheduler_conf="seed002_scheduler.conf")
    hand = {
        "name": node,
        "operatingmode": "hami-core",
        "devicememoryscaling": 1.5,
        "devicesplitcount": 4,
        "migstrategy": "none",
        "filterdevices": {"uuid": [], "index": [1]},
    }

    def add_hand_entry(data: str) -> str:
        doc = json.loads(data)
        doc["nodeconfig"].append(hand)
        return json.dumps(doc, indent=4)

    await env.edit_configmap(PLUGIN_NS, NODE_CM, add_hand_entry, "config.json")
    await env.wait_running()
    offset = local.audit_offset()
    volcano_operator()
    name = await policies("hand", hami(group, hamiCore={"deviceSplitCount": 10}))

    async def merged() -> bool:
        found, _ = await entries(api)
        entry = found.get(node) or {}
        return entry.get("devicesplitcount") == 10

    await eventually(merged, timeout=90, interval=0.5)
    found, annotations = await entries(api)
    entry = found[node]
    assert entry["devicememoryscaling"] == 1.5  # theirs: the policy does not set it
    assert 1 in entry["filterdevices"]["index"]  # the GPU they excluded stays excluded
    assert json.loads(annotations[contract.ANN_ORIGINAL_ENTRIES])[node] == [hand]

    await kubeapi.request(api, "DELETE", policy_path(name), field_manager=None)

    async def put_back() -> bool:
        found, _ = await entries(api)
        return found.get(node) == hand

    await eventually(put_back, timeout=90, interval=0.5)
    _, annotations = await entries(api)
    assert node not in json.loads(annotations.get(contract.ANN_ORIGINAL_ENTRIES) or "{}")
    written = operator_writes(local, offset)
    node_config = [k for k in written if k[1] == "configmaps" and k[3] == NODE_CM]
    assert [written[k] for k in node_config] == [2], written  # merged, then put back

"""The node plan of a dra node (core.nodes.planner, core.nodes.patch): the vGPU label and taint
go, HAMi's placement label gives way to the DRA kubelet plugin's (`vgpu.volcano.sh/device-plugin
=dra`), NVIDIA's device plugin is switched off only through the policy's
disableNvidiaDevicePlugin (as for every mode), the released configuration tells the agent the
MIG settings; one write each way."""

from __future__ import annotations

from typing import Any

from tests.kit.nodekit import annotations_of, converge, labels_of, node, policy
from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.models.node import NodeConfig

POOL = {"matchLabels": {"pool": "a"}}
HAMI = policy("p", {"nodeSelector": POOL, "mode": "hami-core"})
DP = contract.LABEL_DEVICE_PLUGIN
VGPU_TAINT = contract.DEFAULT_TAINT_KEY


def dra(**block: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"nodeSelector": POOL, "mode": "dra"}
    if block:
        body["dra"] = block
    return policy("p", body)


def taint_keys(raw: dict[str, Any]) -> list[str]:
    return [t["key"] for t in raw.get("spec", {}).get("taints") or []]


def test_a_dra_node_carries_the_dra_plugin_label_and_nothing_of_the_vgpu_pools() -> None:
    [n], _ = converge([node("n0", {"pool": "a"})], [dra()])
    labels = labels_of(n)
    assert labels[contract.LABEL_MODE] == "dra" and labels[DP] == "dra"
    assert "volcano.sh/vgpu.enabled" not in labels and taint_keys(n) == []
    config = NodeConfig.from_annotation(annotations_of(n)[contract.ANN_CONFIG])
    assert config is not None and config.mode == "dra" and config.gpu_mig is None


def test_moving_a_hami_core_node_to_dra_takes_off_the_vgpu_label_and_taint_in_one_write() -> None:
    [n], _ = converge([node("n0", {"pool": "a", "team": "x"})], [HAMI])
    assert labels_of(n)[DP] == "hami" and VGPU_TAINT in taint_keys(n)
    [moved], plan = converge([n], [dra()])
    assert plan.plans["n0"].action == "update" and plan.plans["n0"].mode_changed
    labels = labels_of(moved)
    assert labels[DP] == "dra" and labels[contract.LABEL_MODE] == "dra"
    assert "volcano.sh/vgpu.enabled" not in labels and VGPU_TAINT not in taint_keys(moved)
    assert labels["team"] == "x"  # a user's label stays
    [back], _ = converge([moved], [HAMI])
    assert labels_of(back)[DP] == "hami" and VGPU_TAINT in taint_keys(back)


def test_nvidias_device_plugin_is_switched_off_only_where_the_policy_asks_it() -> None:
    [n], _ = converge([node("n0", {"pool": "a"})], [dra()])
    assert contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL not in labels_of(n)
    switched = policy("p", {"nodeSelector": POOL, "mode": "dra", "disableNvidiaDevicePlugin": True})
    user = {"pool": "a", contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL: "true"}
    [n], _ = converge([node("n0", user)], [switched])
    assert labels_of(n)[contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL] == "false"
    [left], _ = converge([n], [])
    assert labels_of(left)[contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL] == "true"  # put back
    assert DP not in labels_of(left)


def test_a_static_mig_dra_pool_releases_its_layout_and_a_node_leaving_is_parked_mig_off() -> None:
    layout = [{"gpus": "all", "profiles": {"3g.40gb": 2}}]
    [n], _ = converge([node("n0", {"pool": "a"})], [dra(devices="static-mig", layout=layout)])
    config = NodeConfig.from_annotation(annotations_of(n)[contract.ANN_CONFIG])
    assert config is not None and config.gpu_mig is not None
    assert config.gpu_mig.partitioning == "static" and config.device_plugin == "dra"
    [left], _ = converge([n], [])
    parked = NodeConfig.from_annotation(annotations_of(left)[contract.ANN_CONFIG])
    assert parked == NodeConfig(mode="whole-gpu")  # the agent turns MIG off


def test_a_static_mig_dra_pool_on_gpus_without_mig_is_blocked_naming_spec_dra() -> None:
    layout = [{"gpus": "all", "profiles": {"1g.10gb": 7}}]
    facts = node_facts(node("n0", {"pool": "a"}, gpu="rtx4090"))
    plans = plan_cluster([facts], [parse_policy(dra(devices="static-mig", layout=layout))])
    plan = plans.plans["n0"]
    assert plan.action == "blocked" and plan.patch is None
    [problem] = plan.problems
    assert problem.reason == "MigNotSupported" and "spec.dra" in problem.message

"""Which dra pools the installation of NVIDIA's DRA driver can serve (core.nodes.dra_pools): a
refused pool is held (its nodes keep what they have) with a problem naming the field, the gate or
the conflict, and the fix; the operator config's `dra` section is read strictly."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kit.nodekit import node, parsed, policy, reconcile
from vgpu_operator import contract
from vgpu_operator.core.nodes.dra_pools import DRA_REFUSED, refuse_unservable_dra
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.models.config import ConfigError, load_config
from vgpu_operator.models.config_dra import DraInstallation

LAYOUT = [{"gpus": "all", "profiles": {"1g.10gb": 7}}]
GATE_OFF = DraInstallation()
GATE_ON = DraInstallation.model_validate({"dynamicMIG": True})
HAMI_POOL = policy("hami", {"nodeSelector": {"matchLabels": {"pool": "hami"}}, "mode": "hami-core"})


def dra_policy(name: str, devices: str, pool: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"devices": devices}
    if devices == "static-mig":
        block["layout"] = LAYOUT
    selector = {"matchLabels": {"pool": pool or name}}
    return policy(name, {"nodeSelector": selector, "mode": "dra", "dra": block})


def refusals(
    policies: list[dict[str, Any]], dra: DraInstallation | None
) -> dict[str, list[tuple[str, str]]]:
    return {
        p.name: [(x.field, x.message) for x in p.refused]
        for p in refuse_unservable_dra(parsed(policies), dra)
    }


def test_whole_gpus_and_a_static_layout_are_served_by_a_driver_without_dynamic_mig() -> None:
    got = refusals([dra_policy("whole", "whole-gpu"), dra_policy("static", "static-mig")], GATE_OFF)
    assert got == {"whole": [], "static": []}


def test_dynamic_mig_is_refused_while_the_config_says_the_drivers_gate_is_off() -> None:
    [(field, message)] = refusals([dra_policy("dyn", "dynamic-mig")], GATE_OFF)["dyn"]
    assert field == "spec.dra.devices"
    assert "DynamicMIG feature gate" in message and "dra.dynamicMIG: false" in message
    assert "DRAPartitionableDevices" in message  # the Kubernetes gate it needs too, by version
    assert refusals([dra_policy("dyn", "dynamic-mig")], GATE_ON) == {"dyn": []}


def test_dynamic_mig_beside_a_static_mig_pool_of_the_same_installation_is_refused() -> None:
    policies = [dra_policy("dyn", "dynamic-mig"), dra_policy("static", "static-mig")]
    got = refusals(policies, GATE_ON)
    [(field, message)] = got["dyn"]
    assert field == "spec.dra.devices" and "static-mig pool of static" in message
    assert "destroys at start every MIG device it did not create" in message
    # and the static pool, whose layout that gate would destroy, is refused too
    [(field, message)] = got["static"]
    assert field == "spec.dra.devices" and "dra.dynamicMIG: true" in message


def test_every_dra_pool_is_refused_while_the_operator_config_has_no_dra_section() -> None:
    [(field, message)] = refusals([dra_policy("whole", "whole-gpu")], None)["whole"]
    assert field == "spec.mode" and "`dra` section" in message
    assert refusals([HAMI_POOL], None) == {"hami": []}  # other modes need none


def test_a_refused_dra_pool_holds_its_nodes_and_writes_nothing() -> None:
    nodes, _ = reconcile([node("n0", {"pool": "hami"})], [HAMI_POOL])
    before = node_facts(nodes[0])
    assert before.labels[contract.LABEL_MODE] == "hami-core"
    moved = dra_policy("dyn", "dynamic-mig", pool="hami")
    moved["spec"]["priority"] = 10  # takes the node over
    checked = refuse_unservable_dra(parsed([HAMI_POOL, moved]), GATE_OFF)
    assert checked[1].refused and checked[1].refused[0].reason == DRA_REFUSED
    plan = plan_cluster([before], checked).plans["n0"]
    assert plan.action == "held" and plan.patch is None


def test_the_operator_configs_dra_section_defaults_and_names_a_bad_field() -> None:
    config = load_config("dra: {}\n")
    assert config.dra is not None
    assert config.dra.driver == "gpu.nvidia.com" and config.dra.dynamic_mig is False
    ds = config.dra.kubelet_plugin_daemon_set
    assert (ds.namespace, ds.name) == (
        "dra-driver-nvidia-gpu",
        "dra-driver-nvidia-gpu-kubelet-plugin",
    )
    assert load_config("").dra is None
    with pytest.raises(ConfigError) as err:
        load_config("dra: {kubeletPluginDaemonSet: {namespace: Bad_NS, name: x}}\n")
    assert "dra.kubeletPluginDaemonSet.namespace" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config("dra: {dynamicMig: true}\n")
    assert "dra.dynamicMig" in str(err.value)  # an unknown key: the spelling is dynamicMIG

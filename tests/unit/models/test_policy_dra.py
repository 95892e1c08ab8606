"""`mode: dra` in a VGPUNodePolicy (models.policy, models.policy_modes.DraSpec) and what a dra
node's configuration says of its GPUs (models.node.NodeConfig): the spec's rules with the field
they name, the MIG settings each `devices` choice gives the agent, and the device plugin label."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from vgpu_operator import contract
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy import VGPUNodePolicySpec
from vgpu_operator.models.policy_modes import MigLayout, MigSpec

SELECTOR = {"matchLabels": {"pool": "dra"}}
LAYOUT = [{"gpus": "all", "profiles": {"1g.10gb": 7}}]


def spec(**fields: Any) -> VGPUNodePolicySpec:
    return VGPUNodePolicySpec.model_validate({"nodeSelector": SELECTOR, "mode": "dra", **fields})


def refused(**fields: Any) -> list[str]:
    """The fields the policy's problems name (the operator's own reading of a stored spec)."""
    raw = {"metadata": {"name": "p"}, "spec": {"nodeSelector": SELECTOR, **fields}}
    return [p.field for p in parse_policy(raw).problems]


def test_mode_dra_without_a_block_hands_out_whole_gpus_with_no_label_and_no_taint() -> None:
    s = spec()
    assert s.effective_dra().devices == "whole-gpu"
    assert s.effective_mig() is None  # MIG off
    assert s.effective_labels() == {} and s.effective_taints() == []  # the vGPU ones go


@pytest.mark.parametrize(
    ("dra", "mig"),
    [
        ({"devices": "whole-gpu"}, None),
        (
            {"devices": "static-mig", "layout": LAYOUT},
            MigSpec(partitioning="static", layout=[MigLayout(gpus="all", profiles={"1g.10gb": 7})]),
        ),
        ({"devices": "dynamic-mig"}, MigSpec(partitioning="dynamic")),
    ],
)
def test_each_devices_choice_gives_the_mig_settings_the_agent_applies(
    dra: dict[str, Any], mig: MigSpec | None
) -> None:
    s = spec(dra=dra)
    assert s.effective_mig() == mig
    config = NodeConfig(mode="dra", policy="p", mig=s.effective_mig())
    assert config.gpu_mig == mig
    assert config.device_plugin == "dra"  # the DRA kubelet plugin serves it, whatever it publishes


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"mode": "dra", "dra": {"devices": "static-mig"}}, "spec.dra.layout"),
        ({"mode": "dra", "dra": {"devices": "whole-gpu", "layout": LAYOUT}}, "spec.dra.layout"),
        ({"mode": "dra", "dra": {"devices": "dynamic-mig", "layout": LAYOUT}}, "spec.dra.layout"),
        ({"mode": "hami-core", "dra": {}}, "spec.dra"),
        ({"mode": "dra", "dra": {"devices": "vgpu"}}, "spec.dra.devices"),
        ({"mode": "dra", "mig": {"partitioning": "dynamic"}}, "spec.mig"),
        ({"mode": "dra", "hamiCore": {"deviceSplitCount": 4}}, "spec.hamiCore"),
    ],
)
def test_a_dra_spec_the_crd_refuses_is_refused_naming_the_field(
    fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError):
        VGPUNodePolicySpec.model_validate({"nodeSelector": SELECTOR, **fields})
    assert field in refused(**fields)


def test_a_static_mig_layout_is_checked_as_mig_modes_is_and_named_under_spec_dra() -> None:
    second = {"gpus": [0], "profiles": {"7g.80gb": 1}}
    overlap = {"devices": "static-mig", "layout": [LAYOUT[0], second]}
    assert refused(mode="dra", dra=overlap) == ["spec.dra.layout[1].gpus"]


def test_hardware_changes_between_modes_are_read_from_the_gpus_mig_settings() -> None:
    whole = NodeConfig(mode="dra")
    layout = spec(dra={"devices": "static-mig", "layout": LAYOUT}).effective_mig()
    static = NodeConfig(mode="dra", mig=layout)
    mig_static = NodeConfig(mode="mig", mig=static.mig)
    assert whole.same_hardware_as(NodeConfig(mode="hami-core"))  # MIG off both
    assert whole.same_hardware_as(NodeConfig(mode="whole-gpu"))
    assert not whole.same_hardware_as(static)
    assert static.same_hardware_as(mig_static)  # the same layout: the GPUs stay as they are
    assert not NodeConfig(mode="dra", mig=MigSpec()).same_hardware_as(static)


def test_the_node_contract_places_the_dra_kubelet_plugin_by_its_own_label_value() -> None:
    assert contract.device_plugin_for("dra") == "dra"
    assert contract.device_plugin_for("dra", "static") == "dra"
    assert "dra" in contract.MODES and "dra" in contract.DEVICE_PLUGINS

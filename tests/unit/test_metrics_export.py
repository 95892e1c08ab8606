"""The controller's node gauges and the agent's metrics, as exported from what they are given:
series replaced as a whole (nothing stale), nodes counted by state, transitions detected, every
nvidia-smi call counted by its outcome, an action's hardware exported."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from vgpu_operator import contract
from vgpu_operator.agent import metrics as agent_metrics
from vgpu_operator.agent.apply import Outcome, Reason
from vgpu_operator.agent.smi import NvidiaSmi, SmiError
from vgpu_operator.controller import metrics
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.node import NodeConfig


def _value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def _agent_value(name: str, **labels: str) -> float | None:
    """A sample of the agent's /metrics page (its own registry, vgpu_operator.exposition), read
    with prometheus_client's parser."""
    for family in text_string_to_metric_families(agent_metrics.page().body.decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def test_node_gauges_are_replaced_as_a_whole() -> None:
    metrics.export_nodes(
        {
            "n1": ("a", "mig", "success"),
            "n2": ("a", "mig", "success"),
            "n3": ("b", "hami-core", "failed"),
        },
        {"a": 1, "b": 0},
        conflicts=2,
    )
    assert _value("vgpu_operator_nodes_managed", policy="a", mode="mig", state="success") == 2
    assert (
        _value("vgpu_operator_node_info", node="n3", policy="b", mode="hami-core", state="failed")
        == 1
    )
    assert _value("vgpu_operator_transitions_in_flight", policy="b") == 0
    assert _value("vgpu_operator_node_conflicts") == 2
    metrics.export_nodes({"n1": ("a", "whole-gpu", "applying")}, {"a": 0}, conflicts=0)
    assert _value("vgpu_operator_nodes_managed", policy="a", mode="mig", state="success") is None
    assert (
        _value("vgpu_operator_node_info", node="n3", policy="b", mode="hami-core", state="failed")
        is None
    )
    assert _value("vgpu_operator_transitions_in_flight", policy="b") is None
    assert (
        _value("vgpu_operator_nodes_managed", policy="a", mode="whole-gpu", state="applying") == 1
    )


def test_findings_and_conditions_are_replaced_as_a_whole() -> None:
    metrics.export_findings({("plugin-placement", "error"): 2, ("scheduler-args", "warning"): 1})
    metrics.export_findings({("scheduler-args", "warning"): 3})
    assert _value("vgpu_operator_findings", rule="plugin-placement", severity="error") is None
    assert _value("vgpu_operator_findings", rule="scheduler-args", severity="warning") == 3
    metrics.export_policy_conditions({"p": {"Ready": "True", "Stalled": "False"}})
    assert _value("vgpu_operator_policy_condition", policy="p", condition="Ready") == 1
    assert _value("vgpu_operator_policy_condition", policy="p", condition="Stalled") == 0


def _node(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "n", "labels": labels, "annotations": annotations}}


def test_state_and_transition_of_a_node() -> None:
    mig = NodeConfig.model_validate({"mode": "mig", "mig": {"partitioning": "dynamic"}})
    off = NodeConfig.model_validate({"mode": "whole-gpu"})
    held = node_facts(
        _node(
            {contract.LABEL_STATE: "success"},
            {contract.ANN_TARGET: mig.to_annotation(), contract.ANN_CONFIG: off.to_annotation()},
        )
    )
    assert metrics.in_transition(held)
    assert metrics.node_state(held, refused=False) == "success"
    assert metrics.node_state(held, refused=True) == "blocked"
    settled = node_facts(
        _node(
            {}, {contract.ANN_TARGET: mig.to_annotation(), contract.ANN_CONFIG: mig.to_annotation()}
        )
    )
    assert not metrics.in_transition(settled)
    assert metrics.node_state(settled, refused=False) == "unknown"
    rolling = node_facts(_node({}, {contract.ANN_ROLLOUT: '{"step": "draining"}'}))
    assert metrics.in_transition(rolling)


def _calls(outcome: str) -> float:
    return _agent_value("vgpu_operator_agent_nvidia_smi_calls_total", outcome=outcome) or 0.0


@pytest.mark.parametrize(
    ("binary", "args", "outcome"),
    [
        ("/bin/true", (), "ok"),
        ("/bin/false", (), "error"),
        ("/bin/sleep", ("5",), "timeout"),
        ("/nonexistent/nvidia-smi", (), "not_run"),
    ],
)
def test_every_nvidia_smi_call_is_counted_by_outcome(
    binary: str, args: tuple[str, ...], outcome: str
) -> None:
    before = _calls(outcome)
    timeouts = _agent_value("vgpu_operator_agent_nvidia_smi_timeouts_total") or 0.0
    smi = NvidiaSmi(binary, timeout=0.3, kill_grace=2)
    if outcome == "ok":
        asyncio.run(smi.run(*args))
    else:
        with pytest.raises(SmiError):
            asyncio.run(smi.run(*args))
    assert _calls(outcome) == before + 1
    expected = timeouts + (1 if outcome == "timeout" else 0)
    assert _agent_value("vgpu_operator_agent_nvidia_smi_timeouts_total") == expected


def test_an_action_exports_its_outcome_and_the_hardware() -> None:
    inventory = Inventory.model_validate(
        {
            "gpus": [
                {
                    "index": i,
                    "uuid": f"GPU-{i}",
                    "name": "NVIDIA A100-SXM4-80GB",
                    "bus_id": f"0000:0{i}:00.0",
                    "memory_mib": 81920,
                    "mig_capable": True,
                    "mig_current": i == 0,
                    "mig_pending": i == 0,
                    "instances": [
                        {"id": 1, "profile_id": 9, "name": "3g.40gb", "start": 0, "size": 4},
                        {"id": 2, "profile_id": 19, "name": "1g.10gb", "start": 6, "size": 1},
                    ]
                    if i == 0
                    else [],
                }
                for i in range(2)
            ]
        }
    )
    before = (
        _agent_value("vgpu_operator_agent_mig_applies_total", state="success", reason="Applied")
        or 0
    )
    outcome = Outcome("success", Reason.APPLIED, "", inventory=inventory)
    agent_metrics.action_done(outcome.state, outcome.event_reason, 2.0, outcome.inventory)
    assert (
        _agent_value("vgpu_operator_agent_mig_applies_total", state="success", reason="Applied")
        == before + 1
    )
    assert _agent_value("vgpu_operator_agent_state", state="success") == 1
    assert _agent_value("vgpu_operator_agent_state", state="failed") == 0
    name = "NVIDIA A100-SXM4-80GB"
    assert _agent_value("vgpu_operator_agent_gpus", model=name, mig_mode="enabled") == 1
    assert _agent_value("vgpu_operator_agent_gpus", model=name, mig_mode="disabled") == 1
    assert _agent_value("vgpu_operator_agent_mig_instances", gpu="0", profile="3g.40gb") == 1
    failed = Outcome("failed", Reason.TIMEOUT, "no answer")
    agent_metrics.action_done(failed.state, failed.event_reason, 60.0, failed.inventory)
    assert _agent_value("vgpu_operator_agent_state", state="failed") == 1
    assert (
        _agent_value("vgpu_operator_agent_mig_applies_total", state="failed", reason="Timeout")
        is not None
    )
    # the hardware could not be read: the last read stays
    assert _agent_value("vgpu_operator_agent_mig_instances", gpu="0", profile="3g.40gb") == 1

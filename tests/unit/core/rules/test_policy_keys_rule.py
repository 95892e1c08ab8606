"""doctor's policy-keys rule: the controller's own decision (`core.nodes.policy_keys`) over the
policies doctor reads, one error per unlisted key naming the policy, the key and the fix;
nothing without a list, for a policy being deleted, or for an invalid one."""

from __future__ import annotations

from tests.kit.nodekit import HAMI, policy
from vgpu_operator import contract
from vgpu_operator.core.rules import ClusterSnapshot, ObjectRef, run_rules
from vgpu_operator.models.config import OperatorConfig

TAINT = {"key": "example.com/gpu-pool", "value": "x", "effect": "NoSchedule"}
KEYS = OperatorConfig.model_validate(
    {"policyKeys": {"labels": ["volcano.sh/"], "taints": ["volcano.sh/"]}}
)


def test_each_unlisted_key_is_an_error_on_its_policy() -> None:
    snapshot = ClusterSnapshot(
        config=KEYS,
        policies=[
            policy("listed", HAMI),
            policy("unlisted", {**HAMI, "nodeTaints": [TAINT], "nodeLabels": {"team": "a"}}),
            policy("leaving", {**HAMI, "nodeTaints": [TAINT]}, deleting=True),
            policy("invalid", {**HAMI, "nodeTaints": [{"key": "x", "effect": "Never"}]}),
        ],
    )
    found = run_rules(snapshot, only=["policy-keys"]).findings
    assert [(f.severity, f.objects) for f in found] == [
        ("error", (ObjectRef(kind=contract.POLICY_KIND, name="unlisted"),))
    ] * 2
    messages = sorted(f.message for f in found)
    assert messages[0].startswith("spec.nodeLabels: policy unlisted asks for the label key team")
    assert messages[1].startswith(
        "spec.nodeTaints: policy unlisted asks for the taint key example.com/gpu-pool"
    )
    assert all("config.policyKeys" in f.fix for f in found)


def test_without_a_list_the_rule_finds_nothing() -> None:
    snapshot = ClusterSnapshot(policies=[policy("unlisted", {**HAMI, "nodeTaints": [TAINT]})])
    assert run_rules(snapshot, only=["policy-keys"]).findings == []

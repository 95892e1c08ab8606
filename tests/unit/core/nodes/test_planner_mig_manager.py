"""disableNvidiaMigManager: the GPU Operator's mig-manager switched off on a pool's nodes
(`nvidia.com/gpu.deploy.mig-manager=false`, its DaemonSet's nodeSelector wants `true`), the
user's earlier value restored when the node leaves, as disableNvidiaDevicePlugin does."""

from __future__ import annotations

import pytest

from tests.kit.nodekit import (
    HAMI,
    annotations_of,
    converge,
    labels_of,
    node,
    policy,
)
from vgpu_operator import contract
from vgpu_operator.models.node import GPU_OPERATOR_MIG_MANAGER_LABEL as MM
from vgpu_operator.models.node import Owned
from vgpu_operator.models.policy import VGPUNodePolicySpec

STATIC = {
    "mode": "mig",
    "nodeSelector": {"matchLabels": {"pool": "a"}},
    "mig": {"partitioning": "static", "layout": [{"gpus": "all", "profiles": {"1g.20gb": 4}}]},
}


@pytest.mark.parametrize("prior", [None, "true"])
def test_mig_manager_switched_off_and_restored_on_leave(prior: str | None) -> None:
    labels = {"pool": "a"} | ({MM: prior} if prior else {})
    spec = {**STATIC, "disableNvidiaMigManager": True}
    (configured,), _ = converge([node("n1", labels)], [policy("p", spec)])
    assert labels_of(configured)[MM] == "false"
    owned = Owned.from_annotation(annotations_of(configured)[contract.ANN_OWNED])
    assert owned.labels[MM] == "false" and owned.replaced == ({MM: prior} if prior else {})
    (out,), _ = converge([configured], [])
    assert labels_of(out).get(MM) == prior


def test_both_gpu_operator_switches_together() -> None:
    dp = contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL
    spec = {**HAMI, "disableNvidiaDevicePlugin": True, "disableNvidiaMigManager": True}
    (configured,), _ = converge([node("n1", {"pool": "a", MM: "true"})], [policy("p", spec)])
    assert (labels_of(configured)[dp], labels_of(configured)[MM]) == ("false", "false")
    (out,), _ = converge([configured], [policy("p", HAMI, generation=2)])
    assert labels_of(out)[MM] == "true" and dp not in labels_of(out)


def test_the_field_defaults_off_and_is_in_the_schema() -> None:
    spec = VGPUNodePolicySpec.model_validate(STATIC)
    assert spec.disable_nvidia_mig_manager is False
    (configured,), _ = converge([node("n1", {"pool": "a", MM: "true"})], [policy("p", STATIC)])
    assert labels_of(configured)[MM] == "true"  # untouched without the field

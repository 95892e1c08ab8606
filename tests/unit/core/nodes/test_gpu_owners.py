"""Who else drives MIG on a node, as its labels and annotations show it
(`core.nodes.gpu_owners`): the one decision the agent's refusal and the rules share."""

from __future__ import annotations

from tests.kit.second_owners import HAMI_REGISTERED
from vgpu_operator.core.nodes.gpu_owners import (
    HAMI_REGISTER_ANNOTATION,
    MIG_MANAGER,
    other_owners,
)
from vgpu_operator.models.node import GPU_OPERATOR_MIG_CONFIG_LABEL, GPU_OPERATOR_MIG_MANAGER_LABEL


def test_nothing_on_the_node_no_other_owner() -> None:
    assert other_owners({}, {}) == ()
    # Volcano's plugin registers under its own key (volcano.sh/node-vgpu-register): not HAMi's
    assert other_owners({}, {"volcano.sh/node-vgpu-register": "GPU-1,10,81920,NVIDIA-x,0,"}) == ()
    # an empty annotation registers nothing
    assert other_owners({}, {HAMI_REGISTER_ANNOTATION: ""}) == ()


def test_each_owner_with_its_evidence_and_fix_in_a_fixed_order() -> None:
    labels = {GPU_OPERATOR_MIG_MANAGER_LABEL: "true", GPU_OPERATOR_MIG_CONFIG_LABEL: "all-balanced"}
    manager, hami = other_owners(labels, {HAMI_REGISTER_ANNOTATION: HAMI_REGISTERED})
    assert manager.component == MIG_MANAGER
    assert manager.said == (
        "the GPU Operator's mig-manager is configured on this node "
        "(nvidia.com/gpu.deploy.mig-manager=true, nvidia.com/mig.config=all-balanced)"
    )
    assert "disableNvidiaMigManager: true" in manager.fix
    assert hami.said == (
        "HAMi's own device plugin (hami-device-plugin) has registered this node's GPUs "
        "(hami.io/node-nvidia-register)"
    )
    assert 'gpu: "on"' in hami.fix and HAMI_REGISTER_ANNOTATION in hami.fix

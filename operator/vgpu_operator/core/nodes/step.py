"""What the rollout decides for one node in one pass (`core.rollout.decide`), as the node PATCH
carries it.

Kept apart from `core.rollout.decide` so the node planner (`core.nodes.planner`) can take a step
without
depending on the state machine: a node with a step has its `config` released only through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.rollout import NodeRollout

# The GPU Operator's operands that hold the GPUs, switched per node by these labels; its
# mig-manager sets the ones that are `true` to `paused-for-mig-change` around a MIG change (their
# DaemonSets' nodeSelector no longer matches, so their pods leave) and back to `true`, leaving a
# `false` alone (NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go; the optional
# `nvidia.com/gpu.deploy.client` marks third-party GPU clients the same way).
OPERAND_LABELS = (
    "nvidia.com/gpu.deploy.device-plugin",
    "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "nvidia.com/gpu.deploy.dcgm-exporter",
    "nvidia.com/gpu.deploy.dcgm",
    "nvidia.com/gpu.deploy.nvsm",
    "nvidia.com/gpu.deploy.client",
)
PAUSED_VALUE = "paused-for-mig-change"


@dataclass(frozen=True)
class NodeEvent:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class NodeStep:
    """`rollout`: the annotation to carry (None: none). `config`: the configuration to release
    now (None: `config` stays as it is). `unschedulable`: the cordon to set (None: leave it).
    `plugin_paused`: the node's device-plugin placement label is taken off (its plugin pod
    leaves). `labels`: GPU Operator switches to write. `evict`: pods (namespace/name) to evict
    now. `event`: what to post on the Node. `keep_rollout`: leave the annotation as it is
    (it does not parse: a person decides). `wake`: when to decide again."""

    node: str
    rollout: NodeRollout | None = None
    config: NodeConfig | None = None
    unschedulable: bool | None = None
    plugin_paused: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    evict: tuple[str, ...] = ()
    event: NodeEvent | None = None
    keep_rollout: bool = False
    wake: datetime | None = None  # decide again then (a wait that no watch event ends)

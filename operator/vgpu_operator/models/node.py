"""Payloads of the node contract's JSON annotations (contract.ANN_*).

`NodeConfig` is both `vgpu.volcano.sh/target` (what the policies want) and
`vgpu.volcano.sh/config` (what is released to the node: the agent applies it and the
node-config ConfigMap entry says it). `Owned` is the record of what the operator set, so it
removes only that.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vgpu_operator import contract
from vgpu_operator.models.policy import Taint
from vgpu_operator.models.policy_modes import AscendVnpuSpec, HamiCoreSpec, MigSpec

# The GPU Operator's mig-manager (NVIDIA/mig-parted@v0.15.0:cmd/nvidia-mig-manager): its DaemonSet
# runs on nodes labelled `nvidia.com/gpu.deploy.mig-manager=true`
# (NVIDIA/gpu-operator@a22dbf671f2e:assets/state-mig-manager/0600_daemonset.yaml) and applies the
# mig-parted config the node's `nvidia.com/mig.config` label names. A policy's
# `disableNvidiaMigManager` sets the first to "false" on its nodes; the agent applies no static
# layout where the manager is configured.
GPU_OPERATOR_MIG_MANAGER_LABEL = contract.GPU_OPERATOR_MIG_MANAGER_LABEL
GPU_OPERATOR_MIG_CONFIG_LABEL = "nvidia.com/mig.config"


class NodeConfig(BaseModel):
    """A node's desired (target) or released (config) configuration."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    mode: contract.Mode
    policy: str | None = None
    generation: int = 0
    hami_core: HamiCoreSpec | None = Field(default=None, alias="hamiCore")
    ascend_vnpu: AscendVnpuSpec | None = Field(default=None, alias="ascendVnpu")
    mig: MigSpec | None = None

    def to_annotation(self) -> str:
        return json.dumps(
            self.model_dump(by_alias=True, exclude_none=True, mode="json"),
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_annotation(cls, raw: str | None) -> NodeConfig | None:
        if not raw:
            return None
        return cls.model_validate_json(raw)

    @property
    def device_plugin(self) -> contract.DevicePlugin | None:
        """The device plugin that serves the node in this configuration (None: NVIDIA's)."""
        return contract.device_plugin_for(self.mode, self.mig.partitioning if self.mig else None)

    @property
    def gpu_mig(self) -> MigSpec | None:
        """The MIG settings the node's GPUs carry in this configuration, as the agent applies
        them: mode mig's (dynamic when unset), a dra node's (`mig` holds its static layout or
        dynamic MIG; unset: whole GPUs); None: MIG off (or no NVIDIA GPU to touch)."""
        if self.mode == "mig":
            return self.mig or MigSpec()
        if self.mode == "dra":
            return self.mig
        return None

    def same_hardware_as(self, other: NodeConfig | None) -> bool:
        """True when the GPUs need no change between the two (MIG on or off, and the layout)."""
        theirs = other.gpu_mig if other is not None else None
        return self.gpu_mig == theirs


class Owned(BaseModel):
    """What the operator put on a node: only these are ever removed by it.

    A label or taint the node had before with exactly the value a policy wanted, recorded under
    `adoptExisting`, keeps the user's value in `replaced` / `replacedTaints`: it is put back,
    never removed, when the node leaves (core.nodes.patch). `onDelete` is the node's policy's
    choice when the operator last configured it, so a policy that vanished without the
    operator's finalizer pass still decides what its nodes keep (core.nodes.adoption)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    # Labels the operator overwrote or adopted, with the value a user had set before (restored
    # on leave).
    replaced: dict[str, str] = Field(default_factory=dict)
    # Taints a user had set before, adopted with the same key and effect (restored on leave).
    replaced_taints: list[Taint] = Field(default_factory=list, alias="replacedTaints")
    # The policy's `spec.onDelete` (its own, or the operator config's default) when it was set.
    on_delete: Literal["Delete", "Retain"] | None = Field(default=None, alias="onDelete")

    def to_annotation(self) -> str:
        """The annotation's JSON; the fields added later only when set, so a record written
        before them reads back as the same text."""
        body = self.model_dump(mode="json", by_alias=True)
        for key in ("replacedTaints", "onDelete"):
            if not body.get(key):
                body.pop(key, None)
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, raw: str | None) -> Owned:
        if not raw:
            return cls()
        return cls.model_validate_json(raw)

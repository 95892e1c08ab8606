"""The payload of `vgpu.volcano.sh/rollout` on a Node: where its transition stands.

The controller writes it in the same PATCH as the step it records (the cordon, the pause, the
release), so a restarted operator reads exactly what was done and resumes from there
(`core.rollout.decide`). It is removed when the transition ends; a failed transition keeps it (phase
`Failed`, with the reason) until the policy's spec changes or the node no longer needs the
change.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Draining: cordoned (when drain is enabled), the node's GPU pods being evicted or waited for.
# Pausing: the node's vGPU plugin and the GPU Operator's operands told to leave the node; the
#   release waits until the plugin pod has gone.
# Applying: `config` released; the node agent applies it; the plugin resumes once the agent
#   succeeded and the node-config entry renders the release (`core.rollout.plugin`).
# Verifying: the plugin resumed (or restarted by the configuration change); its registration of
#   the node is checked.
# Failed: a terminal state; `onFailure` was applied, the reason is in `reason` / `message`.
Phase = Literal["Draining", "Pausing", "Applying", "Verifying", "Failed"]
PHASES: tuple[Phase, ...] = ("Draining", "Pausing", "Applying", "Verifying", "Failed")

# disruptive: the mode or the MIG layout changes (cordon, drain, pause, apply, verify);
# restart: only what the device plugin reads changes (split count, scaling): released under the
#   same budget without cordon or drain, the plugin's registration verified.
# leave: the node leaves every pool while GPU pods run on it (`core.rollout.leave`): cordon,
#   drain, pause, then the release removes the operator's labels, taints and entries; `target`
#   is the configuration it keeps (`{mode: whole-gpu}` after MIG: the agent turns MIG off) or
#   "" (none); `policy` is the policy it leaves.
Kind = Literal["disruptive", "restart", "leave"]


class NodeRollout(BaseModel):
    """One node's transition."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    # the policy whose budget the node counts against: the destination, or the one it leaves
    policy: str
    generation: int  # that policy's generation whose target is being rolled
    target: str  # the `vgpu.volcano.sh/target` text being rolled out
    kind: Kind
    phase: Phase
    started: datetime  # when the transition began (progressDeadlineSeconds)
    since: datetime  # when the current phase began (its timeout)
    # The operator cordoned the node (it was schedulable before): only then does it uncordon.
    cordoned: bool = False
    plugin_paused: bool = Field(default=False, alias="pluginPaused")
    # GPU Operator operand switches set to `paused-for-mig-change`, with the value they had.
    paused: dict[str, str] = Field(default_factory=dict)
    released: bool = False  # `config` := `target` was written
    # What is verified after the release: the node agent reports success for it (an agent runs
    # on the node), the device plugin registers the node again (it had registered it).
    agent: bool = False
    registered: bool = False
    reason: str = ""
    message: str = ""

    def to_annotation(self) -> str:
        data = self.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        data.update({"policy": self.policy, "generation": self.generation, "kind": self.kind})
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, raw: str | None) -> NodeRollout | None:
        if not raw:
            return None
        return cls.model_validate_json(raw)

    @property
    def failed(self) -> bool:
        return self.phase == "Failed"

"""The policies as every pass plans with them: `spec.onDelete` filled from the operator config,
and each policy the cluster cannot apply marked refused. Pure.

The controller's passes (`controller.reconciler`), `plan` (`core.plan`, and observe mode through
it) all take their policies from `refuse_policies`, so they hold back the same policies for the
same reasons. A refused policy is held as if suspended (`ParsedPolicy.refused`): its nodes keep
what they carry, a node newly selected waits, its status says Stalled with the first refusal's
reason. The refusals, each adding its problems to those before it:

1. a `spec.hamiCore` value a HAMi device plugin ≤ v1.11 would not apply
   (`core.volcano.plugin_refusal`; `plugin` None: the plugin applies per-node values, or is
   unknown);
2. a node label or taint key the operator config's `policyKeys` does not list
   (`core.nodes.policy_keys`);
3. a dra pool the installation of NVIDIA's DRA driver cannot serve (`core.nodes.dra_pools`).

A policy being deleted, or invalid, is never refused: its nodes leave as any deletion's do.
"""

from __future__ import annotations

from collections.abc import Iterable

from vgpu_operator.core.nodes.adoption import with_on_delete_default
from vgpu_operator.core.nodes.dra_pools import refuse_unservable_dra
from vgpu_operator.core.nodes.policy_keys import refuse_unlisted
from vgpu_operator.core.nodes.validate import ParsedPolicy
from vgpu_operator.core.volcano.plugin_refusal import PluginNodeValues, refuse_ignored
from vgpu_operator.models.config import OperatorConfig

__all__ = ["refuse_policies"]


def refuse_policies(
    policies: Iterable[ParsedPolicy], config: OperatorConfig, plugin: PluginNodeValues | None
) -> list[ParsedPolicy]:
    """The policies as a pass plans with them under the operator config `config`, with the
    configured device plugin's values `plugin` (`core.volcano.plugin_refusal.plugin_node_values`
    of the DaemonSet as the caller reads it)."""
    defaulted = with_on_delete_default(policies, config.on_delete)
    checked = refuse_ignored(defaulted, plugin)
    listed = refuse_unlisted(checked, config.policy_keys)
    return refuse_unservable_dra(listed, config.dra)

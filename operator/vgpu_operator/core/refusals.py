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
3. a dra pool the installation of NVIDIA's DRA driver cannot serve (`core.nodes.dra_pools`);
4. an ascend-vnpu pool that would turn on hami-vnpu-core soft slicing where it cannot run: a
   scheduler older than Volcano 1.16 or a node it owns that is not arm64
   (`core.volcano.soft_slicing`; `scheduler` None, or a version not known: nothing is refused
   for the version, and the rule `ascend-soft-slicing` warns; `scheduler` `NOT_READ_YET`, a read
   still to come: each pool that may turn it on *waits*, `ParsedPolicy.waiting`, held as a
   refused one is, and is refused or accepted once the scheduler is read).

What each refusal reads of the cluster is handed in here, by every caller alike: the plugin's
values, the nodes, the scheduler (`refusal_scheduler` of the snapshot the caller plans with;
`plan` reads the cluster itself, so for it the scheduler is always read).

A policy being deleted, or invalid, is never refused: its nodes leave as any deletion's do.
"""

from __future__ import annotations

from collections.abc import Iterable

from vgpu_operator.core.nodes.adoption import with_on_delete_default
from vgpu_operator.core.nodes.dra_pools import refuse_unservable_dra
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.policy_keys import refuse_unlisted
from vgpu_operator.core.nodes.validate import ParsedPolicy
from vgpu_operator.core.volcano.plugin_refusal import PluginNodeValues, refuse_ignored
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.soft_slicing import (
    NOT_READ_YET,
    AscendScheduler,
    ascend_scheduler,
    refuse_soft_slicing,
)
from vgpu_operator.models.config import OperatorConfig

__all__ = ["NOT_READ_YET", "AscendScheduler", "refusal_scheduler", "refuse_policies"]


def refusal_scheduler(s: ClusterSnapshot | None) -> AscendScheduler | None:
    """What the refusals read of the scheduler, from a snapshot (None: none read, and none will
    be; a read still to come is `NOT_READ_YET`)."""
    return ascend_scheduler(s) if s is not None else None


def refuse_policies(
    policies: Iterable[ParsedPolicy],
    config: OperatorConfig,
    plugin: PluginNodeValues | None,
    *,
    nodes: Iterable[NodeFacts],
    scheduler: AscendScheduler | None,
) -> list[ParsedPolicy]:
    """The policies as a pass plans with them under the operator config `config`, with the
    configured device plugin's values `plugin` (`core.volcano.plugin_refusal.plugin_node_values`
    of the DaemonSet as the caller reads it), every Node's facts `nodes` and the scheduler
    `scheduler` (`refusal_scheduler`)."""
    defaulted = with_on_delete_default(policies, config.on_delete)
    checked = refuse_ignored(defaulted, plugin)
    listed = refuse_unlisted(checked, config.policy_keys)
    served = refuse_unservable_dra(listed, config.dra)
    return refuse_soft_slicing(served, scheduler, nodes)

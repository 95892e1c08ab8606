"""How a node without a released configuration arrives in its pool: its first configuration, a
lost `vgpu.volcano.sh/config`, or a selector widened over it. Through the rollout gate when it
is busy and the release may change its GPUs; at once otherwise. Pure."""

from __future__ import annotations

from pydantic import ValidationError

from vgpu_operator import contract
from vgpu_operator.core.mig.partition import DESTRUCTIVE, plan_node
from vgpu_operator.core.rollout.arrive import ChangeKind, NodeView, change_kind
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.volcano import PayloadError, parse_register

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # NVIDIA's device plugin, mixed strategy


def arrival_kind(target: NodeConfig | None, view: NodeView) -> ChangeKind:
    """`change_kind` for a node whose released configuration is known; for one without (its
    first configuration, a lost `vgpu.volcano.sh/config`, a selector widened over it) what the
    node's hardware and GPU consumers say. An idle node, or a target that leaves the GPUs as they
    are, is released at once. A busy node goes through the gate when the release may change its
    GPUs: by the agent's inventory, when the steps the agent would plan for it
    (`core.mig.partition.plan_node`, as the agent plans them) destroy, reset or switch MIG mode;
    without an inventory, when the MIG mode may switch (the node shows MIG on and the target is
    not MIG, or the reverse) or the target is a static layout (what stands there is not known,
    so nothing is guessed safe). Dynamic MIG over GPUs already in MIG mode keeps the instances
    there (`core.mig.layout.switching_into_dynamic`: nothing applied yet is no switch). A busy
    node arriving in a dra pool always goes through the gate: the DRA driver would publish the
    GPUs its pods hold through another plugin."""
    config = view.facts.config
    if config is not None or target is None:
        return change_kind(target, config)
    if not view.pods:
        return "trivial"  # nothing runs on its GPUs: released at once
    try:
        inventory = Inventory.from_annotation(view.facts.annotations.get(contract.ANN_INVENTORY))
    except (ValidationError, ValueError):
        inventory = None
    if inventory is not None and inventory.gpus:
        steps = plan_node(inventory, target, inventory.applied).steps
        return "disruptive" if any(s.kind in DESTRUCTIVE for s in steps) else "trivial"
    if target.mode == "dra":
        return "disruptive"  # its GPUs change owners: the DRA driver publishes what pods hold
    mig_on = shows_mig_on(view)
    mig = target.gpu_mig
    if mig is None:
        return "disruptive" if mig_on else "trivial"
    static = mig.partitioning == "static"
    return "disruptive" if static or not mig_on else "trivial"


def shows_mig_on(view: NodeView) -> bool:
    """The node shows its GPUs in MIG mode without an agent: NVIDIA's device plugin lists MIG
    resources in its capacity (mixed strategy), or HAMi's plugin registers its GPUs in mode
    `mig` (its dynamic MIG)."""
    if any(k.startswith(MIG_RESOURCE_PREFIX) for k in view.facts.capacity):
        return True
    try:
        gpus = parse_register(view.registration or "")
    except PayloadError:
        return False
    return any(g.mode == "mig" for g in gpus)

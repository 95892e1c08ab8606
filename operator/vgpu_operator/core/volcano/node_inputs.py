"""A node's GPU counts as the configuration pass reads them, each within `vgpu_operator.bounds`.

Three per-node counts reach the pass: GPU Feature Discovery's `nvidia.com/gpu.count` label, the
GPUs of the agent's inventory (`vgpu.volcano.sh/inventory`) and the device plugin's register
records (`volcano.sh/node-vgpu-register`, one per GPU). Each is checked before anything is made
from it: a value out of bounds is read as absent (a static-MIG node's node-config entry then
filters every index a policy may name, as for a node whose GPUs are not known yet), and
`out_of_bounds` names the field for the `node-input-bounds` rule. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vgpu_operator import bounds, contract
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, RegisteredGpu

MAX = bounds.MAX_GPUS_PER_NODE


@dataclass(frozen=True)
class OutOfBounds:
    """One field of a node over its bound: where (`field`) and why (`problem`)."""

    field: str
    problem: str


def inventory_problem(inventory: Inventory) -> str | None:
    """Why the inventory's GPU list is out of bounds: too many GPUs, or an index outside
    0..MAX-1 (None: within them)."""
    if len(inventory.gpus) > MAX:
        return f"lists {len(inventory.gpus)} GPUs, more than the {MAX} a node may have"
    for gpu in inventory.gpus:
        if not 0 <= gpu.index < MAX:
            index = str(gpu.index)
            shown = index if len(index) <= 12 else f"{index[:12]}... ({len(index)} digits)"
            return f"lists GPU index {shown}, outside 0-{MAX - 1}"
    return None


def register_problem(records: Sequence[RegisteredGpu]) -> str | None:
    """Why a register annotation is out of bounds: more records (GPUs) than a node may have."""
    if len(records) > MAX:
        return f"holds {len(records)} GPU records, more than the {MAX} a node may have"
    return None


def gpu_indexes(labels: Mapping[str, str], inventory: Inventory | None) -> list[int] | None:
    """The indexes of the node's GPUs: from the agent's inventory, else 0..n-1 with n from GFD's
    count label; None when neither says, or what says is out of bounds."""
    if inventory is not None and inventory.gpus:
        if inventory_problem(inventory) is not None:
            return None
        return sorted(g.index for g in inventory.gpus)
    count = bounds.gpu_count(labels.get(contract.GFD_COUNT))
    return list(range(count)) if count is not None else None


def out_of_bounds(
    labels: Mapping[str, str],
    inventory: Inventory | None,
    records: Sequence[RegisteredGpu] | None,
) -> list[OutOfBounds]:
    """Every per-node count of one node that is out of bounds, with its field."""
    out = []
    label = labels.get(contract.GFD_COUNT)
    problem = bounds.count_out_of_bounds(label) if label is not None else None
    if problem is not None:
        out.append(OutOfBounds(f"label {contract.GFD_COUNT}", problem))
    problem = inventory_problem(inventory) if inventory is not None else None
    if problem is not None:
        out.append(OutOfBounds(f"annotation {contract.ANN_INVENTORY} (gpus)", problem))
    problem = register_problem(records) if records else None
    if problem is not None:
        out.append(OutOfBounds(f"annotation {REGISTER_ANNOTATION}", problem))
    return out

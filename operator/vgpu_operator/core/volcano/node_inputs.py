"""What a Node says of itself, as the rules and the configuration pass read it: the configuration
the operator released to it (and the one it targets), the device plugin's register records, the
agent's inventory, its GPUs' names and indexes; its GPU counts each within `vgpu_operator.bounds`.

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
from typing import Any

from vgpu_operator import bounds, contract
from vgpu_operator.models import gpu_catalog
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.volcano import (
    REGISTER_ANNOTATION,
    PayloadError,
    RegisteredGpu,
    parse_register,
)

MAX = bounds.MAX_GPUS_PER_NODE
# GFD writes the NVML name with spaces as dashes; known models map back exactly.
_PRODUCT_TO_NVML = {
    m.nvml_name.replace(" ", "-"): m.nvml_name for m in gpu_catalog.GPU_MODELS.values()
}


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


def _metadata(node: Mapping[str, Any], part: str) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get(part) or {}


def _config(node: Mapping[str, Any], annotation: str) -> NodeConfig | None:
    try:
        return NodeConfig.from_annotation(_metadata(node, "annotations").get(annotation))
    except ValueError:
        return None


def released(node: Mapping[str, Any]) -> NodeConfig | None:
    """The configuration the operator released to the node (None: none, or unreadable)."""
    return _config(node, contract.ANN_CONFIG)


def target(node: Mapping[str, Any]) -> NodeConfig | None:
    """The configuration the node is on its way to (None: none, or unreadable)."""
    return _config(node, contract.ANN_TARGET)


def registered(node: Mapping[str, Any]) -> list[RegisteredGpu] | None:
    """The plugin's register records; [] when they cannot be read or are more than a node may
    have (`register_problem`)."""
    raw = _metadata(node, "annotations").get(REGISTER_ANNOTATION)
    if raw is None:
        return None
    try:
        records = parse_register(raw)
    except PayloadError:
        return []
    return records if register_problem(records) is None else []


def inventory(node: Mapping[str, Any]) -> Inventory | None:
    """The agent's inventory of the node's GPUs (None: none, or unreadable)."""
    try:
        return Inventory.from_annotation(_metadata(node, "annotations").get(contract.ANN_INVENTORY))
    except ValueError:
        return None


def node_gpu_indexes(node: Mapping[str, Any]) -> list[int] | None:
    """`gpu_indexes` of the node, from its labels and inventory."""
    return gpu_indexes(_metadata(node, "labels"), inventory(node))


def gpu_names(node: Mapping[str, Any]) -> tuple[list[str], str]:
    """NVML names of the node's GPUs and where they came from: the plugin's register records
    (what the scheduler matches), the agent's inventory, or the GFD label."""
    records = registered(node)
    if records:
        return sorted({g.type.removeprefix("NVIDIA-") for g in records}), "register"
    inv = inventory(node)
    if inv is not None and inv.gpus:
        return sorted({g.name for g in inv.gpus}), "inventory"
    product = _metadata(node, "labels").get(contract.GFD_PRODUCT)
    if product:
        return [_PRODUCT_TO_NVML.get(product, product)], "label"
    return [], "none"

"""What one node writes stays within what a node may have (`vgpu_operator.bounds`): its GPU
counts (GPU Feature Discovery's label, the agent's inventory, the device plugin's register
records; core.volcano.node_inputs) and the size of its entry in the node ConfigMaps
(core.volcano.render.node_config `oversized`). A node over a bound is refused: the value is not
used, or the entry not written, and the other nodes proceed; each finding names the node and
the field."""

from __future__ import annotations

from collections.abc import Iterator

from vgpu_operator import bounds, contract
from vgpu_operator.core.rules.base import Issue, ObjectRef, cm_ref, error, rule
from vgpu_operator.core.volcano.node_inputs import out_of_bounds
from vgpu_operator.core.volcano.render.node_config import ascend_entries, node_entries, oversized
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, annotations_of, labels_of, name_of
from vgpu_operator.core.volcano.writes import released_configs
from vgpu_operator.models.volcano import (
    REGISTER_ANNOTATION,
    PayloadError,
    RegisteredGpu,
    parse_register,
)


def _records(raw: str | None) -> list[RegisteredGpu] | None:
    if raw is None:
        return None
    try:
        return parse_register(raw)
    except PayloadError:
        return None  # unreadable: the node-registration rule says so


def _fix(node: str, field: str) -> str:
    if field.startswith("label "):
        return (
            f"correct or remove the label (kubectl label node {node} {contract.GFD_COUNT}-); GPU "
            "Feature Discovery writes it from the driver"
        )
    if contract.ANN_INVENTORY in field:
        return (
            "check the node's agent, which writes the inventory from nvidia-smi (the agent "
            "writes it again on its next pass)"
        )
    return "restart the node's device plugin pod, which writes its records again"


@rule("node-input-bounds", "no node reports more GPUs or a larger node-config entry than allowed")
def check_node_inputs(s: ClusterSnapshot) -> Iterator[Issue]:
    """At most `MAX_GPUS_PER_NODE` (64) GPUs per node, by every count the operator reads, and
    at most `MAX_NODE_ENTRY_BYTES` (16 KiB) per node-config entry: one node's label or
    annotation must not stall the configuration pass, exhaust the controller's memory, or bring
    a node ConfigMap over the apiserver's 1 MiB and so block every other node's entry."""
    for node in s.nodes:
        name = name_of(node)
        records = _records(annotations_of(node).get(REGISTER_ANNOTATION))
        for found in out_of_bounds(labels_of(node), s.inventory(node), records):
            yield error(
                ObjectRef(kind="Node", name=name),
                f"{name}: {found.field}: {found.problem}; the operator does not use it (the node "
                "is refused) and configures the other nodes as usual",
                fix=_fix(name, found.field),
            )
    released = released_configs(s)
    cfg = s.config
    for ref, desired in (
        (cfg.node_config, node_entries(released, cfg, s.gpus_by_node)),
        (cfg.ascend_node_config, ascend_entries(released, s.hami_vnpu_core)),
    ):
        for name, size in sorted(oversized(desired).items()):
            yield error(
                (ObjectRef(kind="Node", name=name), cm_ref(ref.namespace, ref.name)),
                f"the {ref.key} entry for {name} would take {size} bytes, more than the "
                f"{bounds.MAX_NODE_ENTRY_BYTES} one node may: it is not written (an entry "
                "already there is left as it was), and the other nodes' entries are",
                fix=f"check the node's released configuration (annotation {contract.ANN_CONFIG}) "
                "and its policy's filterDevices (a few hundred UUIDs at most)",
            )

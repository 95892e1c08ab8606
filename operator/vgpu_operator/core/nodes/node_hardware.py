"""The policy against one node's hardware (GFD labels, capacity): evidence of the mode's hardware
(`gpu_evidence`), a GPU count over what a node may have (`vgpu_operator.bounds`), MIG on a GPU
without MIG, a static layout the GPU model cannot hold, a GPU index the node does not have
(`node_problems`).

A GPU model is found from `nvidia.com/gpu.product` in `models.gpu_catalog`; a static layout on a
model the catalog does not confirm (a row of `models.gpu_catalog_unconfirmed`, a model in neither
table, a node without the label) is refused for that node, naming what would confirm it; dynamic
MIG on it is not blocked (the agent checks against `nvidia-smi mig -lgip`).
"""

from __future__ import annotations

import re

from vgpu_operator import bounds, contract
from vgpu_operator.core.mig import place as mig_place
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.problem import Problem
from vgpu_operator.models import gpu_catalog, gpu_catalog_unconfirmed
from vgpu_operator.models.policy import VGPUNodePolicySpec

_PRODUCT_SUFFIX = re.compile(r"-(MIG-.*|SHARED)$")
UNCONFIRMED_MODEL = "UnconfirmedMigModel"  # a static layout on a GPU no cited listing confirms


def gpu_model(facts: NodeFacts) -> gpu_catalog.GpuModel | None:
    """The catalog model of the node's GPUs from GFD's `nvidia.com/gpu.product`, if known."""
    product = facts.labels.get(contract.GFD_PRODUCT)
    if not product:
        return None
    product = _PRODUCT_SUFFIX.sub("", product)
    for model in gpu_catalog.GPU_MODELS.values():
        if model.nvml_name.replace(" ", "-") == product:
            return model
    return None


def _positive(quantity: str | None) -> bool:
    """A resource quantity or count label that is more than zero ("8", "1k"; not "0", "")."""
    return quantity is not None and any(c in "123456789" for c in quantity.split(".", 1)[0])


def gpu_evidence(facts: NodeFacts, mode: str) -> str | None:
    """What shows that the node has the hardware of `mode`, or None when nothing does.

    NVIDIA modes: GPU Feature Discovery's `nvidia.com/gpu.present=true` or a positive
    `nvidia.com/gpu.count`, or `nvidia.com/gpu` capacity (NVIDIA's device plugin). ascend-vnpu:
    Ascend capacity (`huawei.com/Ascend910*`, `huawei.com/Ascend310P*`), the Ascend device
    plugin's chip label, or NFD's PCI label of a Huawei accelerator; never `ascend=on`, which
    the operator itself sets."""
    labels = facts.labels
    if mode == "ascend-vnpu":
        for resource, quantity in sorted(facts.capacity.items()):
            if resource.startswith(contract.ASCEND_RESOURCE_PREFIXES) and _positive(quantity):
                return f"capacity {resource}={quantity}"
        if labels.get(contract.ASCEND_CHIP_LABEL):
            return f"label {contract.ASCEND_CHIP_LABEL}"
        if labels.get(contract.NFD_ASCEND_PCI_LABEL) == "true":
            return f"label {contract.NFD_ASCEND_PCI_LABEL}"
        return None
    if labels.get(contract.GFD_PRESENT) == "true":
        return f"label {contract.GFD_PRESENT}"
    if _positive(labels.get(contract.GFD_COUNT)):
        return f"label {contract.GFD_COUNT}"
    if _positive(facts.capacity.get(contract.NVIDIA_GPU_RESOURCE)):
        return f"capacity {contract.NVIDIA_GPU_RESOURCE}"
    return None


def no_gpu_evidence(facts: NodeFacts, mode: str) -> Problem:
    if mode == "ascend-vnpu":
        what = "Ascend NPU"
        looked = (
            f"no {', '.join(p + '*' for p in contract.ASCEND_RESOURCE_PREFIXES)} capacity, no "
            f"{contract.ASCEND_CHIP_LABEL} or {contract.NFD_ASCEND_PCI_LABEL} label"
        )
        example = f"{contract.ASCEND_CHIP_LABEL} Exists"
    else:
        what = "NVIDIA GPU"
        looked = (
            f"no {contract.GFD_PRESENT}=true or {contract.GFD_COUNT} label (GPU Feature "
            f"Discovery) and no {contract.NVIDIA_GPU_RESOURCE} capacity"
        )
        example = f"matchLabels {contract.GFD_PRESENT}: 'true'"
    return Problem(
        "spec.nodeSelector",
        "NoGpuEvidence",
        f"node {facts.name} shows no {what} ({looked}); the operator writes nothing to it",
        f"narrow spec.nodeSelector to the {what} nodes (e.g. {example}) or label the node "
        f"{contract.LABEL_EXCLUDE}=true; in a cluster without GPU Feature Discovery or the "
        "device plugin, set requireGpuEvidence: false in the operator config",
        facts.name,
    )


def gpu_count_out_of_bounds(facts: NodeFacts) -> Problem | None:
    """A GPU count label over `bounds.MAX_GPUS_PER_NODE` (or negative): the node is refused,
    whatever else it shows; the other nodes of the pool proceed."""
    label = facts.labels.get(contract.GFD_COUNT)
    problem = bounds.count_out_of_bounds(label) if label is not None else None
    if problem is None:
        return None
    return Problem(
        "metadata.labels",
        "GpuCountOutOfBounds",
        f"node {facts.name}: label {contract.GFD_COUNT} {problem}; the operator writes nothing "
        "to it",
        f"correct or remove the label (kubectl label node {facts.name} {contract.GFD_COUNT}-); "
        "GPU Feature Discovery writes it again from the driver",
        facts.name,
    )


def node_problems(
    facts: NodeFacts, spec: VGPUNodePolicySpec, *, require_evidence: bool = True
) -> list[Problem]:
    """Problems of applying `spec` to this node's hardware (empty when it fits). Without
    evidence of the mode's hardware (`gpu_evidence`) nothing else is checked: the node is
    reported and never written (unless `require_evidence` is off)."""
    if require_evidence and gpu_evidence(facts, spec.mode) is None:
        return [no_gpu_evidence(facts, spec.mode)]
    if spec.mode != "ascend-vnpu" and (too_many := gpu_count_out_of_bounds(facts)) is not None:
        return [too_many]
    mig = spec.effective_mig()
    if mig is None:
        return []
    node = facts.name
    product = facts.labels.get(contract.GFD_PRODUCT)
    capable = facts.labels.get(contract.GFD_MIG_CAPABLE)
    model = gpu_model(facts)
    selector_fix = (
        "narrow spec.nodeSelector to MIG-capable GPUs (e.g. matchLabels "
        f"{contract.GFD_MIG_CAPABLE}: 'true'), label the node {contract.LABEL_EXCLUDE}=true, "
        "or use mode hami-core"
    )
    if product is None and capable is None:
        return [
            Problem(
                "spec.mode",
                "NoGpuInfo",
                f"node {node} has no {contract.GFD_PRODUCT} label: no NVIDIA GPU, or GPU "
                "Feature Discovery has not labelled it yet; MIG cannot be set up",
                selector_fix,
                node,
            )
        ]
    if capable == "false" or (model is not None and not model.mig_capable):
        return [
            Problem(
                "spec.mode",
                "MigNotSupported",
                f"node {node} has {product or 'GPUs'} without MIG support; "
                f"{spec.mig_field} cannot apply",
                selector_fix,
                node,
            )
        ]
    if mig.partitioning != "static":
        return []
    if model is None:  # no confirmed catalog row: the layout cannot be checked
        field, dynamic = (
            ("spec.dra.devices", "dynamic-mig")
            if spec.mig_field == "spec.dra"
            else ("spec.mig.partitioning", "dynamic")
        )
        return [
            Problem(
                field,
                UNCONFIRMED_MODEL,
                f"node {node} {gpu_catalog_unconfirmed.static_refusal(product)}; nothing is "
                "written to the node",
                gpu_catalog_unconfirmed.static_refusal_fix(field, dynamic),
                node,
            )
        ]
    problems: list[Problem] = []
    count = bounds.gpu_count(facts.labels.get(contract.GFD_COUNT))
    for i, entry in enumerate(mig.layout):
        if entry.gpus != "all" and count is not None:
            missing = sorted(g for g in entry.gpus if g >= count)
            if missing:
                problems.append(
                    Problem(
                        f"{spec.mig_field}.layout[{i}].gpus",
                        "GpuIndexOutOfRange",
                        f"node {node} has {count} GPUs (indexes 0-{count - 1}); no GPU {missing}",
                        "list only GPU indexes every node of the pool has, or narrow "
                        "spec.nodeSelector by nvidia.com/gpu.count",
                        node,
                    )
                )
        problems.extend(_layout_fit(node, model, i, dict(entry.profiles), spec.mig_field))
    return problems


def _layout_fit(
    node: str,
    model: gpu_catalog.GpuModel,
    index: int,
    profiles: dict[str, int],
    where: str = "spec.mig",
) -> list[Problem]:
    field = f"{where}.layout[{index}].profiles"
    known = ", ".join(f"{p.name} (max {p.max_count})" for p in model.profiles)
    unknown = sorted(p for p in profiles if model.profile(p) is None)
    if unknown:
        return [
            Problem(
                field,
                "UnknownMigProfile",
                f"{model.nvml_name} on node {node} has no MIG profile {', '.join(unknown)}",
                f"use profiles of this model: {known}; or narrow spec.nodeSelector by "
                f"{contract.GFD_PRODUCT}",
                node,
            )
        ]
    if not mig_place.feasible(mig_place.geometry_of_model(model), profiles):
        wanted = ", ".join(f"{p}x{n}" for p, n in sorted(profiles.items()))
        return [
            Problem(
                field,
                "LayoutDoesNotFit",
                f"{wanted} does not fit one {model.nvml_name} on node {node} "
                f"({model.compute_slices} compute and {model.memory_slices} memory slices)",
                f"use fewer or smaller instances; per profile: {known}",
                node,
            )
        ]
    return []

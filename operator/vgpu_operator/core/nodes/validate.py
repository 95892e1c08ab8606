"""What the apiserver cannot check: every finding names the field and the fix.

- `parse_policy`: a raw VGPUNodePolicy -> `ParsedPolicy` (never raises). A spec the models reject
  (a type the CRD's union node lets through, a spec written before the CRD had a rule) and the
  spec-level rules below make the policy unusable: the condition says Stalled/InvalidSpec.
- `spec_problems`: rules needing no node (static layouts whose GPU selections overlap).
- `node_problems`: the policy against one node's hardware (GFD labels): MIG on a GPU without MIG,
  a static layout the GPU model cannot hold, a GPU index the node does not have, a GPU count
  over what a node may have (`vgpu_operator.bounds`).

What the operator may write to a node (collisions with what users set, the owned record, writes
the apiserver would refuse): `core.nodes.ownership`.

A GPU model is found from `nvidia.com/gpu.product` in `models.gpu_catalog`; a static layout on a
model the catalog does not confirm (a row of `models.gpu_catalog_unconfirmed`, a model in neither
table, a node without the label) is refused for that node, naming what would confirm it; dynamic
MIG on it is not blocked (the agent checks against `nvidia-smi mig -lgip`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from vgpu_operator import bounds, contract
from vgpu_operator.core.mig import place as mig_place
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.models import gpu_catalog, gpu_catalog_unconfirmed
from vgpu_operator.models.policy import VGPUNodePolicy, VGPUNodePolicySpec


@dataclass(frozen=True)
class Problem:
    """A finding: the spec field it is about, a CamelCase reason, what is wrong, how to fix it."""

    field: str
    reason: str
    message: str
    fix: str = ""
    node: str | None = None

    def describe(self) -> str:
        text = f"{self.field}: {self.message} ({self.reason})"
        return f"{text}; fix: {self.fix}" if self.fix else text


# The reason of a policy refused because the device plugin cannot apply a field of it
# (`core.volcano.plugin_refusal`): held as if suspended until the field can take effect.
REFUSED_REASON = "PluginIgnoresNodeValues"


@dataclass(frozen=True)
class ParsedPolicy:
    name: str
    generation: int = 1
    deleting: bool = False
    policy: VGPUNodePolicy | None = None
    problems: tuple[Problem, ...] = ()
    # What the cluster cannot apply (`core.refusals`): the policy is held.
    refused: tuple[Problem, ...] = ()

    @property
    def usable(self) -> bool:
        return self.policy is not None and not self.problems

    @property
    def suspended(self) -> bool:
        """Its nodes are held: `spec.suspend`, or a refused change."""
        return self.policy is not None and (self.policy.spec.suspend or bool(self.refused))

    def refuse_for(self, why: Callable[[VGPUNodePolicy], Sequence[Problem]]) -> ParsedPolicy:
        """This policy with what `why` finds in it added to its refusals; one being deleted, or
        invalid, is never refused (its nodes leave as any deletion's do)."""
        if self.policy is None or self.deleting or self.problems:
            return self
        found = why(self.policy)
        return replace(self, refused=(*self.refused, *found)) if found else self


# ---- spec parsing -----------------------------------------------------------------------------

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_LEADING_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9.]*): ")
_SPEC_FIELD = re.compile(r"\bspec(?:\.[A-Za-z]+)+")


def field_path(loc: Sequence[int | str], prefix: str = "spec") -> str:
    """`('mig', 'layout', 0, 'gpus', "literal['all']")` -> `spec.mig.layout[0].gpus`.

    Union-member tags pydantic adds to a location (`literal[...]`, `list[int]`,
    `function-after[...]`) and the `[key]` marker of a dict key end the path.
    """
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _NAME.match(part):
            path += f".{part}"
        elif "[" in part or "(" in part:
            break
        else:
            path += f"[{part!r}]"
    return path


def _refine(path: str, message: str) -> tuple[str, str]:
    """Model validators name their field in the message: `profiles: ...` (relative to where
    the validator runs), `spec.nodeTaints: ...`, or `spec.mig is ...` for whole-spec rules."""
    leading = _LEADING_FIELD.match(message)
    if leading:
        rel = leading.group(1)
        message = message[leading.end() :]
        if rel.startswith(("spec.", "metadata.")) or not path:
            return rel, message
        first = rel.split(".", 1)[0]
        if path.endswith("." + first):
            return path[: -len(first)] + rel, message
        return f"{path}.{rel}", message
    named = _SPEC_FIELD.search(message) if path == "spec" else None
    return (named.group(0) if named else path), message


def _spec_errors(exc: ValidationError, prefix: str = "spec") -> list[Problem]:
    problems = []
    for err in exc.errors():
        path = field_path(err["loc"], prefix).lstrip(".")
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "value_error":
            path, message = _refine(path, message)
        problems.append(
            Problem(
                field=path,
                reason="InvalidSpec",
                message=message,
                fix=f"correct {path} (kubectl explain vnp.{path})",
            )
        )
    return problems


def parse_policy(raw: Mapping[str, Any]) -> ParsedPolicy:
    """A raw VGPUNodePolicy object (as the API returns it) -> ParsedPolicy."""
    metadata = raw.get("metadata") or {}
    name = str(metadata.get("name", ""))
    generation = int(metadata.get("generation") or 1)
    deleting = bool(metadata.get("deletionTimestamp"))
    try:
        spec = VGPUNodePolicySpec.model_validate(raw.get("spec") or {})
    except ValidationError as exc:
        return ParsedPolicy(name, generation, deleting, None, tuple(_spec_errors(exc)))
    try:
        annotations = metadata.get("annotations") or {}
        policy = VGPUNodePolicy(
            name=name,
            generation=generation,
            uid=str(metadata.get("uid") or ""),
            deleting=deleting,
            evict_gpu_pods=annotations.get(contract.ANN_EVICT_GPU_PODS) != "false",
            spec=spec,
        )
    except ValidationError as exc:  # the rules on the whole object (the name)
        return ParsedPolicy(name, generation, deleting, None, tuple(_spec_errors(exc, "")))
    return ParsedPolicy(name, generation, deleting, policy, tuple(spec_problems(spec)))


def spec_problems(spec: VGPUNodePolicySpec) -> list[Problem]:
    """Rules on the spec alone that the CRD cannot express (CEL cannot read `gpus`)."""
    mig = spec.effective_mig()
    if mig is None or mig.partitioning != "static":
        return []
    problems: list[Problem] = []
    claimed: dict[int | str, int] = {}
    for i, entry in enumerate(mig.layout):
        keys: list[int | str] = ["all"] if entry.gpus == "all" else list(entry.gpus)
        if not keys:
            problems.append(
                Problem(
                    field=f"{spec.mig_field}.layout[{i}].gpus",
                    reason="InvalidSpec",
                    message="an empty GPU list selects no GPU",
                    fix='write gpus: all, or the GPU indexes, e.g. "gpus: [0, 1]"',
                )
            )
        for key in keys:
            clash = [j for k, j in claimed.items() if k == key or "all" in (k, key)]
            if clash:
                problems.append(
                    Problem(
                        field=f"{spec.mig_field}.layout[{i}].gpus",
                        reason="LayoutOverlap",
                        message=f"GPU {key} is already given a layout by "
                        f"{spec.mig_field}.layout[{clash[0]}]",
                        fix="give every GPU at most one layout entry (gpus: all only alone)",
                    )
                )
                break
            claimed[key] = i
    return problems


# ---- the policy against one node's hardware -----------------------------------------------------

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
                f"use {field}: {dynamic} "
                "(served where the node agent's own listing confirms the profiles), or narrow "
                f"spec.nodeSelector by {contract.GFD_PRODUCT} to GPUs the catalog confirms",
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

"""What the apiserver cannot check in a policy's spec: every finding names the field and the fix.

- `parse_policy`: a raw VGPUNodePolicy -> `ParsedPolicy` (never raises). A spec the models reject
  (a type the CRD's union node lets through, a spec written before the CRD had a rule) and the
  spec-level rules below make the policy unusable: the condition says Stalled/InvalidSpec.
- `spec_problems`: rules needing no node (static layouts whose GPU selections overlap).

The policy against one node's hardware (`node_problems`, `gpu_evidence`, `gpu_model`,
`gpu_count_out_of_bounds`): `core.nodes.node_hardware`, its names importable from here too. What
the operator may write to a node (collisions with what users set, the owned record, writes the
apiserver would refuse): `core.nodes.ownership`. A finding: `core.nodes.problem.Problem`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from vgpu_operator import contract
from vgpu_operator.core.nodes.node_hardware import (
    UNCONFIRMED_MODEL,
    gpu_count_out_of_bounds,
    gpu_evidence,
    gpu_model,
    no_gpu_evidence,
    node_problems,
)
from vgpu_operator.core.nodes.problem import Problem
from vgpu_operator.models.policy import VGPUNodePolicy, VGPUNodePolicySpec

__all__ = [
    "REFUSED_REASON",
    "UNCONFIRMED_MODEL",
    "ParsedPolicy",
    "Problem",
    "field_path",
    "gpu_count_out_of_bounds",
    "gpu_evidence",
    "gpu_model",
    "no_gpu_evidence",
    "node_problems",
    "parse_policy",
    "spec_problems",
]

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
    # What the operator has still to read before it can refuse or accept the policy
    # (`core.refusals`): the policy is held until then, a wait and no person's problem.
    waiting: tuple[Problem, ...] = ()

    @property
    def usable(self) -> bool:
        return self.policy is not None and not self.problems

    @property
    def suspended(self) -> bool:
        """Its nodes are held: `spec.suspend`, a refused change, or one still waiting."""
        spec = self.policy.spec if self.policy is not None else None
        return spec is not None and (spec.suspend or bool(self.refused) or bool(self.waiting))

    def refuse_for(self, why: Callable[[VGPUNodePolicy], Sequence[Problem]]) -> ParsedPolicy:
        """This policy with what `why` finds in it added to its refusals; one being deleted, or
        invalid, is never refused (its nodes leave as any deletion's do)."""
        if self.policy is None or self.deleting or self.problems:
            return self
        found = why(self.policy)
        return replace(self, refused=(*self.refused, *found)) if found else self

    def wait_for(self, why: Callable[[VGPUNodePolicy], Sequence[Problem]]) -> ParsedPolicy:
        """This policy with what `why` finds in it added to what it waits for; as `refuse_for`,
        one being deleted, or invalid, never waits."""
        if self.policy is None or self.deleting or self.problems:
            return self
        found = why(self.policy)
        return replace(self, waiting=(*self.waiting, *found)) if found else self


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

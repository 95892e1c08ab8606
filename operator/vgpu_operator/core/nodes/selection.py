"""Which policy owns which node: label selectors, exclusion, priority and conflicts.

Rules:
- a policy selects a node when its `nodeSelector` matches the node's labels (Kubernetes
  semantics: matchLabels and every matchExpression must hold; an empty selector selects all);
- a node labelled `vgpu.volcano.sh/exclude: "true"` is selected by no policy;
- a policy being deleted selects nothing (its nodes are released or go to the next policy);
- a suspended policy still selects (it keeps its nodes; the planner just changes nothing);
- the highest priority wins; two or more policies sharing the highest priority are a conflict:
  the node has no owner and is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.models.policy import LabelSelector, LabelSelectorRequirement, VGPUNodePolicy


def requirement_holds(req: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """One matchExpression, exactly as `metav1.LabelSelectorRequirement` defines it."""
    present = req.key in labels
    if req.operator == "In":
        return present and labels[req.key] in req.values
    if req.operator == "NotIn":
        return not present or labels[req.key] not in req.values
    if req.operator == "Exists":
        return present
    return not present  # DoesNotExist


def matches_selector(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """True when every matchLabels entry and every matchExpression holds (ANDed)."""
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    return all(requirement_holds(r, labels) for r in selector.match_expressions)


def is_excluded(labels: Mapping[str, str]) -> bool:
    return labels.get(contract.LABEL_EXCLUDE) == "true"


def selects(policy: VGPUNodePolicy, labels: Mapping[str, str]) -> bool:
    """Whether `policy` takes part in the choice of an owner for a node with `labels`."""
    if policy.deleting or is_excluded(labels):
        return False
    return matches_selector(policy.spec.node_selector, labels)


@dataclass(frozen=True)
class Assignment:
    """The outcome of selection for one node."""

    node: str
    owner: str | None = None
    # Names of the policies sharing the highest priority when two or more do (sorted).
    conflict: tuple[str, ...] = ()
    # Every policy selecting the node, highest priority first (then by name).
    candidates: tuple[str, ...] = ()
    excluded: bool = False

    @property
    def conflicted(self) -> bool:
        return bool(self.conflict)

    def others_in_conflict(self, policy: str) -> tuple[str, ...]:
        return tuple(p for p in self.conflict if p != policy)

    def outranked(self, policy: str) -> bool:
        """`policy` selects the node but another policy owns it (a higher priority)."""
        return policy in self.candidates and self.owner not in (None, policy)


def assign(node: str, labels: Mapping[str, str], policies: Iterable[VGPUNodePolicy]) -> Assignment:
    """Choose the owner of one node among `policies`."""
    if is_excluded(labels):
        return Assignment(node=node, excluded=True)
    chosen = sorted(
        (p for p in policies if selects(p, labels)),
        key=lambda p: (-p.spec.priority, p.name),
    )
    if not chosen:
        return Assignment(node=node)
    names = tuple(p.name for p in chosen)
    top = [p.name for p in chosen if p.spec.priority == chosen[0].spec.priority]
    if len(top) > 1:
        return Assignment(node=node, conflict=tuple(sorted(top)), candidates=names)
    return Assignment(node=node, owner=chosen[0].name, candidates=names)


def select(nodes: Iterable[NodeFacts], policies: Iterable[VGPUNodePolicy]) -> dict[str, Assignment]:
    """Assignments for every node, by node name."""
    pool = list(policies)
    return {n.name: assign(n.name, n.labels, pool) for n in nodes}


def nodes_of(policy: str, assignments: Mapping[str, Assignment]) -> list[str]:
    """Names of the nodes `policy` owns, sorted."""
    return sorted(name for name, a in assignments.items() if a.owner == policy)

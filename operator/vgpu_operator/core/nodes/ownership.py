"""What the operator may write to a node, checked before it writes: a label or taint is the
operator's only while the value it recorded (`contract.ANN_OWNED`) is still there; a wanted label
or taint that a user set with another value is a collision, never overwritten; an owned record that
does not parse stops every write to the node (one that lists what the operator may not own is
trusted for the rest, `core.nodes.facts.disowned_entries`); a PATCH the
apiserver would refuse (an invalid label or taint) is never sent. Each problem names the field and
the fix (`core.nodes.problem.Problem`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import NodeFacts, TaintKey, taint_value
from vgpu_operator.core.nodes.validate import Problem
from vgpu_operator.models.labels import valid_label_key, valid_label_value
from vgpu_operator.models.policy import Taint


def label_is_ours(facts: NodeFacts, key: str) -> bool:
    """The operator recorded `key` and its value is still the one recorded (or it is gone).

    A value someone else changed is theirs from then on: never overwritten, never removed.
    """
    recorded = facts.owned.labels.get(key)
    return recorded is not None and facts.labels.get(key, recorded) == recorded


def taint_is_ours(facts: NodeFacts, key: TaintKey) -> bool:
    """Same rule for a taint (identified by key and effect, as on a Node)."""
    owned: dict[TaintKey, str] = {(t.key, t.effect): t.value for t in facts.owned.taints}
    recorded = owned.get(key)
    if recorded is None:
        return False
    current = facts.taint_map().get(key)
    return current is None or taint_value(current) == recorded


def label_collisions(facts: NodeFacts, wanted: Mapping[str, str]) -> list[Problem]:
    """Wanted labels the node already has with another value that the operator did not set."""
    problems = []
    for key, value in sorted(wanted.items()):
        current = facts.labels.get(key)
        if current is None or current == value or label_is_ours(facts, key):
            continue
        problems.append(
            Problem(
                f"spec.nodeLabels[{key!r}]",
                "LabelCollision",
                f"node {facts.name} has label {key}={current}, not set by the operator; "
                f"the policy wants {key}={value}",
                f"remove the label from the node (kubectl label node {facts.name} {key}-) or "
                f"drop {key} from spec.nodeLabels",
                facts.name,
            )
        )
    return problems


def taint_collisions(facts: NodeFacts, wanted: Sequence[Taint]) -> list[Problem]:
    """Wanted taints colliding with a taint of the same key and effect the operator did not set."""
    problems = []
    current = facts.taint_map()
    for i, taint in enumerate(wanted):
        key = (taint.key, taint.effect)
        existing = current.get(key)
        if existing is None or taint_value(existing) == taint.value or taint_is_ours(facts, key):
            continue
        problems.append(
            Problem(
                f"spec.nodeTaints[{i}]",
                "TaintCollision",
                f"node {facts.name} has taint {taint.key}={taint_value(existing)}:{taint.effect}, "
                f"not set by the operator; the policy wants "
                f"{taint.key}={taint.value}:{taint.effect}",
                f"remove the taint from the node (kubectl taint node {facts.name} "
                f"{taint.key}:{taint.effect}-) or use another key in spec.nodeTaints",
                facts.name,
            )
        )
    return problems


def disowned(facts: NodeFacts) -> Problem:
    """A notice (it blocks nothing): the record lists what the operator may not act on
    (`core.nodes.facts.disowned_entries`); it is dropped from the record and left on the node."""
    listed = ", ".join(facts.disowned[:5])
    more = f" and {len(facts.disowned) - 5} more" if len(facts.disowned) > 5 else ""
    return Problem(
        "metadata.annotations",
        "OwnedEntriesDisowned",
        f"node {facts.name}: annotation {contract.ANN_OWNED} lists {listed}{more}, which the "
        "operator may not own (Kubernetes' own keys, the node contract's, or invalid ones: an "
        "earlier version's or someone else's entry); it drops them from the record and never "
        "removes or restores them",
        f"if an earlier version of the operator set them, remove them by hand (kubectl label "
        f"node {facts.name} KEY-; kubectl taint node {facts.name} KEY:EFFECT-)",
        facts.name,
    )


def owned_record_unreadable(facts: NodeFacts) -> Problem:
    error = facts.errors.get(contract.ANN_OWNED, "")
    return Problem(
        "metadata.annotations",
        "OwnedRecordUnreadable",
        f"node {facts.name}: annotation {contract.ANN_OWNED} does not parse "
        f"({error}); the operator cannot tell its labels from a user's",
        f"delete it (kubectl annotate node {facts.name} {contract.ANN_OWNED}-): existing labels "
        "and taints are then treated as the user's",
        facts.name,
    )


def invalid_writes(node: str, patch: Mapping[str, Any]) -> list[Problem]:
    """Labels and taints in a node PATCH that the apiserver would refuse (an invalid key or
    value): checked before every write, so a refused write never loops."""
    problems = []
    labels = ((patch.get("metadata") or {}).get("labels")) or {}
    for key, value in sorted(labels.items()):
        if not valid_label_key(key) or (value is not None and not valid_label_value(value)):
            problems.append(
                Problem(
                    f"metadata.labels[{key!r}]",
                    "InvalidLabel",
                    f"node {node}: the operator would write the label {key}={value!r}, which is "
                    "not a valid label (keys [prefix/]name, values at most 63 characters of "
                    "letters, digits, '-', '_' and '.'); nothing is written",
                    "shorten the policy name to 63 characters, or correct the value named",
                    node,
                )
            )
    for taint in ((patch.get("spec") or {}).get("taints")) or []:
        key, value = str(taint.get("key", "")), str(taint.get("value") or "")
        if not valid_label_key(key) or not valid_label_value(value):
            problems.append(
                Problem(
                    "spec.nodeTaints",
                    "InvalidTaint",
                    f"node {node}: the taint {key}={value} would be refused; nothing is written",
                    "correct the taint's key or value",
                    node,
                )
            )
    return problems


def held_by_other_policy(node: str, holder: str, owner: str | None) -> Problem:
    now = f"policy {owner}" if owner else "no policy"
    return Problem(
        "spec.suspend",
        "HeldByOtherPolicy",
        f"node {node} now belongs to {now}, but policy {holder} is suspended or invalid and "
        "keeps it as it is",
        f"resume or fix policy {holder}",
        node,
    )

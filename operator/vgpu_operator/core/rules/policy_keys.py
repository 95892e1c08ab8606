"""A policy asks only for the node label and taint keys the operator config's `policyKeys` lists:
the controller refuses one that asks for another (held, status Stalled `PolicyKeyNotListed`) and
the chart's admission policy refuses the controller's Node writes of such a key. The decision is
`core.nodes.policy_keys.refuse_unlisted`, the controller's own (through `core.refusals`); this
rule shows it in `doctor`, over the policies it reads (`ClusterSnapshot.policies`; none where the
reader hands in none)."""

from __future__ import annotations

from collections.abc import Iterator

from vgpu_operator import contract
from vgpu_operator.core.nodes.policy_keys import refuse_unlisted
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.core.rules.base import Issue, ObjectRef, error, rule
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot


@rule("policy-keys", "Policies ask only for the node label and taint keys policyKeys lists")
def policy_keys(s: ClusterSnapshot) -> Iterator[Issue]:
    # (an invalid policy's status says why; a deleted one only removes: neither is refused)
    for parsed in refuse_unlisted(map(parse_policy, s.policies), s.config.policy_keys):
        ref = ObjectRef(kind=contract.POLICY_KIND, name=parsed.name)
        for problem in parsed.refused:
            yield error(ref, f"{problem.field}: {problem.message}", fix=problem.fix)

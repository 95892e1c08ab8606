"""A policy asks only for the node label and taint keys the operator config's `policyKeys` lists:
the controller refuses one that asks for another (held, status Stalled `PolicyKeyNotListed`) and
the chart's admission policy refuses the controller's Node writes of such a key. The decision is
`core.nodes.policy_keys.unlisted_keys`, the controller's own; this rule shows it in `doctor`,
over the policies it reads (`ClusterSnapshot.policies`; none where the reader hands in none)."""

from __future__ import annotations

from collections.abc import Iterator

from vgpu_operator import contract
from vgpu_operator.core.nodes.policy_keys import unlisted_keys
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.core.rules.base import Issue, ObjectRef, error, rule
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot


@rule("policy-keys", "Policies ask only for the node label and taint keys policyKeys lists")
def policy_keys(s: ClusterSnapshot) -> Iterator[Issue]:
    keys = s.config.policy_keys
    if keys is None:
        return
    for raw in s.policies:
        parsed = parse_policy(raw)
        if parsed.policy is None or parsed.deleting or not parsed.usable:
            continue  # invalid: its status says why; deleted: it only removes
        ref = ObjectRef(kind=contract.POLICY_KIND, name=parsed.name)
        for problem in unlisted_keys(parsed.policy, keys):
            yield error(ref, f"{problem.field}: {problem.message}", fix=problem.fix)

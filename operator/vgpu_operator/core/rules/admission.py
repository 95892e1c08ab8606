"""The chart's admission policies, as `doctor` reads them: there, the chart's (the hash the
operator configuration holds) and denying (`core.admission.verdict`). Only `doctor` reads them
into its snapshot; the running controller checks them itself, with a dry run as its own
identity, and reports on each policy (the AdmissionPoliciesEnforced condition)."""

from __future__ import annotations

from collections.abc import Iterator

from vgpu_operator.core.admission.verdict import RULE_ID, judge
from vgpu_operator.core.rules.base import Issue, issue, rule
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot


@rule(RULE_ID, "the chart's admission policies and bindings are there, the chart's, and deny")
def admission_policies(s: ClusterSnapshot) -> Iterator[Issue]:
    """Each ValidatingAdmissionPolicy and binding the operator configuration names
    (admissionPolicies) exists, carries its hash, fails closed and binds with Deny; while one
    does not, the running controller writes nothing. Read by `doctor` only (with the
    operator's --config); whether the apiserver enforces them is the controller's dry run."""
    if s.admission is None:
        return
    found = judge(s.config, s.admission, None).finding(probed=False)
    if found is not None:
        yield issue(found.severity, found.objects, found.message, fix=found.fix)

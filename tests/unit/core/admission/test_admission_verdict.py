"""The verdict on the chart's admission policies (core.admission.verdict): given the policies
and bindings as read, the hash and names the operator configuration expects, and the outcome
of the dry runs, whether the controller may write, the condition it reports and doctor's
finding; and how an apiserver answer to a dry run is read (core.admission.probes: an admission
refusal told from an RBAC one by its message)."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_operator.core.admission import verdict as ap
from vgpu_operator.core.admission.probes import PROBE_ACCOUNT, ProbeResult, probe_result, probes
from vgpu_operator.core.admission.verdict import Observation, judge
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig

HASH = "a" * 64
OTHER = "b" * 64
NAMES = ["vgpu-operator-objects", "vgpu-operator-workloads", "vgpu-operator-agent-own-node"]


def configured(**extra: Any) -> OperatorConfig:
    return OperatorConfig.model_validate(
        {"admissionPolicies": {"hash": HASH, "names": NAMES}, **extra}
    )


def policy(name: str, *, hash_: str | None = HASH, failure: str | None = "Fail") -> dict[str, Any]:
    annotations = {ap.ANN_HASH: hash_} if hash_ is not None else {}
    spec = {"failurePolicy": failure} if failure else {}
    return {"metadata": {"name": name, "annotations": annotations}, "spec": spec}


def binding(
    name: str, *, hash_: str = HASH, actions: list[str] | None = None, policy_name: str = ""
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": {ap.ANN_HASH: hash_}},
        "spec": {
            "policyName": policy_name or name,
            "validationActions": ["Deny"] if actions is None else actions,
        },
    }


def seen(
    policies: dict[str, dict[str, Any] | None] | None = None,
    bindings: dict[str, dict[str, Any] | None] | None = None,
    unread: dict[str, str] | None = None,
) -> Observation:
    """Every policy and binding as the chart renders them, with these replaced (None: gone)."""
    ps: dict[str, dict[str, Any] | None] = {n: policy(n) for n in NAMES} | (policies or {})
    bs: dict[str, dict[str, Any] | None] = {n: binding(n) for n in NAMES} | (bindings or {})
    return Observation(
        {n: ap.seen_policy(o) if o else None for n, o in ps.items()},
        {n: ap.seen_binding(o) if o else None for n, o in bs.items()},
        unread or {},
    )


def refused_all(config: OperatorConfig) -> list[ProbeResult]:
    message = (
        'pods "vgpu-operator-admission-probe" is forbidden: ValidatingAdmissionPolicy '
        "'vgpu-operator-objects' with binding 'vgpu-operator-objects' denied request: no"
    )
    return [probe_result(p, 403, message, NAMES) for p in probes(config)]


def test_the_charts_policies_bound_with_deny_and_refusing_the_dry_runs_are_enforced() -> None:
    config = configured()
    verdict = judge(config, seen(), refused_all(config))
    assert (verdict.writes, verdict.status, verdict.reason) == (True, "True", "Enforced")
    assert "refused (dry run)" in verdict.message
    assert verdict.finding(probed=True) is None
    # Audit beside Deny still denies
    both = seen(bindings={NAMES[0]: binding(NAMES[0], actions=["Deny", "Audit"])})
    assert judge(config, both, refused_all(config)).writes


@pytest.mark.parametrize(
    ("change", "reason", "names"),
    [
        (seen(bindings={NAMES[0]: None}), "BindingMissing", "ValidatingAdmissionPolicyBinding "),
        (seen(policies={NAMES[1]: None}), "PolicyMissing", "ValidatingAdmissionPolicy "),
        (
            seen(bindings={NAMES[1]: binding(NAMES[1], actions=["Audit"])}),
            "BindingNotDenying",
            "validationActions [Audit], without Deny",
        ),
        (
            seen(bindings={NAMES[2]: binding(NAMES[2], actions=[])}),
            "BindingNotDenying",
            "validationActions [none]",
        ),
        (
            seen(policies={NAMES[0]: policy(NAMES[0], hash_=OTHER)}),
            "NotTheChartsPolicy",
            "bbbbbbbb",
        ),
        (seen(policies={NAMES[0]: policy(NAMES[0], hash_=None)}), "NotTheChartsPolicy", "no vgpu"),
        (
            seen(bindings={NAMES[2]: binding(NAMES[2], hash_=OTHER)}),
            "NotTheChartsPolicy",
            "Binding",
        ),
        (
            seen(policies={NAMES[1]: policy(NAMES[1], failure="Ignore")}),
            "PolicyFailsOpen",
            "failurePolicy Ignore",
        ),
        (
            seen(bindings={NAMES[0]: binding(NAMES[0], policy_name="something-else")}),
            "BindingChanged",
            "binds policy something-else",
        ),
        (seen(unread={NAMES[0]: "403 Forbidden"}), "CannotRead", "cannot read"),
    ],
)
def test_a_missing_changed_or_audit_only_object_stops_the_writes_naming_it_and_the_fix(
    change: Observation, reason: str, names: str
) -> None:
    config = configured()
    verdict = judge(config, change, refused_all(config))  # the dry runs refused: not enough
    assert (verdict.writes, verdict.status, verdict.reason) == (False, "False", reason)
    assert names in verdict.message
    assert "observe mode" in verdict.message
    assert "helm upgrade" in verdict.fix and "requireAdmissionPolicies: false" in verdict.fix
    status, condition_reason, message = verdict.condition()
    assert (status, condition_reason) == ("False", reason)
    assert verdict.fix in message
    finding = verdict.finding(probed=True)
    assert finding is not None and finding.severity == "error" and finding.id == ap.RULE_ID
    assert finding.objects and all(o.name in NAMES for o in finding.objects)


def test_a_deleted_binding_is_named_with_its_kind() -> None:
    verdict = judge(configured(), seen(bindings={NAMES[0]: None}), None)
    assert "ValidatingAdmissionPolicyBinding vgpu-operator-objects is missing" in verdict.message
    assert [str(o) for o in verdict.objects] == [
        "ValidatingAdmissionPolicyBinding vgpu-operator-objects"
    ]


@pytest.mark.parametrize(
    ("status", "message", "reason"),
    [
        (404, 'pods "vgpu-operator-admission-probe" not found', "NotRefused"),
        (200, "", "NotRefused"),
        (
            403,
            'pods "x" is forbidden: User "system:serviceaccount:vgpu-system:vgpu-operator" '
            'cannot create resource "pods/eviction" in API group "" in the namespace '
            '"kube-system"',
            "ProbeForbidden",
        ),
        (503, "the server is currently unable to handle the request", "ProbeFailed"),
        (0, "no answer: ClientConnectorError", "ProbeFailed"),
    ],
)
def test_a_dry_run_that_is_not_refused_by_admission_stops_the_writes(
    status: int, message: str, reason: str
) -> None:
    config = configured()
    [eviction, daemonset] = probes(config)
    results = [probe_result(eviction, status, message, NAMES), *refused_all(config)[1:]]
    verdict = judge(config, seen(), results)
    assert (verdict.writes, verdict.reason) == (False, reason)
    assert "evict pod kube-system/vgpu-operator-admission-probe" in verdict.message
    assert daemonset.what not in verdict.message


def test_a_plugin_daemonset_that_is_not_there_proves_nothing_either_way() -> None:
    config = configured()
    [_eviction, daemonset] = probes(config)
    refused = refused_all(config)[0]
    absent = probe_result(
        daemonset, 404, 'daemonsets.apps "volcano-device-plugin" not found', NAMES
    )
    assert absent.outcome == "absent"
    assert judge(config, seen(), [refused, absent]).writes


def test_read_problems_come_before_the_dry_runs() -> None:
    config = configured()
    admitted = [probe_result(p, 200, "", NAMES) for p in probes(config)]
    verdict = judge(config, seen(bindings={NAMES[0]: None}), admitted)
    assert verdict.reason == "BindingMissing"
    assert "dry run" not in verdict.message


def test_an_admission_refusal_is_told_from_an_rbac_refusal_by_the_message() -> None:
    [eviction, daemonset] = probes(configured())
    vap = (
        "ValidatingAdmissionPolicy 'vgpu-operator-workloads' with binding "
        "'vgpu-operator-workloads' denied request: vgpu-operator may change only ..."
    )
    assert probe_result(
        daemonset, 403, f'daemonsets.apps "p" is forbidden: {vap}', NAMES
    ).outcome == ("refused")
    # a validation whose reason is Invalid answers 422, with the same message
    assert probe_result(daemonset, 422, vap, NAMES).outcome == "refused"
    # another release's policy, or any other admission check, proves nothing about ours
    other = vap.replace("vgpu-operator-workloads", "someone-elses")
    assert probe_result(daemonset, 403, other, NAMES).outcome == "failed"
    assert probe_result(daemonset, 403, 'cannot patch resource "daemonsets"', NAMES).outcome == (
        "forbidden"
    )
    # a 404: the eviction's pod is looked up after admission, the DaemonSet before
    assert probe_result(eviction, 404, "not found", NAMES).outcome == "admitted"
    assert probe_result(daemonset, 404, "not found", NAMES).outcome == "absent"


def test_the_dry_runs_are_an_eviction_in_kube_system_and_a_plugin_serviceaccount_change() -> None:
    [eviction, daemonset] = probes(configured())
    assert (eviction.method, eviction.path) == (
        "POST",
        "/api/v1/namespaces/kube-system/pods/vgpu-operator-admission-probe/eviction",
    )
    assert eviction.body["deleteOptions"] == {"dryRun": ["All"]}
    assert (daemonset.method, daemonset.path) == (
        "PATCH",
        "/apis/apps/v1/namespaces/kube-system/daemonsets/volcano-device-plugin",
    )
    assert daemonset.body == {"spec": {"template": {"spec": {"serviceAccountName": PROBE_ACCOUNT}}}}
    auto = configured(devicePlugin={"namespace": "auto", "name": "auto"})
    assert [p.method for p in probes(auto)] == ["POST"]  # nothing to name: the eviction only


def test_false_is_the_way_out_and_a_config_the_chart_did_not_render_checks_nothing() -> None:
    off = judge(configured(requireAdmissionPolicies=False), seen(bindings={NAMES[0]: None}), None)
    assert (off.writes, off.status, off.reason) == (True, "Unknown", "NotRequired")
    assert "requireAdmissionPolicies is false" in off.message
    finding = off.finding(probed=True)
    assert finding is not None and finding.severity == "info"
    bare = judge(OperatorConfig(), None, None)
    assert (bare.writes, bare.status, bare.reason) == (True, "Unknown", "NotConfigured")
    # configured but not read yet: no writes (the controller fails closed)
    waiting = judge(configured(), None, None)
    assert (waiting.writes, waiting.reason) == (False, "NotChecked")


def test_doctor_judges_without_the_dry_run_and_says_it_is_the_controllers() -> None:
    config = configured()
    good = run_rules(ClusterSnapshot(config=config, admission=seen()), only=[ap.RULE_ID])
    assert good.findings == []
    audit = seen(bindings={NAMES[1]: binding(NAMES[1], actions=["Audit", "Warn"])})
    [finding] = run_rules(
        ClusterSnapshot(config=config, admission=audit), only=[ap.RULE_ID]
    ).findings
    assert finding.severity == "error"
    assert "validationActions [Audit, Warn]" in finding.message
    assert "dry-run request they must refuse, as its own identity" in finding.message
    # nothing read (the controller's own configuration passes): the rule says nothing
    assert run_rules(ClusterSnapshot(config=config), only=[ap.RULE_ID]).findings == []

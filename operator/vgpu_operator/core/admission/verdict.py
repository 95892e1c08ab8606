"""Whether the chart's admission policies still confine the operator: the pure verdict.

The chart narrows the controller's RBAC rights with ValidatingAdmissionPolicies and their
bindings (charts/vgpu-operator/templates/admission-policies.yaml). It writes one hash of that
rendering into each of them (the annotation `ANN_HASH`) and into the operator configuration
(`admissionPolicies: {hash, names}`, models.config_admission). Anyone with the rights may delete
them or switch a binding to `[Audit]`, and the apiserver says nothing; so the controller checks,
before it writes and while it runs (controller.admission_guard):

- each policy and binding named in the configuration is there and carries the configuration's
  hash (it is the chart's rendering, not an older or a hand-made one), each policy fails closed
  (`failurePolicy: Fail`) and each binding binds its policy with `validationActions` holding
  `Deny`;
- a request the policies must refuse, sent as the controller's own identity as a server-side
  dry run (`dryRun=All`), is refused by one of them (`core.admission.probes`): what the
  apiserver enforces, not only what is stored.

Otherwise the verdict says what is wrong and the fix, and the controller runs as in observe mode
until it is put right. `requireAdmissionPolicies: false` is the only way out (`NotRequired`); a
configuration the chart did not render names no policies, and nothing is checked
(`NotConfigured`). `doctor` judges the same objects without the dry run (it is the running
controller's, with the controller's identity): `Verdict.finding`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_operator.core.admission.probes import ProbeResult
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.findings import Finding, ObjectRef, Severity

CONDITION = "AdmissionPoliciesEnforced"
ANN_HASH = "vgpu.volcano.sh/admission-policies-hash"
RULE_ID = "admission-policies"
POLICY_KIND = "ValidatingAdmissionPolicy"
BINDING_KIND = "ValidatingAdmissionPolicyBinding"
API = "/apis/admissionregistration.k8s.io/v1"
POLICIES_PATH = f"{API}/validatingadmissionpolicies"
BINDINGS_PATH = f"{API}/validatingadmissionpolicybindings"

FIX = (
    "restore them from the chart: `helm upgrade` the release with its values (it renders the "
    "policies and their bindings with validationActions [Deny]); to let the operator write "
    "without them, set config.requireAdmissionPolicies: false"
)
OBSERVING = (
    "the operator runs as in observe mode (it writes nothing but its policies' status and "
    "Events) until they are back"
)


# -- what is read -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SeenPolicy:
    name: str
    hash: str  # the annotation's value; "" without one
    failure_policy: str


@dataclass(frozen=True)
class SeenBinding:
    name: str
    hash: str
    policy_name: str
    actions: tuple[str, ...]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _hash(obj: Mapping[str, Any]) -> str:
    return str((_meta(obj).get("annotations") or {}).get(ANN_HASH, ""))


def seen_policy(obj: Mapping[str, Any]) -> SeenPolicy:
    """What the check keeps of a ValidatingAdmissionPolicy (the apiserver defaults
    `failurePolicy` to Fail)."""
    spec = obj.get("spec") or {}
    return SeenPolicy(
        str(_meta(obj).get("name", "")), _hash(obj), str(spec.get("failurePolicy") or "Fail")
    )


def seen_binding(obj: Mapping[str, Any]) -> SeenBinding:
    spec = obj.get("spec") or {}
    actions = tuple(str(a) for a in spec.get("validationActions") or ())
    return SeenBinding(
        str(_meta(obj).get("name", "")), _hash(obj), str(spec.get("policyName", "")), actions
    )


@dataclass(frozen=True)
class Observation:
    """The policies and bindings as read, by name (None: not there); `unread`: names whose
    policy or binding could not be read (the reason, e.g. the apiserver's answer)."""

    policies: Mapping[str, SeenPolicy | None]
    bindings: Mapping[str, SeenBinding | None]
    unread: Mapping[str, str] = field(default_factory=dict)


# -- the verdict ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    reason: str
    kind: str
    name: str
    text: str


@dataclass(frozen=True)
class Verdict:
    """`writes`: the controller may write as its mode says (False: as in observe mode).
    `status`, `reason`, `message`: the condition `AdmissionPoliciesEnforced`."""

    writes: bool
    status: str  # "True", "False", "Unknown"
    reason: str
    message: str
    fix: str = ""
    objects: tuple[ObjectRef, ...] = ()

    @property
    def enforced(self) -> bool:
        return self.status == "True"

    def condition(self) -> tuple[str, str, str]:
        message = self.message + (f"; fix: {self.fix}" if self.fix else "")
        return (self.status, self.reason, message)

    def finding(self, *, probed: bool) -> Finding | None:
        """What `doctor` reports: an error while the controller would not write, a note while
        nothing is checked, nothing while they are enforced. `probed`: the verdict includes
        the dry run (doctor's does not: it is the running controller's)."""
        if self.enforced:
            return None
        message = self.message
        if not probed and not self.writes:
            message += (
                " (doctor reads the policies and bindings; the running controller also sends "
                "a dry-run request they must refuse, as its own identity: its "
                f"{CONDITION} condition on each policy)"
            )
        severity: Severity = "info" if self.writes else "error"
        fix = self.fix or "nothing to do"
        return Finding(
            id=RULE_ID, severity=severity, objects=self.objects, message=message, fix=fix
        )


def judge(
    config: OperatorConfig,
    seen: Observation | None,
    results: Sequence[ProbeResult] | None,
) -> Verdict:
    """The verdict on the policies `config` names, as `seen`, and on the dry runs' `results`
    (None: not sent, as in `doctor`; `seen` None: not read)."""
    expected = config.admission_policies
    if not config.require_admission_policies:
        return Verdict(
            True,
            "Unknown",
            "NotRequired",
            "requireAdmissionPolicies is false in the operator configuration: the operator "
            "writes without checking its admission policies (its RBAC rights alone confine it)",
            "set config.requireAdmissionPolicies: true (the chart's default) to require them",
        )
    if expected is None:
        return Verdict(
            True,
            "Unknown",
            "NotConfigured",
            "the operator configuration names no admission policies (admissionPolicies, which "
            "the Helm chart renders): nothing checks that any confine the operator",
            "install with the chart; or say so with config.requireAdmissionPolicies: false",
        )
    if seen is None:
        return Verdict(
            False, "Unknown", "NotChecked", f"the admission policies are not read yet: {OBSERVING}"
        )
    problems = _read_problems(expected.hash, expected.names, seen)
    if not problems and results is not None:
        problems = _probe_problems(results)
    if not problems:
        tried = "; requests they must refuse are refused (dry run)" if results is not None else ""
        listed = ", ".join(expected.names)
        return Verdict(
            True,
            "True",
            "Enforced",
            f"the admission policies {listed} and their bindings are the chart's "
            f"(hash {expected.hash[:12]}) and deny{tried}",
        )
    fix = (
        "grant the controller the chart's rights again (`helm upgrade` the release); " + FIX
        if problems[0].reason in ("CannotRead", "ProbeForbidden")
        else FIX
    )
    return Verdict(
        False,
        "False",
        problems[0].reason,
        "; ".join(p.text for p in problems) + f": {OBSERVING}",
        fix,
        tuple(dict.fromkeys(ObjectRef(kind=p.kind, name=p.name) for p in problems if p.name)),
    )


def _read_problems(hash_: str, names: Sequence[str], seen: Observation) -> list[Problem]:
    out: list[Problem] = []
    for name in names:
        if name in seen.unread:
            out.append(
                Problem(
                    "CannotRead",
                    POLICY_KIND,
                    name,
                    f"cannot read {POLICY_KIND} {name} or its binding: {seen.unread[name]}",
                )
            )
            continue
        policy, binding = seen.policies.get(name), seen.bindings.get(name)
        if policy is None:
            out.append(
                Problem("PolicyMissing", POLICY_KIND, name, f"{POLICY_KIND} {name} is missing")
            )
        else:
            if policy.hash != hash_:
                out.append(_changed(POLICY_KIND, name, policy.hash, hash_))
            if policy.failure_policy != "Fail":
                out.append(
                    Problem(
                        "PolicyFailsOpen",
                        POLICY_KIND,
                        name,
                        f"{POLICY_KIND} {name} has failurePolicy {policy.failure_policy}, not "
                        "Fail (a request its rules cannot evaluate would pass)",
                    )
                )
        if binding is None:
            out.append(
                Problem("BindingMissing", BINDING_KIND, name, f"{BINDING_KIND} {name} is missing")
            )
            continue
        if binding.hash != hash_:
            out.append(_changed(BINDING_KIND, name, binding.hash, hash_))
        if binding.policy_name != name:
            out.append(
                Problem(
                    "BindingChanged",
                    BINDING_KIND,
                    name,
                    f"{BINDING_KIND} {name} binds policy {binding.policy_name or '(none)'}, "
                    f"not {name}",
                )
            )
        if "Deny" not in binding.actions:
            actions = ", ".join(binding.actions) or "none"
            out.append(
                Problem(
                    "BindingNotDenying",
                    BINDING_KIND,
                    name,
                    f"{BINDING_KIND} {name} has validationActions [{actions}], without Deny "
                    "(the apiserver does not refuse what the policy rejects)",
                )
            )
    return out


def _changed(kind: str, name: str, found: str, expected: str) -> Problem:
    carries = f"carries hash {found[:12]}" if found else f"carries no {ANN_HASH} annotation"
    return Problem(
        "NotTheChartsPolicy",
        kind,
        name,
        f"{kind} {name} {carries}, the operator configuration expects {expected[:12]} (not "
        "the rendering of the chart the operator was installed with)",
    )


def _probe_problems(results: Sequence[ProbeResult]) -> list[Problem]:
    out: list[Problem] = []
    for r in results:
        if r.outcome in ("refused", "absent"):
            continue
        reason, text = {
            "admitted": ("NotRefused", "was not refused"),
            "forbidden": ("ProbeForbidden", "was refused by RBAC, not by admission"),
            "failed": ("ProbeFailed", "got no usable answer"),
        }[r.outcome]
        out.append(Problem(reason, "", "", f"the dry run '{r.probe.what}' {text} ({r.detail})"))
    return out

"""Findings and the rule registry: a rule is one function `ClusterSnapshot -> Iterable[Issue]`
registered with `@rule(id, title)`; adding a rule is adding one such function. Rules yield
`error(...)`, `warning(...)` and `info(...)` without an id: `run_rules` turns each into a
`Finding` carrying the id the rule was registered under."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeAlias

from vgpu_operator.core.volcano.snapshot import ClusterSnapshot

# The finding's shape lives with the models so that wings below this one (core.dra) report the
# same type; the names stay importable from here.
from vgpu_operator.models.findings import SEVERITY_ORDER as SEVERITY_ORDER
from vgpu_operator.models.findings import Finding as Finding
from vgpu_operator.models.findings import ObjectRef as ObjectRef
from vgpu_operator.models.findings import Severity as Severity


@dataclass(frozen=True)
class Issue:
    """A finding as a rule reports it: everything but the id, which `run_rules` fills in."""

    severity: Severity
    objects: tuple[ObjectRef, ...]
    message: str
    fix: str
    fixable_by_operator: bool = False

    def finding(self, rule_id: str) -> Finding:
        return Finding(
            id=rule_id,
            severity=self.severity,
            objects=self.objects,
            message=self.message,
            fix=self.fix,
            fixable_by_operator=self.fixable_by_operator,
        )


Objects: TypeAlias = ObjectRef | Iterable[ObjectRef]


def issue(
    severity: Severity, objects: Objects, message: str, *, fix: str, fixable: bool = False
) -> Issue:
    """An issue about one object or several; `fixable`: `enforce` mode fixes it."""
    objs = (objects,) if isinstance(objects, ObjectRef) else tuple(objects)
    return Issue(severity, objs, message, fix, fixable)


def error(objects: Objects, message: str, *, fix: str, fixable: bool = False) -> Issue:
    return issue("error", objects, message, fix=fix, fixable=fixable)


def warning(objects: Objects, message: str, *, fix: str, fixable: bool = False) -> Issue:
    return issue("warning", objects, message, fix=fix, fixable=fixable)


def info(objects: Objects, message: str, *, fix: str, fixable: bool = False) -> Issue:
    return issue("info", objects, message, fix=fix, fixable=fixable)


Check = Callable[[ClusterSnapshot], Iterable[Issue]]


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    check: Check


RULES: dict[str, Rule] = {}


def rule(rule_id: str, title: str) -> Callable[[Check], Check]:
    """Register a rule. Ids are stable: they appear in events, metrics and `doctor` output."""

    def register(check: Check) -> Check:
        if rule_id in RULES:
            raise ValueError(f"rule {rule_id!r} registered twice")
        RULES[rule_id] = Rule(rule_id, title, check)
        return check

    return register


def cm_ref(namespace: str, name: str) -> ObjectRef:
    return ObjectRef(kind="ConfigMap", name=name, namespace=namespace)


@dataclass(frozen=True)
class RuleResults:
    rules: list[Rule]
    findings: list[Finding] = field(default_factory=list)

    def for_rule(self, rule_id: str) -> list[Finding]:
        return [f for f in self.findings if f.id == rule_id]

    def status(self, rule_id: str) -> str:
        found = self.for_rule(rule_id)
        if not found:
            return "ok"
        return min((f.severity for f in found), key=lambda s: SEVERITY_ORDER[s])

    @property
    def worst(self) -> str:
        if not self.findings:
            return "ok"
        return min((f.severity for f in self.findings), key=lambda s: SEVERITY_ORDER[s])


def run_rules(snapshot: ClusterSnapshot, only: Iterable[str] | None = None) -> RuleResults:
    """Run every registered rule (or those named). A rule that trips over malformed cluster
    data reports that as an error finding instead of hiding the other rules' results."""
    wanted = set(only) if only is not None else None
    ran: list[Rule] = []
    findings: list[Finding] = []
    for r in RULES.values():
        if wanted is not None and r.id not in wanted:
            continue
        ran.append(r)
        try:
            issues = list(r.check(snapshot))  # all or nothing: a rule that fails reports only that
        except Exception as exc:
            issues = [
                error(
                    (),
                    f"the rule could not be evaluated: {type(exc).__name__}: {exc}",
                    fix="report this as a bug in vgpu-operator, with the objects involved",
                )
            ]
        findings.extend(i.finding(r.id) for i in issues)
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.id, [str(o) for o in f.objects]))
    return RuleResults(rules=ran, findings=findings)

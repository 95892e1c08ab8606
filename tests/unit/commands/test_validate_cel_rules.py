"""`vgpu-operator validate` against the bad-spec catalogue and the CRD's CEL rules.

Every CEL rule (`x-kubernetes-validations`) of the generated CRD has a case that `validate`
refuses with that very rule (its expression, its field, its message), so a new rule without
an offline counterpart, or without a case, fails here. Every case the apiserver refuses is
refused by `validate` as the apiserver's, naming the field; every case the apiserver takes
and the operator stalls without looking at a node is `validate`'s operator finding; the
node-level cases need a node, so `validate` passes them. (The lead's cluster test
test_validate_matches_apiserver.py holds the same cases against a server-side dry-run.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.kit.invalid_documents import INVALID_DOCUMENTS, InvalidDocument
from tests.kit.invalid_specs import INVALID_SPECS, InvalidSpec
from tests.kit.openapi_check import cel_rules, generic
from vgpu_operator import contract
from vgpu_operator.commands.validate import Document, validate_text
from vgpu_operator.commands.validate_spec import Problem, policy_schema

CRD_RULES = [(path.lstrip("."), rule) for path, rule in cel_rules(policy_schema())]


def as_document(case: InvalidSpec) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": case.name},
        "spec": case.spec,
    }


def validated(document: dict[str, Any]) -> Document:
    (doc,) = validate_text(json.dumps(document), "case.json")
    return doc


def names_field(found: str, expected: str) -> bool:
    """Equal, or one path is the other plus a deeper `.x` / `[i]` part."""
    longer, shorter = sorted((found, expected), key=len, reverse=True)
    return longer == shorter or (longer.startswith(shorter) and longer[len(shorter)] in ".[")


ALL_PROBLEMS: list[Problem] = [
    *(p for c in INVALID_SPECS for p in validated(as_document(c)).problems),
    *(p for d in INVALID_DOCUMENTS for p in validated(d.document).problems),
]


def test_the_crd_has_cel_rules_to_check() -> None:
    assert len(CRD_RULES) >= 15
    assert any(path == "metadata.name" for path, _ in CRD_RULES)


@pytest.mark.parametrize(
    ("path", "rule"), CRD_RULES, ids=[f"{p}:{r['message'][:30]}" for p, r in CRD_RULES]
)
def test_every_cel_rule_has_a_case_validate_refuses_with_it(
    path: str, rule: dict[str, str]
) -> None:
    hits = [p for p in ALL_PROBLEMS if p.rule == rule["rule"]]
    assert hits, f"no case in tests/kit/invalid_specs.py makes validate apply {rule['rule']!r}"
    assert any(
        generic(p.field) == path and p.message == rule["message"] and p.refused_by == "apiserver"
        for p in hits
    ), [(p.field, p.message) for p in hits]


@pytest.mark.parametrize("case", [c for c in INVALID_SPECS if c.by_apiserver], ids=lambda c: c.name)
def test_validate_refuses_what_the_apiserver_refuses(case: InvalidSpec) -> None:
    doc = validated(as_document(case))
    assert doc.result == "invalid" and doc.refused_by == "apiserver", doc.problems
    fields = [p.field for p in doc.problems if p.refused_by == "apiserver"]
    assert any(names_field(f, case.field) for f in fields), (fields, case.field)
    for problem in doc.problems:
        assert problem.fix, problem
    if case.caught_by == "cel":
        assert any(p.rule and case.message in p.message for p in doc.problems), doc.problems


@pytest.mark.parametrize("case", INVALID_DOCUMENTS, ids=lambda c: c.name)
def test_validate_refuses_the_objects_the_apiserver_refuses(case: InvalidDocument) -> None:
    doc = validated(case.document)
    assert doc.refused_by == "apiserver", doc.problems
    hits = [p for p in doc.problems if names_field(p.field, case.field)]
    assert hits, ([p.field for p in doc.problems], case.field)
    assert any(case.message in p.message for p in hits), hits


@pytest.mark.parametrize(
    "case",
    [c for c in INVALID_SPECS if c.caught_by == "operator" and c.node is None],
    ids=lambda c: c.name,
)
def test_what_the_operator_stalls_is_validates_operator_finding(case: InvalidSpec) -> None:
    doc = validated(as_document(case))
    assert doc.result == "invalid" and doc.refused_by == "operator", doc.problems
    assert [p.field for p in doc.problems][:1] == [case.field]
    assert all(p.refused_by == "operator" and p.fix for p in doc.problems)


@pytest.mark.parametrize(
    "case", [c for c in INVALID_SPECS if c.node is not None], ids=lambda c: c.name
)
def test_node_level_cases_pass_offline(case: InvalidSpec) -> None:
    assert validated(as_document(case)).result == "valid"

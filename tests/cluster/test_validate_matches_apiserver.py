"""`vgpu-operator validate` (offline) and the real apiserver give every case the same verdict.

The cases: every bad spec of tests/kit/invalid_specs.py (refused by the CRD's schema or a CEL
rule, or taken by the apiserver and stalled by the operator), every invalid object of
tests/kit/invalid_documents.py (its name, its own fields) and the examples' policies (valid).
They go through `validate -o json` (one multi-document file, as a process) and, one by one,
through a server-side dry-run POST (`?dryRun=All`, nothing stored) with field validation
Strict, kubectl's default. Per case, `validate` says "refused by the apiserver" exactly when
the dry-run is refused (422, or 400 for an unknown field under Strict), and a refusal names the
case's field on both sides."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import unique
from tests.kit.invalid_documents import INVALID_DOCUMENTS
from tests.kit.invalid_specs import INVALID_SPECS
from vgpu_operator import contract, kubeapi
from vgpu_operator.kubeapi import policy_path, request

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    name: str
    document: dict[str, Any]
    field: str  # what a refusal names
    by_apiserver: bool  # what the catalogue says the apiserver does (the operator's cases: no)


def _policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


def _examples() -> list[Case]:
    files = sorted([*REPO.glob("examples/*/policy.yaml"), *REPO.glob("examples/*/policies.yaml")])
    out = []
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == contract.POLICY_KIND:
                name = doc["metadata"]["name"]
                renamed = {**doc, "metadata": {**doc["metadata"], "name": unique(name)}}
                out.append(Case(f"example-{name}", renamed, "", False))
    return out


CASES: list[Case] = [
    *(
        Case(c.name, _policy(unique(c.name)[:60], c.spec), c.field, c.by_apiserver)
        for c in INVALID_SPECS
    ),
    *(Case(d.name, d.document, d.field, True) for d in INVALID_DOCUMENTS),
    *_examples(),
]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """`validate`'s document for each case, from one run over one file of them all."""
    path = tmp_path_factory.mktemp("validate") / "cases.yaml"
    path.write_text(yaml.safe_dump_all([c.document for c in CASES], sort_keys=False))
    command = ["vgpu_operator.commands.cli", "validate", "-f", str(path), "-o", "json"]
    proc = subprocess.run(
        [sys.executable, "-m", *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr  # the invalid cases are findings
    documents = json.loads(proc.stdout)["documents"]
    assert len(documents) == len(CASES)
    return {c.name: d for c, d in zip(CASES, documents, strict=True)}


def test_the_cases_cover_both_verdicts() -> None:
    assert len({c.name for c in CASES}) == len(CASES)
    assert sum(c.by_apiserver for c in CASES) >= 30
    assert sum(not c.by_apiserver for c in CASES) >= 15
    assert sum(c.name.startswith("example-") for c in CASES) >= 5


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_validate_and_a_dry_run_agree(
    api: client.ApiClient,
    installed: object,
    verdicts: dict[str, dict[str, Any]],
    case: Case,
) -> None:
    offline = verdicts[case.name]
    try:
        await request(
            api,
            "POST",
            policy_path(),
            body=case.document,
            query={"dryRun": "All", "fieldValidation": "Strict"},
            field_manager=None,
        )
    except kubeapi.Invalid as exc:  # 422, and 400 for a strict decoding error
        refused, said = True, str(exc.body)
    else:
        refused, said = False, ""
    problems = [(p["field"], p["refusedBy"], p["message"]) for p in offline["problems"]]
    assert (offline["refusedBy"] == "apiserver") == refused, (problems, said)
    if refused:
        fields = [p["field"] for p in offline["problems"] if p["refusedBy"] == "apiserver"]
        assert case.field in said, said
        assert any(f.startswith(case.field) or case.field.startswith(f) for f in fields), (
            fields,
            case.field,
        )

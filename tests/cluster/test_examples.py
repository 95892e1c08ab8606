"""Every example is accepted by the real apiserver (schema + CEL) and by the operator's models."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client

from vgpu_operator import contract
from vgpu_operator.core.validate import parse_policy
from vgpu_operator.kubeapi import policy_path, request

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = sorted(EXAMPLES.glob("*/*.yaml"))


def test_every_scenario_folder_has_policies() -> None:
    folders = {f.parent.name for f in FILES}
    assert len(folders) >= 6, folders


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
async def test_example_is_accepted(api: client.ApiClient, installed: object, path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    policies = [d for d in docs if d.get("kind") == contract.POLICY_KIND]
    assert policies, f"{path} has no VGPUNodePolicy"
    for doc in policies:
        parsed = parse_policy(doc)
        assert parsed.usable, parsed.problems
        stored = await request(
            api,
            "POST",
            policy_path(),
            body=doc,
            query={"dryRun": "All", "fieldValidation": "Strict"},
            field_manager=None,
        )
        assert stored["spec"]["mode"] == doc["spec"]["mode"]

"""Invalid policies against the real apiserver: the schema and CEL rules reject what they can
with a 422 naming the field; the operator reports the rest on the policy's status, naming the
field, and writes nothing to the node concerned (no half-applied state)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, PolicyFactory, eventually, unique
from tests.kit.invalid_specs import INVALID_SPECS, InvalidSpec
from vgpu_devcluster import binaries
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_devcluster.nodes import NodeSpec, create_gpu_nodes
from vgpu_operator import contract
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi import ApiError, NotFound, node_path, policy_path, request

BY_APISERVER = [s for s in INVALID_SPECS if s.by_apiserver]
BY_OPERATOR = [s for s in INVALID_SPECS if not s.by_apiserver]


def body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


def test_the_catalogue_meets_the_must_show() -> None:
    assert len(INVALID_SPECS) >= 10
    assert sum(s.caught_by == "cel" for s in INVALID_SPECS) >= 3
    assert len(BY_OPERATOR) >= 2


@pytest.mark.parametrize("case", BY_APISERVER, ids=lambda c: c.name)
async def test_apiserver_rejects_with_the_field(
    api: client.ApiClient, installed: object, case: InvalidSpec
) -> None:
    with pytest.raises(ApiError) as err:
        await request(
            api,
            "POST",
            policy_path(),
            body=body(unique(case.name)[:60], case.spec),
            query={"fieldValidation": "Strict"},
            field_manager=None,
        )
    # Schema and CEL violations are 422 Invalid; with fieldValidation=Strict an unknown field is
    # refused while decoding, before validation: 400 BadRequest (observed on 1.35.4).
    assert err.value.status == (400 if case.strict else 422), err.value.body
    text = err.value.body
    assert case.field in text, text
    if case.message:
        assert case.message in text, text


@pytest.mark.parametrize("case", BY_OPERATOR, ids=lambda c: c.name)
async def test_operator_reports_with_the_field_and_writes_nothing(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    operator: OperatorThread,
    case: InvalidSpec,
) -> None:
    local = cluster.require_audit()
    offset = local.audit_offset()
    node_name: str | None = None
    if case.node is not None:
        spec = NodeSpec(**{**case.node, "labels": dict(case.node["labels"])})
        await create_gpu_nodes(api, [spec])
        node_name = spec.name
    name = unique(case.name)[:60]
    await request(api, "POST", policy_path(), body=body(name, case.spec), field_manager=None)
    try:

        async def reported() -> bool:
            status = (await request(api, "GET", policy_path(name))).get("status") or {}
            text = json.dumps(status)
            return (
                status.get("observedGeneration") == 1
                and case.field in text
                and (not case.reason or case.reason in text)
                and (not case.message or case.message in text)
            )

        try:
            await eventually(reported, timeout=20)
        except AssertionError:
            seen = await request(api, "GET", policy_path(name))
            raise AssertionError(f"not reported as expected: {json.dumps(seen)}") from None
        status = (await request(api, "GET", policy_path(name)))["status"]
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False"
        if node_name is not None:
            problems = {(p["node"], p["reason"]) for p in status.get("problemNodes", [])}
            assert (node_name, case.reason) in problems
            writes = [
                e
                for e in local.audit_events(user=OPERATOR_USER, offset=offset)
                if e["objectRef"]["resource"] == "nodes" and e["objectRef"].get("name") == node_name
            ]
            assert writes == [], "the operator half-applied a policy it reported as invalid"
            labels = (await request(api, "GET", node_path(node_name)))["metadata"]["labels"]
            assert contract.LABEL_POLICY not in labels
    finally:
        await request(api, "DELETE", policy_path(name), field_manager=None)
        if node_name is not None:
            with contextlib.suppress(NotFound):
                await request(api, "DELETE", node_path(node_name), field_manager=None)


async def test_kubectl_get_vnp_shows_the_printer_columns(
    api: client.ApiClient, kubeconfig: Path, installed: object, policies: PolicyFactory
) -> None:
    name = await policies(
        "cols", {"mode": "hami-core", "nodeSelector": {"matchLabels": {"x": "y"}}}
    )
    kubectl = binaries.ensure("kubectl")
    out = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", "get", "vnp", name],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    header, row = out.splitlines()[:2]
    for column in ("NAME", "MODE", "MATCHED", "READY", "AGE"):
        assert column in header.split(), header
    assert row.split()[0] == name
    assert "hami-core" in row.split()
    # The category and short name work too.
    got = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", "get", "vgpu", "-o", "name"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"vgpunodepolicy.vgpu.volcano.sh/{name}" in got

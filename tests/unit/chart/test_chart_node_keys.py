"""config.policyKeys, one chart value rendered twice: into the operator configuration (the
ConfigMap the controller loads) and into the controller's admission policy (_nodekeys.tpl), whose
always-allowed keys are the Python's (`core.nodes.policy_keys`); the chart refuses to render
without it; and its default refuses none of the policies the project ships (examples/, the
modes' defaults)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from vgpu_devcluster import binaries
from vgpu_devcluster.install import OPERATOR_ADMISSION_POLICY, chart_dir, render_chart
from vgpu_operator import contract
from vgpu_operator.core.nodes.policy_keys import (
    GPU_OPERATOR_SWITCHES,
    OPERATOR_NODE_ANNOTATIONS,
    OPERATOR_NODE_LABELS,
    unlisted_keys,
)
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.models.config import load_config
from vgpu_operator.models.policy_keys import PolicyKeys

Doc = dict[str, Any]
LABELS = re.compile(r"\(k in (\[[^\]]*\]) \|\| (\[[^\]]*\])\.exists\(p, k\.startsWith\(p\)\)\)")
TAINTS = re.compile(
    r"\(t\.key in (\[[^\]]*\]) \|\| (\[[^\]]*\])\.exists\(p, t\.key\.startsWith\(p\)\)\)"
)
ANNOTATIONS = re.compile(r"\|\| k in (\[[^\]]*\])\)")


def node_rules(values: dict[str, str] | None = None) -> list[str]:
    """The expressions of the objects policy's validations, as rendered."""
    docs = render_chart("admission-policies.yaml", values=values)
    policy = next(d for d in docs if d["metadata"]["name"] == OPERATOR_ADMISSION_POLICY)
    return [str(v["expression"]) for v in policy["spec"]["validations"]]


def lists_in(rules: list[str], pattern: re.Pattern[str]) -> list[list[str]]:
    [found] = {m.groups() for r in rules for m in pattern.finditer(r)}
    return [json.loads(g) for g in found]


def test_the_admission_policy_allows_the_pythons_keys_and_the_charts_default_list() -> None:
    rules = node_rules()
    labels, label_prefixes = lists_in(rules, LABELS)
    assert labels == [*OPERATOR_NODE_LABELS, *GPU_OPERATOR_SWITCHES, "ascend"]
    assert label_prefixes == ["volcano.sh/"]
    assert lists_in(rules, TAINTS) == [[], ["volcano.sh/", "vgpu.volcano.sh/"]]
    assert lists_in(rules, ANNOTATIONS) == [list(OPERATOR_NODE_ANNOTATIONS)]
    # the ownership record is read from the stored Node, never from the new object
    docs = render_chart("admission-policies.yaml")
    policy = next(d for d in docs if d["metadata"]["name"] == OPERATOR_ADMISSION_POLICY)
    record = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}["nodeRecord"]
    assert "variables.nodeOldAnnotations" in record and contract.ANN_OWNED in record


def test_a_values_list_reaches_both_the_admission_policy_and_the_operator_config() -> None:
    values = {
        "config.policyKeys.labels": "{team,example.com/}",
        "config.policyKeys.taints": "{dedicated}",
    }
    rules = node_rules(values)
    labels, label_prefixes = lists_in(rules, LABELS)
    assert labels[-1:] == ["team"] and label_prefixes == ["example.com/"]
    assert lists_in(rules, TAINTS) == [["dedicated"], []]
    [cm] = render_chart("configmap.yaml", values=values)
    keys = load_config(cm["data"]["config.yaml"]).policy_keys
    assert keys is not None
    assert (keys.labels, keys.taints) == (["team", "example.com/"], ["dedicated"])


def test_the_chart_refuses_to_render_without_policy_keys() -> None:
    result = subprocess.run(
        [
            str(binaries.ensure("helm")),
            "template",
            "vgpu-operator",
            str(chart_dir()),
            "--set",
            "config.policyKeys=null",
            "--kube-version",
            binaries.KUBERNETES_VERSION,
            "--show-only",
            "templates/admission-policies.yaml",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "config.policyKeys: set the node label and taint keys policies may use" in (
        result.stderr
    )


def chart_keys() -> PolicyKeys:
    [cm] = render_chart("configmap.yaml")
    keys = load_config(cm["data"]["config.yaml"]).policy_keys
    assert keys is not None
    return keys


def shipped_policies() -> list[tuple[str, Doc]]:
    root = binaries.repo_root() / "examples"
    found = []
    for path in sorted(Path(root).rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == contract.POLICY_KIND:
                found.append((f"{path.relative_to(root)}:{doc['metadata']['name']}", doc))
    return found


def test_the_shipped_examples_are_found() -> None:
    assert len(shipped_policies()) >= 8


@pytest.mark.parametrize(
    ("where", "doc"), shipped_policies(), ids=[w for w, _ in shipped_policies()]
)
def test_the_charts_default_refuses_no_example_policy(where: str, doc: Doc) -> None:
    parsed = parse_policy(doc)
    assert parsed.policy is not None, (where, parsed.problems)
    assert unlisted_keys(parsed.policy, chart_keys()) == [], where


@pytest.mark.parametrize("mode", contract.MODES)
def test_the_charts_default_refuses_no_modes_default_keys(mode: str) -> None:
    doc = {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": f"default-{mode}"},
        "spec": {"mode": mode, "nodeSelector": {"matchLabels": {"pool": mode}}},
    }
    parsed = parse_policy(doc)
    assert parsed.policy is not None, parsed.problems
    assert unlisted_keys(parsed.policy, chart_keys()) == []

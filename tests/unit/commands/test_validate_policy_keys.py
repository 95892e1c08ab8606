"""`validate` checks a policy against the `policyKeys` of the operator configuration given beside
it, with the decision the controller, `plan` and `doctor` take (`core.nodes.policy_keys`): a key
the list does not name is a problem the operator refuses the policy for, naming the key, the
configuration and the chart value; without a list in the configuration nothing is refused."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from vgpu_operator import contract
from vgpu_operator.commands import cli, exitcodes

SELECTOR = {"matchLabels": {"nvidia.com/gpu.present": "true"}}
TAINT = {"key": "example.com/gpu-pool", "value": "x", "effect": "NoSchedule"}


def policy(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": {"mode": "hami-core", "nodeSelector": SELECTOR, **spec},
    }


def validate(
    paths: list[Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, dict[str, Any]]:
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # main's SIGTERM handler
    code = cli.main(["validate", *[a for p in paths for a in ("-f", str(p))], "-o", "json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, json.loads(out)


def test_an_unlisted_key_is_a_problem_given_the_values_that_list_the_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        yaml.safe_dump_all([policy("listed"), policy("unlisted", nodeTaints=[TAINT])])
    )
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {"config": {"policyKeys": {"labels": ["volcano.sh/"], "taints": ["volcano.sh/"]}}}
        )
    )
    code, data = validate([policies, values], capsys, monkeypatch)
    assert code == exitcodes.FINDINGS
    by_name = {d["name"]: d for d in data["documents"] if d["kind"] == contract.POLICY_KIND}
    assert by_name["listed"]["result"] == "valid"
    [problem] = by_name["unlisted"]["problems"]
    assert problem["field"] == "spec.nodeTaints" and problem["refusedBy"] == "operator"
    assert problem["message"].startswith(
        "policy unlisted asks for the taint key example.com/gpu-pool (spec.nodeTaints)"
    )
    assert f"(the operator configuration at {values}:1)" in problem["message"]
    assert "config.policyKeys.taints" in problem["fix"]


def test_a_configuration_without_a_list_refuses_no_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    both = tmp_path / "both.yaml"
    both.write_text(
        yaml.safe_dump_all([policy("unlisted", nodeTaints=[TAINT]), {"mode": "report"}])
    )
    code, data = validate([both], capsys, monkeypatch)
    assert code == exitcodes.OK, data

"""`doctor --list-rules` lists every registered rule and what it checks, without a cluster;
`--discover` turns every name into `auto`."""

from __future__ import annotations

import json

import pytest

from vgpu_operator.commands import doctor
from vgpu_operator.core.rules import RULES
from vgpu_operator.models.config import OperatorConfig, load_config
from vgpu_operator.models.config_refs import AUTO


def test_list_rules_table_names_every_rule_with_what_it_checks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert doctor.main(["--list-rules"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line and not line.startswith(" ")]
    listed = {line.split()[0]: line.split(None, 1)[1] for line in lines}
    assert list(listed) == list(RULES)
    for rule_id, rule in RULES.items():
        assert listed[rule_id] == rule.title
    # A rule whose function explains more shows it under its line.
    assert "gpuMemoryFactor" in out


def test_list_rules_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.main(["--list-rules", "-o", "json"]) == 0
    rules = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rules] == list(RULES)
    assert all(r["checks"] for r in rules)


def test_discover_makes_every_name_auto_and_keeps_the_rest() -> None:
    config = load_config("gpuMemoryFactor: 2\nascendVnpu: {enabled: true}")
    auto = doctor.all_auto(config)
    fields = auto.auto_fields()
    assert "scheduler.deployment.name" in fields and "resourceNames.count" in fields
    assert "ascendVnpu.schedulerDevice.namespace" in fields
    assert auto.gpu_memory_factor == 2 and auto.ascend_vnpu.enabled
    assert auto.device_config.namespace == AUTO
    assert OperatorConfig().auto_fields() == []

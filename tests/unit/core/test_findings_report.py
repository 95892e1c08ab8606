"""How findings reach people: the ConfigConsistent condition per policy (and its place in the
policy status), one Event per finding, the metric counts; the snapshot reader's compaction and
the `doctor` command line."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.kit.nodekit import node, parsed, policy, reconcile
from tests.kit.volcano_fixtures import (
    edit,
    findings,
    healthy,
    pod,
    replace,
    scheduler_cm,
    text,
)
from vgpu_operator.commands import doctor
from vgpu_operator.controller.snapshot import (
    compact_node,
    compact_pod,
    configmap_refs,
    scheduler_device_ref,
)
from vgpu_operator.core.findings import (
    CONDITION,
    config_condition,
    finding_counts,
    finding_events,
    finding_key,
    still_found,
)
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.status import compute_status, status_body
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.rules.base import Finding, ObjectRef, Severity
from vgpu_operator.models.config import OperatorConfig

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def finding(
    rule: str, *objects: ObjectRef, severity: Severity = "error", fixable: bool = False
) -> Finding:
    return Finding(
        id=rule,
        severity=severity,
        objects=objects,
        message=f"{rule} is wrong",
        fix="fix it",
        fixable_by_operator=fixable,
    )


NODE_A = ObjectRef(kind="Node", name="a")
NODE_B = ObjectRef(kind="Node", name="b")
CONF = ObjectRef(kind="ConfigMap", name="volcano-scheduler-configmap", namespace="volcano-system")


def test_condition_per_policy_counts_cluster_wide_and_own_node_findings() -> None:
    found = [
        finding("scheduler-predicates", CONF, fixable=True),
        finding("node-registration", NODE_B),
        finding("version-handshake", CONF, severity="info"),
    ]
    status, reason, message = config_condition(found, {"a"})
    assert (status, reason) == ("False", "Inconsistent")
    assert "scheduler-predicates" in message and "node-registration" not in message
    assert "1 fixable by the operator" in message
    status, _, message = config_condition(found, {"b"})
    assert status == "False" and "node-registration: Node b" in message
    # notes never make a policy inconsistent; nothing at all: consistent
    assert config_condition(found[2:], {"a"})[0] == "True"
    assert config_condition([], {"a"}) == (
        "True",
        "Consistent",
        "the Volcano/HAMi configuration agrees with itself",
    )
    assert config_condition(None, {"a"})[:2] == ("Unknown", "NotChecked")
    warn = [finding("gpu-memory-factor", NODE_A, severity="warning")]
    assert config_condition(warn, {"a"}, mode="report")[1] == "Warnings"
    assert "report mode" in config_condition(warn, {"a"}, mode="report")[2]


def test_condition_message_is_bounded_and_lists_the_first_findings() -> None:
    many = [
        finding("stranded-pods", ObjectRef(kind="Pod", name=f"p{i}", namespace="x"))
        for i in range(40)
    ]
    _, _, message = config_condition(many, set())
    assert len(message) <= 1000
    assert "and 35 more" in message


def test_one_event_per_finding_and_again_after_it_went_away() -> None:
    f1 = finding("scheduler-predicates", CONF)
    f2 = finding("node-registration", NODE_A, NODE_B)
    events, posted = finding_events([f1, f2], set())
    assert [(e.target.name, e.reason) for e in events] == [
        ("volcano-scheduler-configmap", "ConfigSchedulerPredicates"),
        ("a", "ConfigNodeRegistration"),
        ("b", "ConfigNodeRegistration"),
    ]
    assert posted == {finding_key(f1), finding_key(f2)}
    again, posted = finding_events([f1, f2], posted)
    assert again == []
    # f1 fixed, then back: reported again
    _, posted = finding_events([f2], posted)
    back, _ = finding_events([f1, f2], posted)
    assert [e.reason for e in back] == ["ConfigSchedulerPredicates"]


def test_queued_events_of_a_fixed_finding_are_not_sent() -> None:
    """Events wait in the shell's queue; a newer pass that no longer finds their problem
    drops them, and keeps the others in their order."""
    found = [finding("node-registration", ObjectRef(kind="Node", name=f"n{i}")) for i in range(3)]
    events, _ = finding_events(found, set())
    queued = [(e, e.target.name) for e in events]
    _, current = finding_events([found[0], found[2]], set())
    assert [name for _, name in still_found(queued, current)] == ["n0", "n2"]


def test_metric_counts_by_rule_and_severity() -> None:
    counts = finding_counts(
        [finding("a", NODE_A), finding("a", NODE_B), finding("b", NODE_A, severity="warning")]
    )
    assert counts == {("a", "error"): 2, ("b", "warning"): 1}


def test_status_carries_the_extra_condition_without_touching_the_others() -> None:
    pols = [policy("p", {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "a"}}})]
    nodes, _ = reconcile([node("n1", {"pool": "a"})], pols)
    facts = [node_facts(n) for n in nodes]
    cluster = plan_cluster(facts, parsed(pols))
    by_name = {f.name: f for f in facts}
    plain = compute_status(cluster.policies["p"], cluster, by_name, None, T0)
    extra = {CONDITION: ("False", "Inconsistent", "1 error(s) in x")}
    # an extra condition cannot override one of the policy's own
    both = compute_status(
        cluster.policies["p"], cluster, by_name, None, T0, {**extra, "Ready": ("False", "X", "")}
    )
    assert [c.type for c in both.conditions] == [*(c.type for c in plain.conditions), CONDITION]
    assert both.conditions[:-1] == plain.conditions
    # the transition time stays while the status does
    later = compute_status(
        cluster.policies["p"],
        cluster,
        by_name,
        status_body(both),
        T0 + timedelta(hours=1),
        {CONDITION: ("False", "Inconsistent", "2 error(s) in x, y")},
    )
    assert later.conditions[-1].last_transition_time == "2026-03-01T12:00:00Z"
    assert later.conditions[-1].message == "2 error(s) in x, y"


def test_compaction_keeps_what_the_rules_read() -> None:
    snap = edit(healthy(), "nodes", "gpu-a", lambda n: n["metadata"].update(managedFields=[{}]))
    compacted = replace(
        snap,
        nodes=[compact_node(n) for n in snap.nodes],
        pods=[compact_pod(p) for p in snap.pods],
    )
    assert all("managedFields" not in n["metadata"] for n in compacted.nodes)
    assert run_rules(compacted).findings == run_rules(snap).findings
    stranded = pod("team", "t", node="gpu-a", limits={"volcano.sh/vgpu-number": "1"})
    broken = replace(compacted, pods=[compact_pod(stranded)])
    assert [f.id for f in findings(broken, "stranded-pods")] == ["stranded-pods"]


def test_configmaps_to_read_include_where_the_scheduler_conf_points() -> None:
    cfg = OperatorConfig()
    refs = configmap_refs(cfg)
    assert ("kube-system", "volcano-vgpu-device-config") in refs
    assert ("volcano-system", "volcano-vgpu-device-config") in refs
    assert len(refs) == len(set(refs))
    assert scheduler_device_ref(cfg, scheduler_cm(text("seed002_scheduler.conf"))) == (
        "volcano-system",
        "volcano-vgpu-device-config",
    )
    assert scheduler_device_ref(cfg, None) is None
    assert scheduler_device_ref(cfg, scheduler_cm("- not a mapping")) is None


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    doctor.add_subcommand(parser.add_subparsers())
    return parser.parse_args(["doctor", *argv])


def test_doctor_refuses_an_invalid_config_and_unknown_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("mode: sometimes\n")
    args = _args("--config", str(bad))
    assert args.func(args) == doctor.EXIT_USAGE  # an invalid input file (commands.exitcodes)
    assert "mode" in capsys.readouterr().err
    args = _args("--rule", "no-such-rule", "--kubeconfig", str(tmp_path / "none"))
    assert args.func(args) == doctor.EXIT_USAGE
    assert "no-such-rule" in capsys.readouterr().err
    args = _args("--kubeconfig", str(tmp_path / "missing"))
    assert args.func(args) == doctor.EXIT_CANNOT_RUN
    assert "cannot reach the cluster" in capsys.readouterr().err

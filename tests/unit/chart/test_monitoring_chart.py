"""The chart's monitoring part: each monitor, the PrometheusRule and the dashboard render only as
asked and only where their CRD is served; the rendered rule passes `promtool check rules` and
its alerts fire where their condition holds (`promtool test rules` with
charts/vgpu-operator/prometheus/rules_test.yaml); the agents expose what their PodMonitor
scrapes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from vgpu_devcluster.install import VAP_API, chart_dir, render_chart
from vgpu_devcluster.monitoring_tools import (
    check_rules,
    dashboard_expressions,
    promql_metric_names,
    rule_expressions,
    run_rule_tests,
)

MONITORING_APIS = (
    "monitoring.coreos.com/v1/PodMonitor",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
)
PROMETHEUS_DIR = chart_dir() / "prometheus"


def _render(*apis: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's monitoring.coreos.com objects (the whole chart is rendered: `--show-only`
    refuses a template that renders nothing)."""
    docs = render_chart(values=values, api_versions=(VAP_API, *apis))
    return [d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")]


def _kinds(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs)


def test_nothing_renders_where_the_crds_are_not_served() -> None:
    docs = render_chart(api_versions=(VAP_API,))  # the whole chart
    assert not [d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")]


def test_each_object_renders_where_its_crd_is_served() -> None:
    assert _kinds(_render(*MONITORING_APIS)) == [
        ("PodMonitor", "vgpu-operator-agent"),
        ("PodMonitor", "vgpu-operator-controller"),
        ("PodMonitor", "vgpu-operator-vgpu-monitor"),
        ("PrometheusRule", "vgpu-operator"),
        ("ServiceMonitor", "vgpu-operator-volcano-scheduler"),
    ]
    assert _kinds(_render("monitoring.coreos.com/v1/PrometheusRule")) == [
        ("PrometheusRule", "vgpu-operator")
    ]
    assert _kinds(_render("monitoring.coreos.com/v1/ServiceMonitor")) == [
        ("ServiceMonitor", "vgpu-operator-volcano-scheduler")
    ]


def test_each_part_is_optional() -> None:
    off = {
        "monitoring.agent.enabled": "false",
        "monitoring.devicePlugin.enabled": "false",
        "monitoring.rules.enabled": "false",
    }
    assert _kinds(_render(*MONITORING_APIS, values=off)) == [
        ("PodMonitor", "vgpu-operator-controller"),
        ("ServiceMonitor", "vgpu-operator-volcano-scheduler"),
    ]
    assert _render(*MONITORING_APIS, values={"monitoring.enabled": "false"}) == []
    docs = render_chart(values={"monitoring.enabled": "false"})
    assert "vgpu-operator-dashboard" not in {d["metadata"]["name"] for d in docs}


def test_monitors_scrape_the_ports_the_workloads_serve() -> None:
    """The controller's and the agents' PodMonitors name the `metrics` container port their
    pods declare, and the agent is started with --metrics-port on it; Volcano's scheduler
    Service port is `metrics` (8080) and HAMi's monitor listens on 9394 without a port."""
    docs = {d["metadata"]["name"]: d for d in _render(*MONITORING_APIS)}
    [agent] = render_chart("agent-daemonset.yaml")
    [container] = agent["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert f"--metrics-port={ports['metrics']}" in container["args"]
    [deployment] = render_chart("deployment.yaml")
    [controller] = deployment["spec"]["template"]["spec"]["containers"]
    assert "metrics" in {p["name"] for p in controller["ports"]}
    for name, pod_labels in (
        ("vgpu-operator-agent", agent["spec"]["template"]["metadata"]["labels"]),
        ("vgpu-operator-controller", deployment["spec"]["template"]["metadata"]["labels"]),
    ):
        spec = docs[name]["spec"]
        assert spec["podMetricsEndpoints"][0]["port"] == "metrics"
        assert spec["selector"]["matchLabels"].items() <= pod_labels.items()
    monitor = docs["vgpu-operator-vgpu-monitor"]["spec"]
    assert monitor["selector"]["matchLabels"] == {"name": "volcano-device-plugin"}
    relabel = monitor["podMetricsEndpoints"][0]["relabelings"]
    assert {
        "sourceLabels": ["__meta_kubernetes_pod_container_name"],
        "regex": "monitor",
        "action": "keep",
    } in relabel
    assert any(r.get("replacement") == "$1:9394" for r in relabel)
    scheduler = docs["vgpu-operator-volcano-scheduler"]["spec"]
    assert scheduler["namespaceSelector"] == {"matchNames": ["volcano-system"]}
    assert scheduler["endpoints"][0]["port"] == "metrics"


def _rendered_rules(tmp_path: Path, groups: list[dict[str, Any]] | None = None) -> Path:
    """The PrometheusRule's groups as a rule file beside a copy of rules_test.yaml."""
    if groups is None:
        [rule] = _render("monitoring.coreos.com/v1/PrometheusRule")
        groups = rule["spec"]["groups"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copyfile(PROMETHEUS_DIR / "rules_test.yaml", tmp_path / "rules_test.yaml")
    return tmp_path


def test_rendered_rule_is_the_rule_file() -> None:
    [rule] = _render("monitoring.coreos.com/v1/PrometheusRule")
    source = yaml.safe_load((PROMETHEUS_DIR / "rules.yaml").read_text())
    assert rule["spec"]["groups"] == source["groups"]
    alerts = set(rule_expressions(source["groups"]))
    for wanted in ("VGPUNodeFailed", "VGPUNodeBlocked", "VGPUConfigurationInconsistent"):
        assert wanted in alerts
    assert {"VGPURolloutStalled", "VGPUOperatorAPIErrors"} <= alerts


def test_rendered_rule_passes_promtool_check_and_its_tests(tmp_path: Path) -> None:
    directory = _rendered_rules(tmp_path)
    checked = check_rules(directory / "rules.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout
    tested = run_rule_tests(directory / "rules_test.yaml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # every alert of the rule file is exercised by the test file
    cases = yaml.safe_load((directory / "rules_test.yaml").read_text())["tests"]
    exercised = {t["alertname"] for case in cases for t in case["alert_rule_test"]}
    [rule] = _render("monitoring.coreos.com/v1/PrometheusRule")
    assert exercised == set(rule_expressions(rule["spec"]["groups"]))


@pytest.mark.parametrize(
    ("alert", "broken"),
    [
        ("VGPUNodeFailed", 'state="failed"'),
        ("VGPUOperatorAPIErrors", "404|409|410"),
    ],
)
def test_promtool_tests_fail_when_an_alert_changes(tmp_path: Path, alert: str, broken: str) -> None:
    """The test file pins the alerts: an alert that no longer holds where it should (or holds
    where it should not) fails `promtool test rules`."""
    [rule] = _render("monitoring.coreos.com/v1/PrometheusRule")
    groups = rule["spec"]["groups"]
    for r in groups[0]["rules"]:
        if r.get("alert") == alert:
            assert broken in r["expr"]
            r["expr"] = r["expr"].replace(broken, 'state="none"' if "state" in broken else "404")
    directory = _rendered_rules(tmp_path, groups)
    assert check_rules(directory / "rules.yaml").returncode == 0
    tested = run_rule_tests(directory / "rules_test.yaml")
    assert tested.returncode != 0
    assert alert in tested.stdout + tested.stderr


def test_dashboard_is_a_grafana_configmap_with_the_chart_json() -> None:
    [cm] = render_chart("monitoring/dashboard.yaml")
    assert cm["kind"] == "ConfigMap"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["vgpu-operator.json"])
    assert dashboard == json.loads((chart_dir() / "dashboards" / "vgpu-operator.json").read_text())
    titles = {p["title"] for p in dashboard["panels"]}
    for wanted in (
        "Desired against actual mode, per node",
        "MIG instances per node and profile",
        "vGPU memory allocated per node",
    ):
        assert wanted in titles
    queries = dashboard_expressions(dashboard)
    assert all(promql_metric_names(expr) for expr in queries.values()), queries
    [moved] = render_chart(
        "monitoring/dashboard.yaml", values={"monitoring.dashboard.namespace": "monitoring"}
    )
    assert moved["metadata"]["namespace"] == "monitoring"


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (policy, mode) (vgpu_operator_nodes_managed{state="failed"}) > 0',
            {"vgpu_operator_nodes_managed"},
        ),
        (
            "histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[5m])))",
            {"x_seconds_bucket"},
        ),
        ("max by (policy) (a) > 0 and max by (policy) (changes(b[15m])) == 0", {"a", "b"}),
        ('sum(x{state=~"failed|blocked"}) or vector(0)', {"x"}),
        ("sum by (NodeName) (a) / on (NodeName) group_left sum by (NodeName) (b)", {"a", "b"}),
    ],
)
def test_promql_metric_names(expr: str, names: set[str]) -> None:
    assert promql_metric_names(expr) == names

"""The chart's monitoring part: each monitor, the PrometheusRule and the dashboard render only as
asked and only where their CRD is served; the rendered rule passes `promtool check rules` and
its alerts fire where their condition holds and stay silent where it does not (`promtool test
rules` with charts/vgpu-operator/prometheus/rules_test.yaml), the absent() one for a controller
that is not scraped at all included; the alerts query only metrics the operator exports; the
agents expose what their PodMonitor scrapes, and no monitor sets a label its metrics carry."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kit.exported_metrics import exported_metrics, monitors, relabeled, scraped_by
from vgpu_devcluster.install import VAP_API, chart_dir, render_chart
from vgpu_devcluster.monitoring_tools import (
    UPSTREAM_METRICS,
    check_rules,
    dashboard_expressions,
    promql_metric_names,
    promql_selectors,
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


def test_no_monitor_sets_a_label_its_metrics_carry() -> None:
    """A label a monitor's relabeling sets on its targets and a scraped series also carries is
    renamed exported_<label> in Prometheus (honor_labels false: https://prometheus.io/docs/
    prometheus/latest/configuration/configuration/#scrape_config): the controller's
    vgpu_operator_node_info carries its own `node` (the managed node), so only the agents'
    monitor gets `node` from the pod."""
    clashes = {
        (monitor, metric.family, label)
        for metric in exported_metrics().values()
        for monitor in scraped_by(metric)
        for label in metric.labels & relabeled(monitors()[monitor])
    }
    clashes |= {
        (monitor, name, label)
        for name, (labels, monitor) in UPSTREAM_METRICS.items()
        for label in labels & relabeled(monitors()[monitor])
    }
    assert not clashes, clashes
    assert relabeled(monitors()["agent"]) == {"node"}
    assert relabeled(monitors()["controller"]) == frozenset()
    assert "node" in exported_metrics()["vgpu_operator_node_info"].labels


def _rendered_rules(tmp_path: Path, groups: list[dict[str, Any]] | None = None) -> Path:
    """The PrometheusRule's groups as a rule file beside a copy of rules_test.yaml."""
    if groups is None:
        [rule] = _render("monitoring.coreos.com/v1/PrometheusRule")
        groups = rule["spec"]["groups"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copyfile(PROMETHEUS_DIR / "rules_test.yaml", tmp_path / "rules_test.yaml")
    return tmp_path


def test_rendered_rule_is_the_rule_file_with_runbook_urls() -> None:
    [rule] = _render("monitoring.coreos.com/v1/PrometheusRule")
    source = yaml.safe_load((PROMETHEUS_DIR / "rules.yaml").read_text())
    rendered = rule["spec"]["groups"]
    for group in rendered:
        for r in group["rules"]:
            assert r["annotations"].pop("runbook_url").endswith("#" + r["alert"].lower())
    assert rendered == source["groups"]
    alerts = set(rule_expressions(source["groups"]))
    for wanted in ("VGPUNodeFailed", "VGPUNodeBlocked", "VGPUConfigurationInconsistent"):
        assert wanted in alerts
    assert {"VGPURolloutStalled", "VGPUOperatorAPIErrors", "VGPUOperatorNoLeader"} <= alerts
    assert rule_expressions(source["groups"])["VGPUOperatorDown"] == "absent(vgpu_operator_leader)"


def test_alerts_query_only_metrics_the_operator_exports() -> None:
    """Each alert's metrics are the operator's own (read from its modules), so an alert cannot
    wait on a series no process serves; the operator-down alert's metric is one every
    controller replica exports from its start, leader or standby (no labels, so absent() of it
    means no replica at all)."""
    [rule] = _render("monitoring.coreos.com/v1/PrometheusRule")
    exported = exported_metrics()
    for alert, expr in rule_expressions(rule["spec"]["groups"]).items():
        names = promql_metric_names(expr)
        assert names and names <= set(exported), (alert, names - set(exported))
    leader = exported["vgpu_operator_leader"]
    assert leader.kind == "gauge" and not leader.labels
    assert scraped_by(leader) == ["controller"]


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
    ("alert", "broken", "into"),
    [
        ("VGPUNodeFailed", 'state="failed"', 'state="none"'),
        ("VGPUOperatorAPIErrors", "404|409|410", "404"),
        # the operator-down alert read like NoLeader: silent when no replica is scraped
        ("VGPUOperatorDown", "absent(vgpu_operator_leader)", "max(vgpu_operator_leader) < 1"),
    ],
)
def test_promtool_tests_fail_when_an_alert_changes(
    tmp_path: Path, alert: str, broken: str, into: str
) -> None:
    """The test file pins the alerts: an alert that no longer holds where it should (or holds
    where it should not) fails `promtool test rules`."""
    [rule] = _render("monitoring.coreos.com/v1/PrometheusRule")
    groups = rule["spec"]["groups"]
    for r in groups[0]["rules"]:
        if r.get("alert") == alert:
            assert broken in r["expr"]
            r["expr"] = r["expr"].replace(broken, into)
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


@pytest.mark.parametrize(
    ("expr", "selectors"),
    [
        (
            'sum by (policy) (x{cluster=~"$cluster", policy=~"$policy", state="failed"})',
            [
                (
                    "x",
                    {
                        "cluster": ("=~", "$cluster"),
                        "policy": ("=~", "$policy"),
                        "state": ("=", "failed"),
                    },
                )
            ],
        ),
        (
            'rate(a_total{s!~"404|409"}[$__rate_interval]) / on (n) group_left b{n!="x"}',
            [("a_total", {"s": ("!~", "404|409")}), ("b", {"n": ("!=", "x")})],
        ),
        (
            'x{v=~"a\\\\.b", w="say \\"hi\\""}',  # the PromQL string "a\\.b", the regex a\.b
            [("x", {"v": ("=~", "a\\.b"), "w": ("=", 'say "hi"')})],
        ),
        ('label_replace(x, "dst", "$1", "src", "(.*)")', [("x", {})]),
        ("absent(up) or vector(0)", [("up", {})]),
    ],
)
def test_promql_selectors(
    expr: str, selectors: list[tuple[str, dict[str, tuple[str, str]]]]
) -> None:
    assert promql_selectors(expr) == selectors


def test_promql_selectors_refuse_a_selector_without_a_name() -> None:
    with pytest.raises(ValueError, match="without a metric name"):
        promql_selectors('sum({__name__=~"vgpu_.*"})')

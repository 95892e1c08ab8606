"""The Grafana dashboard's lint: valid JSON with unique panel ids and no overlapping panels; the
variables cluster, policy and node, each used by the panels and each listing values of a label
its metric carries; every query selects only metrics the operator exports (read from its
modules, tests/kit/exported_metrics.py) or Volcano's and HAMi's by their upstream names; and
every selector is narrowed by the variable of each of those labels its series carry (after the
chart's monitors scraped them), with no matcher on a label the series do not carry."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.kit.exported_metrics import CLUSTER, exported_metrics, series_labels
from vgpu_devcluster.install import chart_dir
from vgpu_devcluster.monitoring_tools import (
    UPSTREAM_METRICS,
    Matchers,
    dashboard_expressions,
    promql_selectors,
)

DASHBOARD: dict[str, Any] = json.loads(
    (chart_dir() / "dashboards" / "vgpu-operator.json").read_text()
)
# Grafana's own variables, "Global variables" of
# https://grafana.com/docs/grafana/latest/dashboards/variables/add-template-variables/
GRAFANA_VARIABLES = frozenset(
    {"__interval", "__interval_ms", "__rate_interval", "__range", "__range_s", "__range_ms"}
)
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in panels:
        out.append(panel)
        out += _panels(panel.get("panels", []))
    return out


def _variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in DASHBOARD["templating"]["list"]}


def _used(text: str) -> set[str]:
    return {a or b for a, b in _VARIABLE.findall(text)}


def _queries() -> dict[str, str]:
    """Every query: the panels' targets and the query variables' label_values selectors."""
    queries = {f"panel {k}": v for k, v in dashboard_expressions(DASHBOARD).items()}
    for name, var in _variables().items():
        if var["type"] == "query":
            m = _LABEL_VALUES.match(var["query"])
            assert m, f"variable {name}: {var['query']!r} is not label_values(SELECTOR, LABEL)"
            queries[f"variable {name}"] = m["selector"]
    return queries


def test_dashboard_is_valid_json_with_unique_ids_and_no_overlap() -> None:
    text = (chart_dir() / "dashboards" / "vgpu-operator.json").read_text()
    assert json.loads(text) == DASHBOARD
    assert DASHBOARD["uid"] and DASHBOARD["title"] and DASHBOARD["schemaVersion"] >= 39
    panels = _panels(DASHBOARD["panels"])
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), ids
    cells: dict[tuple[int, int], int] = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps panel {cells[(x, y)]}"
                cells[(x, y)] = p["id"]
    for p in panels:
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert p.get("targets"), p["title"]


def test_variables_cluster_policy_node_are_each_used_and_none_is_undefined() -> None:
    variables = _variables()
    assert list(variables) == ["datasource", "cluster", "policy", "node"]
    for name in ("cluster", "policy", "node"):
        var = variables[name]
        assert var["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        # "All" matches every series, those without the label too (a single-cluster Prometheus)
        assert var["includeAll"] and var["allValue"] == ".*", name
        assert var["description"], name
    panel_text = json.dumps(DASHBOARD["panels"])
    used_by_panels = _used(panel_text)
    assert set(variables) <= used_by_panels, set(variables) - used_by_panels
    everything = _used(json.dumps(DASHBOARD))
    undefined = everything - set(variables) - GRAFANA_VARIABLES
    assert not undefined, undefined


def test_every_query_selects_only_metrics_the_operator_or_upstream_exports() -> None:
    exported = exported_metrics()
    for where, expr in _queries().items():
        selectors = promql_selectors(expr)
        assert selectors, f"{where}: no metric in {expr!r}"
        unknown = {n for n, _ in selectors if n not in exported and n not in UPSTREAM_METRICS}
        assert not unknown, f"{where}: {unknown} is not exported (by {expr!r})"


def _required(labels: frozenset[str]) -> dict[str, str]:
    """Label -> the variable that must narrow it, for series carrying `labels`."""
    wanted = {CLUSTER: "cluster"}
    if "policy" in labels:
        wanted["policy"] = "policy"
    for node_label in ("node", "NodeName"):  # Volcano's scheduler names it NodeName
        if node_label in labels:
            wanted[node_label] = "node"
    return wanted


def _check_selector(where: str, name: str, matchers: Matchers) -> list[str]:
    problems: list[str] = []
    label_sets = series_labels(name)
    carried = frozenset.union(*label_sets)
    for label in matchers:
        if label not in carried:
            problems.append(f"{where}: {name} has no label {label!r}")
    # a label only some of the metric's sources carry (the API seam's, from the controller and
    # the agents) is not required: the variable would drop the other sources' series
    always = frozenset.intersection(*label_sets)
    for label, variable in _required(always).items():
        if matchers.get(label) != ("=~", f"${variable}"):
            problems.append(f'{where}: {name} needs {label}=~"${variable}"')
    return problems


def test_every_selector_is_narrowed_by_the_variables_of_its_labels() -> None:
    problems: list[str] = []
    for where, expr in dashboard_expressions(DASHBOARD).items():
        for name, matchers in promql_selectors(expr):
            problems += _check_selector(where, name, matchers)
    assert not problems, "\n".join(problems)


def test_each_variable_lists_a_label_its_metric_carries_narrowed_by_the_ones_before() -> None:
    """Cluster lists `cluster`; Policy the policies of the chosen cluster; Node the nodes of the
    chosen cluster and policies."""
    before: dict[str, str] = {}  # label -> the variable listing it
    for name, var in _variables().items():
        if var["type"] != "query":
            continue
        m = _LABEL_VALUES.match(var["query"])
        assert m and var["definition"] == var["query"], name
        [(metric, matchers)] = promql_selectors(m["selector"])
        [carried] = series_labels(metric)
        assert m["label"] in carried, (name, metric)
        assert matchers == {
            label: ("=~", f"${v}") for label, v in before.items() if label in carried
        }, (name, matchers)
        before[m["label"]] = name
    assert before == {"cluster": "cluster", "policy": "policy", "node": "node"}


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("sum(vgpu_operator_nodes_managed)", 'needs cluster=~"$cluster"'),
        ('sum(vgpu_operator_nodes_managed{cluster=~"$cluster"})', 'needs policy=~"$policy"'),
        ('sum(vgpu_operator_agent_gpus{cluster=~"$cluster"})', 'needs node=~"$node"'),
        (
            'sum(volcano_vgpu_device_shared_number{cluster=~"$cluster", node=~"$node"})',
            "has no label 'node'",
        ),
        ('sum(vgpu_operator_findings{cluster=~"$cluster", policy="a"})', "has no label 'policy'"),
    ],
)
def test_the_selector_check_finds_a_missing_or_wrong_matcher(expr: str, problem: str) -> None:
    [(name, matchers)] = promql_selectors(expr)
    assert any(problem in p for p in _check_selector("t", name, matchers))


def test_a_query_of_a_metric_nobody_exports_is_found() -> None:
    exported = exported_metrics()
    assert "vgpu_operator_nodes_managed" in exported
    assert "vgpu_operator_reconciliations_total" in exported  # a counter's series name
    assert "vgpu_operator_reconcile_duration_seconds_bucket" in exported
    assert "vgpu_operator_nodes_manage" not in exported
    assert "vgpu_operator_reconciliations" not in exported  # the family, not a series

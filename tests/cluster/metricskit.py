"""Scraping /metrics pages and the metric names the chart's alerts and dashboard query: shared by
the demo's test (controller and agents of the running demo) and test_metrics_scrape.py."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from vgpu_devcluster.install import VAP_API, render_chart
from vgpu_devcluster.monitoring_tools import (
    UPSTREAM_METRICS,  # Volcano's and HAMi's, by their upstream names (cited there)
    dashboard_expressions,
    promql_metric_names,
    rule_expressions,
)

MONITORING_APIS = (
    "monitoring.coreos.com/v1/PodMonitor",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
)
AGENT_PREFIX = "vgpu_operator_agent_"

Samples = dict[str, list[tuple[dict[str, str], float]]]


@dataclass
class Scrape:
    """One /metrics page: samples by sample name, and the declared families."""

    samples: Samples
    families: set[str]

    def has(self, name: str) -> bool:
        """A queried name is served: as a sample (`x_total`, `x_bucket`) or a declared family
        (a labelled counter with no series yet still has its HELP and TYPE)."""
        if name in self.samples or name in self.families:
            return True
        for suffix in ("_total", "_bucket", "_count", "_sum"):
            if name.endswith(suffix) and name.removesuffix(suffix) in self.families:
                return True
        return False

    def values(self, name: str, **match: str) -> list[tuple[dict[str, str], float]]:
        return [
            (labels, v)
            for labels, v in self.samples.get(name, [])
            if all(labels.get(k) == want for k, want in match.items())
        ]

    def total(self, name: str, **match: str) -> float:
        return sum(v for _, v in self.values(name, **match))


def scrape(endpoint: int | str) -> Scrape:
    """GET /metrics: a local port, or a whole URL (as the demo prints it)."""
    url = f"http://127.0.0.1:{endpoint}/metrics" if isinstance(endpoint, int) else endpoint
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    samples: Samples = {}
    families: set[str] = set()
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return Scrape(samples, families)


def chart_queries() -> dict[str, str]:
    """Every PromQL expression of the rendered PrometheusRule and dashboard."""
    docs = render_chart(api_versions=(VAP_API, *MONITORING_APIS))
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    [board] = [d for d in docs if d["metadata"]["name"].endswith("-dashboard")]
    queries = {f"alert {k}": v for k, v in rule_expressions(rule["spec"]["groups"]).items()}
    dashboard = json.loads(board["data"]["vgpu-operator.json"])
    queries.update({f"panel {k}": v for k, v in dashboard_expressions(dashboard).items()})
    return queries


def unserved_queries(controller: Scrape, agents: Iterable[Scrape]) -> dict[str, set[str]]:
    """Metric names the chart's alerts and dashboard query that no scraped page serves, by
    query (`vgpu_operator_agent_*` from the agents, the rest from the controller; Volcano's and
    HAMi's by their upstream names). Every query must name at least one metric."""
    agent_pages = list(agents)
    assert agent_pages, "no agent was scraped"
    missing: dict[str, set[str]] = {}
    for where, expr in chart_queries().items():
        names = promql_metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        for name in names:
            if name in UPSTREAM_METRICS:
                continue
            pages = agent_pages if name.startswith(AGENT_PREFIX) else [controller]
            if not any(page.has(name) for page in pages):
                missing.setdefault(where, set()).add(name)
    return missing

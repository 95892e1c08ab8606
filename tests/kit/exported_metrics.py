"""The Prometheus metrics the operator exports, read from its modules (every `Counter`, `Gauge`,
`Histogram` ... a module of `vgpu_operator` holds at its top level), not from a list kept by
hand, and the labels their series carry once the chart's monitors scraped them: the chart's
alerts and dashboard are checked against these names and labels."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

import vgpu_operator
from vgpu_devcluster.install import VAP_API, render_chart
from vgpu_devcluster.monitoring_tools import UPSTREAM_METRICS
from vgpu_operator import exposition

# The series names each metric type exposes (prometheus_client's text exposition; `_created`
# only with its default created samples).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "enum": ("",),
}


@dataclass(frozen=True)
class ExportedMetric:
    family: str  # the name as declared, without _total
    kind: str  # counter, gauge, histogram, ...
    labels: frozenset[str]  # the labels the process exposes (scrape-time labels not included)
    modules: frozenset[str]  # the modules holding it: where it is defined and where imported

    @property
    def series(self) -> tuple[str, ...]:
        return tuple(self.family + s for s in _SUFFIXES[self.kind])


@cache
def exported_metrics() -> dict[str, ExportedMetric]:
    """Series name (`vgpu_operator_reconciliations_total`, `..._bucket`) -> its metric, for
    every metric defined in a module of the `vgpu_operator` package (each module imported)."""
    holders: dict[int, tuple[MetricWrapperBase | exposition.Metric, set[str]]] = {}
    for info in pkgutil.walk_packages(vgpu_operator.__path__, "vgpu_operator."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase | exposition.Metric):
                holders.setdefault(id(value), (value, set()))[1].add(info.name)
    found: dict[str, ExportedMetric] = {}
    for value, modules in holders.values():
        if isinstance(value, exposition.Metric):
            # the node agent's own exposition (vgpu_operator/exposition.py): a counter's name
            # is declared with its _total
            family, kind, labels = (
                value.name.removesuffix("_total") if value.type == "counter" else value.name,
                value.type,
                frozenset(value.labelnames),
            )
        else:
            [described] = value.describe()
            # prometheus_client keeps the label names only on the wrapper (no public accessor)
            family, kind, labels = described.name, described.type, frozenset(value._labelnames)
        metric = ExportedMetric(family, kind, labels, frozenset(modules))
        for name in metric.series:
            seen = found.get(name)
            # the API client's metrics are defined once per client: the controller's on
            # prometheus_client, the agent's (kubeapi/lite) on its own exposition; the same
            # series in both must mean the same
            assert seen is None or (seen.kind, seen.labels) == (kind, labels), (
                f"{name} is exported twice, as {seen} and as {metric}"
            )
            found[name] = metric if seen is None else replace(seen, modules=seen.modules | modules)
    return found


# The labels Prometheus Operator gives every target of a PodMonitor or ServiceMonitor
# (prometheus-operator/prometheus-operator@v0.85.0:pkg/prometheus/promcfg.go), and `cluster`,
# the external label a multi-cluster setup adds (the dashboard's Cluster variable).
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "container", "endpoint"})
SERVICE_TARGET_LABELS = TARGET_LABELS | {"service"}
CLUSTER = "cluster"
MONITOR_APIS = ("monitoring.coreos.com/v1/PodMonitor", "monitoring.coreos.com/v1/ServiceMonitor")


@cache
def monitors() -> dict[str, dict[str, Any]]:
    """The chart's PodMonitors and ServiceMonitors by name without the release's prefix
    (`controller`, `agent`, `vgpu-monitor`, `volcano-scheduler`), as rendered by default."""
    docs = render_chart(api_versions=(VAP_API, *MONITOR_APIS))
    return {
        d["metadata"]["name"].removeprefix("vgpu-operator-"): d
        for d in docs
        if d["apiVersion"].startswith("monitoring.coreos.com/")
    }


def relabeled(monitor: dict[str, Any]) -> frozenset[str]:
    """The labels a monitor's own relabelings set on its targets."""
    endpoints = monitor["spec"].get("podMetricsEndpoints") or monitor["spec"]["endpoints"]
    return frozenset(
        r["targetLabel"]
        for e in endpoints
        for r in e.get("relabelings", [])
        if r.get("targetLabel") and not r["targetLabel"].startswith("__")
    )


def target_labels(name: str) -> frozenset[str]:
    """The labels the targets of the monitor `name` carry."""
    monitor = monitors()[name]
    base = SERVICE_TARGET_LABELS if monitor["kind"] == "ServiceMonitor" else TARGET_LABELS
    return base | relabeled(monitor)


def scraped_by(metric: ExportedMetric) -> list[str]:
    """The chart's monitors that scrape a metric: the agent's for vgpu_operator.agent's, the
    controller's for vgpu_operator.controller's, both for the API seam's (kubeapi)."""
    packages = {m.split(".")[1] for m in metric.modules}
    if packages == {"agent"}:
        return ["agent"]
    if packages == {"controller"}:
        return ["controller"]
    return ["controller", "agent"]


def series_labels(name: str) -> list[frozenset[str]]:
    """The label sets a metric's series carry in Prometheus, one per monitor scraping it: the
    operator's (`exported_metrics`) or Volcano's and HAMi's (`UPSTREAM_METRICS`)."""
    if name in UPSTREAM_METRICS:
        labels, monitor = UPSTREAM_METRICS[name]
        return [labels | target_labels(monitor) | {CLUSTER}]
    metric = exported_metrics()[name]
    return [metric.labels | target_labels(m) | {CLUSTER} for m in scraped_by(metric)]

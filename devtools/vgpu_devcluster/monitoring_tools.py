"""The monitoring tools the chart's tests need, from Go modules like the control plane's
(binaries.py), cached the same way under `${XDG_CACHE_HOME:-~/.cache}/vgpu-operator/`:

- `promtool` (`check rules`, `test rules`) from github.com/prometheus/prometheus/cmd/promtool,
  `go install`ed at PROMETHEUS_MODULE_VERSION (Prometheus 3.x tags its Go module v0.3xx.y) with
  the `remove_all_sd` build tag: promtool's rule commands need no service discovery, and the
  discovery plugins pull in every cloud SDK (one of them, hashicorp/nomad/api, is not on every
  module proxy);
- the `monitoring.coreos.com` CRDs (ServiceMonitor, PodMonitor, PrometheusRule) from the
  github.com/prometheus-operator/prometheus-operator module's
  `example/prometheus-operator-crd/`, fetched with `go mod download -json`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from vgpu_devcluster.binaries import BuildError, Log, Tool, _go, _run, _stderr_log, tool_dir

PROMETHEUS_MODULE_VERSION = "v0.316.0"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"

PROMTOOL = Tool(
    "promtool",
    PROMETHEUS_MODULE_VERSION,
    f"github.com/prometheus/prometheus/cmd/promtool@{PROMETHEUS_MODULE_VERSION}",
    in_wrapper_module=False,
)
PROMTOOL_TAGS = "remove_all_sd"

# The CRDs the chart's monitoring templates need (file names in the module's example dir).
MONITORING_CRDS = (
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_podmonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
)
CRDS = Tool(
    "monitoring-crds",
    PROMETHEUS_OPERATOR_VERSION,
    f"{PROMETHEUS_OPERATOR_MODULE}@{PROMETHEUS_OPERATOR_VERSION}",
    in_wrapper_module=False,
)


def ensure_promtool(log: Log = _stderr_log) -> Path:
    """The promtool binary, built into the cache on first use (a few minutes)."""
    final = tool_dir(PROMTOOL)
    path = final / PROMTOOL.name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    tmp = final.with_name(final.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = {**os.environ, "GOBIN": str(tmp), "GOFLAGS": "-mod=mod"}
    start = time.monotonic()
    log(f"building promtool {PROMTOOL.version} (first time only) ...")
    _run(
        [
            _go(),
            "install",
            "-trimpath",
            "-tags",
            PROMTOOL_TAGS,
            "-ldflags",
            "-s -w",
            *[PROMTOOL.package],
        ],
        cwd=tmp,
        env=env,
        log=log,
        what="promtool",
    )
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    log(f"built promtool in {time.monotonic() - start:.0f}s -> {final}")
    return path


def ensure_monitoring_crds(log: Log = _stderr_log) -> list[Path]:
    """The ServiceMonitor, PodMonitor and PrometheusRule CRDs, copied into the cache."""
    final = tool_dir(CRDS)
    paths = [final / name for name in MONITORING_CRDS]
    if all(p.is_file() for p in paths):
        return paths
    tmp = final.with_name(final.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log(f"fetching the monitoring.coreos.com CRDs ({CRDS.package}) ...")
    proc = subprocess.run(
        [_go(), "mod", "download", "-json", CRDS.package],
        cwd=tmp,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BuildError(f"go mod download {CRDS.package}: {proc.stderr or proc.stdout}")
    source = Path(json.loads(proc.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
    for name in MONITORING_CRDS:
        if not (source / name).is_file():
            raise BuildError(f"{source / name} not found in {CRDS.package}")
        shutil.copyfile(source / name, tmp / name)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return paths


# --- what the chart's alerts and dashboard query ------------------------------------------------

# What the dashboard reads from Volcano's scheduler (volcano-sh/volcano@v1.15.1:
# pkg/scheduler/api/devices/nvidia/vgpu/metrics.go) and HAMi's vGPU monitor
# (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:cmd/vgpu-monitor/metrics.go; its collector is
# registered with a constant `zone` label), with the labels each exposes; no process of the tests
# serves them, so queries are checked against these upstream names. The value's second part is
# the chart's monitor that scrapes them (templates/monitoring/volcano.yaml).
_VOLCANO = frozenset({"devID", "NodeName"})
_HAMI_MONITOR = frozenset({"podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid", "zone"})
UPSTREAM_METRICS: dict[str, tuple[frozenset[str], str]] = {
    "volcano_vgpu_device_shared_number": (_VOLCANO, "volcano-scheduler"),
    "volcano_vgpu_device_allocated_memory": (_VOLCANO, "volcano-scheduler"),
    "volcano_vgpu_device_allocated_cores": (_VOLCANO, "volcano-scheduler"),
    "volcano_vgpu_device_memory_limit": (_VOLCANO, "volcano-scheduler"),
    "volcano_vgpu_device_memory_allocation_for_a_certain_pod": (
        _VOLCANO | {"podName"},
        "volcano-scheduler",
    ),
    "volcano_vgpu_device_core_allocation_for_a_certain_pod": (
        _VOLCANO | {"podName"},
        "volcano-scheduler",
    ),
    "HostGPUMemoryUsage": (frozenset({"deviceidx", "deviceuuid", "zone"}), "vgpu-monitor"),
    "HostCoreUtilization": (frozenset({"deviceidx", "deviceuuid", "zone"}), "vgpu-monitor"),
    "vGPU_device_memory_usage_in_bytes": (_HAMI_MONITOR, "vgpu-monitor"),
    "vGPU_device_memory_limit_in_bytes": (_HAMI_MONITOR, "vgpu-monitor"),
}

_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_STRING = r'"(?:[^"\\]|\\.)*"'
_TOKEN = re.compile(
    rf"(?P<string>{_STRING})"
    r"|(?P<range>\[[^\]]*\])"
    rf"|(?<![\w:.$])(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?P<matchers>\{{(?:[^{{}}\"]|{_STRING})*\}})?"
    rf"|(?P<bare>\{{(?:[^{{}}\"]|{_STRING})*\}})"
)
_MATCHER = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*({_STRING})")
_UNESCAPE = re.compile(r"\\(.)")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right"}
    | {"bool", "offset", "inf", "nan", "atan2"}
)

Matchers = dict[str, tuple[str, str]]


def promql_selectors(expr: str) -> list[tuple[str, Matchers]]:
    """The vector selectors of a PromQL expression, in order: each metric name with its label
    matchers (label -> (operator, value), the value unquoted). Functions, keywords, label names
    in by/without/on clauses, strings outside selectors, ranges and numbers are left out; a
    selector without a metric name (`{__name__=~...}`) is refused."""
    text = _LABEL_LISTS.sub(" ", expr)
    found: list[tuple[str, Matchers]] = []
    for m in _TOKEN.finditer(text):
        if m["bare"]:
            raise ValueError(f"a selector without a metric name in {expr!r}")
        name = m["name"]
        if name is None or name.lower() in _KEYWORDS:
            continue
        if text[m.end() :].lstrip().startswith("(") and not m["matchers"]:
            continue  # a function call
        matchers: Matchers = {
            label: (op, _UNESCAPE.sub(r"\1", value[1:-1]))
            for label, op, value in _MATCHER.findall(m["matchers"] or "")
        }
        found.append((name, matchers))
    return found


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, label names in
    by/without/on clauses and matchers, and numbers left out)."""
    return {name for name, _ in promql_selectors(expr)}


def rule_expressions(rule_groups: list[dict[str, Any]]) -> dict[str, str]:
    """Alert or record name -> expression, from a rule file's `groups`."""
    return {
        str(rule.get("alert") or rule.get("record")): str(rule["expr"])
        for group in rule_groups
        for rule in group["rules"]
    }


def dashboard_expressions(dashboard: dict[str, Any]) -> dict[str, str]:
    """`panel title / refId` -> expression of every query of a Grafana dashboard."""
    found: dict[str, str] = {}
    panels: list[dict[str, Any]] = list(dashboard.get("panels", []))
    while panels:
        panel = panels.pop()
        panels += panel.get("panels", [])  # a collapsed row holds its panels
        for target in panel.get("targets", []):
            found[f"{panel['title']} / {target['refId']}"] = str(target["expr"])
    return found


def check_rules(rules: Path) -> subprocess.CompletedProcess[str]:
    """`promtool check rules FILE`."""
    return subprocess.run(
        [str(ensure_promtool()), "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        check=False,
    )


def run_rule_tests(tests: Path) -> subprocess.CompletedProcess[str]:
    """`promtool test rules FILE` (its `rule_files` relative to it)."""
    return subprocess.run(
        [str(ensure_promtool()), "test", "rules", str(tests)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tests.parent,
    )

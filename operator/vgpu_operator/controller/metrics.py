"""The operator's own Prometheus metrics (named like the GPU Operator's). The API seam's own
(`vgpu_operator_api_errors_total`, `vgpu_operator_watch_restarts_total`, ...) live in `kubeapi`."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter(
    "vgpu_operator_reconciliations_total",
    "Policy reconciliations, by result",
    ["result"],
)
NODE_WRITES = Counter(
    "vgpu_operator_node_writes_total",
    "PATCHes the operator sent to Nodes, by outcome (ok, conflict, error)",
    ["outcome"],
)
NODES_MANAGED = Gauge(
    "vgpu_operator_nodes_managed",
    "Nodes owned by a policy, by policy and mode",
    ["policy", "mode"],
)
CONFLICTS = Gauge(
    "vgpu_operator_node_conflicts",
    "Nodes selected by several policies of equal top priority",
)
FINDINGS = Gauge(
    "vgpu_operator_findings",
    "Open consistency findings, by rule and severity",
    ["rule", "severity"],
)
RECONCILE_SECONDS = Histogram(
    "vgpu_operator_reconcile_duration_seconds",
    "Time to reconcile one policy across its nodes",
)
UNSCHEDULABLE_WARNINGS = Counter(
    "vgpu_operator_unschedulable_pod_warnings_total",
    "Warning Events posted on pods that can never be scheduled, by cause",
    ["cause"],
)

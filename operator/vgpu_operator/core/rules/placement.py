"""Would a DaemonSet's pod land on a node? nodeSelector, required node affinity and taints, with
Kubernetes' semantics (the DaemonSet controller adds tolerations for `node.kubernetes.io/*`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_operator.core.rules.snapshot import labels_of, name_of
from vgpu_operator.models.volcano_views import WorkloadView

BLOCKING = ("NoSchedule", "NoExecute")


def _expression(expr: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key = str(expr.get("key", ""))
    op = expr.get("operator")
    wanted = [str(v) for v in expr.get("values") or []]
    present = key in values
    if op == "In":
        return present and values[key] in wanted
    if op == "NotIn":
        return not present or values[key] not in wanted
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and wanted:
        try:
            have, limit = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return have > limit if op == "Gt" else have < limit
    return False


def _term(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches nothing
    node_labels = labels_of(node)
    node_fields = {"metadata.name": name_of(node)}
    return all(_expression(e, node_labels) for e in exprs) and all(
        _expression(f, node_fields) for f in fields
    )


def selector_problem(workload: WorkloadView, node: Mapping[str, Any]) -> str | None:
    """Why the pod cannot land on the node by selector/affinity, or None."""
    node_labels = labels_of(node)
    missing = {k: v for k, v in workload.node_selector.items() if node_labels.get(k) != v}
    if missing:
        wanted = ", ".join(f"{k}={v}" for k, v in sorted(missing.items()))
        return f"its nodeSelector needs {wanted}"
    required = (
        (workload.affinity.get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(_term(t, node) for t in terms):
        return "its required node affinity matches none of the node's labels"
    return None


def _tolerates(tol: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if tol.get("effect") and tol.get("effect") != taint.get("effect"):
        return False
    op = tol.get("operator") or "Equal"
    if not tol.get("key"):
        return op == "Exists"
    if tol.get("key") != taint.get("key"):
        return False
    return op == "Exists" or str(tol.get("value") or "") == str(taint.get("value") or "")


def untolerated(workload: WorkloadView, node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Blocking taints of the node the pod does not tolerate."""
    out = []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in BLOCKING:
            continue
        if str(taint.get("key", "")).startswith("node.kubernetes.io/"):
            continue  # the DaemonSet controller tolerates these itself
        if not any(_tolerates(t, taint) for t in workload.tolerations):
            out.append(taint)
    return out


def reaches(workload: WorkloadView, node: Mapping[str, Any]) -> bool:
    return selector_problem(workload, node) is None and not untolerated(workload, node)


def taint_text(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"

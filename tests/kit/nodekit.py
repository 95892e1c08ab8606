"""Builders for raw Nodes and VGPUNodePolicies, and a pure stand-in for the apiserver's PATCH."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.mergepatch import apply_merge_patch
from vgpu_operator.core.nodes.planner import ClusterPlan, plan_cluster
from vgpu_operator.core.nodes.validate import ParsedPolicy, parse_policy

GPU_LABELS: dict[str, dict[str, str]] = {
    "a100": {
        contract.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB",
        contract.GFD_COUNT: "8",
        contract.GFD_MIG_CAPABLE: "true",
    },
    "a30": {
        contract.GFD_PRODUCT: "NVIDIA-A30",
        contract.GFD_COUNT: "4",
        contract.GFD_MIG_CAPABLE: "true",
    },
    "h100": {
        contract.GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3",
        contract.GFD_COUNT: "8",
        contract.GFD_MIG_CAPABLE: "true",
    },
    "rtx4090": {
        contract.GFD_PRODUCT: "NVIDIA-GeForce-RTX-4090",
        contract.GFD_COUNT: "2",
        contract.GFD_MIG_CAPABLE: "false",
    },
    "cpu": {},
}


def node(
    name: str,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, Any]] = (),
    annotations: Mapping[str, str] | None = None,
    gpu: str = "a100",
    rv: int = 1,
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": str(rv),
            "labels": {"kubernetes.io/hostname": name, **GPU_LABELS[gpu], **(labels or {})},
        },
        "spec": {},
    }
    if annotations:
        raw["metadata"]["annotations"] = dict(annotations)
    if taints:
        raw["spec"]["taints"] = [dict(t) for t in taints]
    return raw


# hami-core on the nodes labelled pool=a
HAMI: dict[str, Any] = {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "a"}}}

# A selector for every node (a policy's may not be empty): no node has this label.
EVERY_NODE: dict[str, Any] = {
    "matchExpressions": [{"key": "vgpu-test/absent", "operator": "DoesNotExist"}]
}


def policy(
    name: str,
    spec: Mapping[str, Any],
    generation: int = 1,
    deleting: bool = False,
) -> dict[str, Any]:
    """A raw policy; without a nodeSelector in `spec` it selects every node."""
    metadata: dict[str, Any] = {"name": name, "generation": generation, "uid": f"uid-{name}"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": metadata,
        "spec": {"nodeSelector": EVERY_NODE, **spec},
    }


def parsed(policies: Iterable[Mapping[str, Any]]) -> list[ParsedPolicy]:
    return [parse_policy(p) for p in policies]


def apply(raw: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """What the apiserver does with a merge patch: check resourceVersion, merge, bump it."""
    sent = patch["metadata"]["resourceVersion"]
    assert sent == raw["metadata"]["resourceVersion"], "stale resourceVersion"
    out: dict[str, Any] = apply_merge_patch(raw, patch)
    out["metadata"]["resourceVersion"] = str(int(sent) + 1)
    if not out.get("spec", {}).get("taints"):
        out.setdefault("spec", {}).pop("taints", None)  # the apiserver omits an empty list
    for key in ("labels", "annotations"):
        if out["metadata"].get(key) == {}:
            del out["metadata"][key]
    return out


def reconcile(
    nodes: Sequence[Mapping[str, Any]], policies: Iterable[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], ClusterPlan]:
    """One level-based pass: plan every node and apply the patches. Returns the new nodes."""
    plan = plan_cluster([node_facts(n) for n in nodes], parsed(policies))
    out = []
    for raw in nodes:
        patch = plan.plans[raw["metadata"]["name"]].patch
        out.append(apply(raw, patch) if patch is not None else copy.deepcopy(dict(raw)))
    return out, plan


def converge(
    nodes: Sequence[Mapping[str, Any]], policies: Iterable[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], ClusterPlan]:
    """Reconcile once, then check a second pass writes nothing (one write per node)."""
    out, plan = reconcile(nodes, policies)
    again, second = reconcile(out, policies)
    assert second.patches == {}, f"not converged in one write: {second.patches}"
    assert again == out
    return out, plan


def labels_of(raw: Mapping[str, Any]) -> dict[str, str]:
    return dict(raw["metadata"].get("labels") or {})


def annotations_of(raw: Mapping[str, Any]) -> dict[str, str]:
    return dict(raw["metadata"].get("annotations") or {})


def taints_of(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(raw.get("spec", {}).get("taints") or [])


DEFAULT_TAINT = {
    "key": contract.DEFAULT_TAINT_KEY,
    "value": contract.DEFAULT_TAINT_VALUE,
    "effect": contract.DEFAULT_TAINT_EFFECT,
}

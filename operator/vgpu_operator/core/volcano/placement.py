"""Would a DaemonSet's pod land on a node? nodeSelector, required node affinity and taints, with
Kubernetes' semantics (the DaemonSet controller adds tolerations for `node.kubernetes.io/*`).
And the patch that makes the device plugin DaemonSets the operator places run exactly on the
nodes the node contract's `vgpu.volcano.sh/device-plugin` label marks for them
(`plan_placement`), one placement decision per plugin: HAMi's plugins as shipped have no
nodeSelector and tolerate none of the policies' taints
(Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:volcano-vgpu-device-plugin.yml), so they run on
static-MIG and CPU nodes and on none of the tainted vGPU nodes; the kubelet plugin of NVIDIA's DRA
driver selects no label of its own and an affinity on any NVIDIA GPU node
(kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/values.yaml
`kubeletPlugin.nodeSelector: {}`, `kubeletPlugin.affinity`), so it would run beside NVIDIA's and
HAMi's plugins on every GPU node.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.volcano.snapshot import (
    ClusterSnapshot,
    Obj,
    labels_of,
    meta,
    name_of,
    pod_done,
)
from vgpu_operator.models.node import Owned
from vgpu_operator.models.placement import PlacementRecord
from vgpu_operator.models.policy import Taint
from vgpu_operator.models.volcano_views import WorkloadView, workload_view

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


def reached(
    workload: WorkloadView, nodes: Iterable[Obj], pods: Iterable[Mapping[str, Any]]
) -> list[Obj]:
    """The `nodes` the DaemonSet places a pod on now, or holds a live pod on among `pods` (a
    NoSchedule taint set later keeps new pods off but evicts none). `doctor` lists every DaemonSet's
    pods (`core.rollout.gpu_pods.snapshot_pod`); the controller lists only its components' (so
    for another DaemonSet it sees the placement)."""
    running = {
        str((p.get("spec") or {}).get("nodeName"))
        for p in pods
        if workload.selects(p) and not pod_done(p)
    }
    return [n for n in nodes if name_of(n) in running or reaches(workload, n)]


def taint_text(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


# --- the placement of HAMi's device plugins ------------------------------------------------

SelectorKey = contract.LABEL_DEVICE_PLUGIN


@dataclass(frozen=True)
class Placement:
    """How one HAMi plugin DaemonSet must change to run exactly on the nodes labelled for it.

    `patch` is the strategic merge patch of the DaemonSet (None: nothing to change, or refused
    because the DaemonSet's own nodeSelector or required affinity excludes served nodes:
    `excluded`). The nodeSelector map is merged key by key; the tolerations list has no merge
    key in the Pod API, so it is the whole new list: every toleration the DaemonSet has, then
    the added ones."""

    namespace: str
    name: str
    plugin: contract.DevicePlugin
    served: tuple[str, ...]  # nodes labelled for this plugin
    patch: dict[str, Any] | None
    excluded: tuple[tuple[str, str], ...] = ()  # (node, why) the DaemonSet's own terms exclude
    unreached: tuple[tuple[str, str], ...] = ()  # served nodes it does not reach now (node, why)
    extra: tuple[str, ...] = ()  # nodes it reaches now that are not labelled for it
    still_unreached: tuple[tuple[str, str], ...] = ()  # after the patch (taints not ours)
    added_tolerations: tuple[dict[str, str], ...] = ()
    gpu_client: str | None = None  # "added" or "removed": the gpu.deploy.client selector

    @property
    def ref(self) -> tuple[str, str, str]:
        return ("DaemonSet", self.namespace, self.name)

    @property
    def adopted(self) -> bool:
        """The patch is not sent (yet): the DaemonSet already reaches every node labelled for
        its plugin (tolerating their taints) and no other, as a person placed it. The
        `plugin-placement` rule notes that it is right by chance; the operator patches once it
        is not. Never for the DRA kubelet plugin: its chart admits every NVIDIA GPU node, so
        only the vGPU pools' taints keep it off them, and a pool moving to dra loses its taint
        before its nodes are released (its pods would land on nodes still HAMi's)."""
        return (
            self.plugin != "dra"
            and self.patch is not None
            and not (self.unreached or self.extra or self.added_tolerations or self.gpu_client)
        )


def toleration_for(taint: Taint) -> dict[str, str]:
    if taint.value:
        return {
            "key": taint.key,
            "operator": "Equal",
            "value": taint.value,
            "effect": taint.effect,
        }
    return {"key": taint.key, "operator": "Exists", "effect": taint.effect}


def _policy_taints(node: Mapping[str, Any]) -> list[Taint]:
    """The blocking taints the operator put on the node (its ownership record)."""
    raw = (meta(node).get("annotations") or {}).get(contract.ANN_OWNED)
    try:
        owned = Owned.from_annotation(raw)
    except ValueError:
        return []
    return [t for t in owned.taints if t.effect in BLOCKING]


# --- the GPU Operator's GPU-client selector (begin) ---
# GPU Operator v26.7.0 labels GPU nodes `nvidia.com/gpu.deploy.client=true`
# (NVIDIA/gpu-operator@v26.7.0:controllers/state_manager.go `gpuStateLabels`); before a MIG change
# its mig-manager sets that label to `paused-for-mig-change` and waits until every DaemonSet pod
# on the node whose spec.nodeSelector has the key is gone (NVIDIA/mig-parted@v0.15.0:
# pkg/mig/reconfigure/reconfigure.go `shutdownKubernetesGPUClients`, `waitForPodsWithNodeSelector`:
# the nodeSelector only, not affinity). A plugin placed without the key keeps running through the
# change. The operator never writes the label; it selects on it only where every node the plugin
# serves carries it (elsewhere the selector would keep the plugin off nodes that need it), and
# takes its own selector off again when that stops being so.
GPU_CLIENT_LABEL = "nvidia.com/gpu.deploy.client"
GPU_CLIENT_VALUE = "true"
GPU_CLIENT_PAUSED = "paused-for-mig-change"


def client_selector(
    view: WorkloadView, served: Sequence[Mapping[str, Any]], record: PlacementRecord
) -> tuple[str | None, str | None]:
    """(the change: "added", "removed" or None; the nodeSelector value to write, None to take
    the key off). A selector on the key that the operator did not set is left as it is."""
    current = view.node_selector.get(GPU_CLIENT_LABEL)
    ours = current is not None and record.node_selector.get(GPU_CLIENT_LABEL) == current
    wanted = bool(served) and all(
        labels_of(n).get(GPU_CLIENT_LABEL) in (GPU_CLIENT_VALUE, GPU_CLIENT_PAUSED) for n in served
    )
    if wanted and current is None:
        return "added", GPU_CLIENT_VALUE
    if not wanted and ours:
        return "removed", None
    return None, None


def _unpaused(view: WorkloadView, node: Mapping[str, Any]) -> WorkloadView:
    """The view as it reaches a node mig-manager paused for a MIG change: the plugin leaves it on
    purpose then and comes back when the label is `true` again."""
    if labels_of(node).get(GPU_CLIENT_LABEL) != GPU_CLIENT_PAUSED:
        return view
    kept = {k: v for k, v in view.node_selector.items() if k != GPU_CLIENT_LABEL}
    return replace(view, node_selector=kept)


# --- the GPU Operator's GPU-client selector (end) ---


def _why_not(view: WorkloadView, node: Mapping[str, Any]) -> str | None:
    view = _unpaused(view, node)
    problem = selector_problem(view, node)
    if problem:
        return problem
    blocked = untolerated(view, node)
    if blocked:
        return "it does not tolerate " + ", ".join(taint_text(t) for t in blocked)
    return None


def plan_placement(
    daemonset: Mapping[str, Any], plugin: contract.DevicePlugin, nodes: Sequence[Mapping[str, Any]]
) -> Placement:
    """The patch that makes `daemonset` run exactly on the nodes whose
    `vgpu.volcano.sh/device-plugin` label is `plugin`: a nodeSelector on that label, and a
    toleration for each blocking taint the policies set on those nodes (custom nodeTaints
    included) that nothing in the DaemonSet tolerates yet. What the user set stays: their
    nodeSelector keys, affinity and tolerations. When their own nodeSelector or required node
    affinity excludes a served node, nothing is patched (`excluded` says why)."""
    view = workload_view(daemonset)
    served = [n for n in nodes if labels_of(n).get(SelectorKey) == plugin]
    base = Placement(
        namespace=view.namespace,
        name=view.name,
        plugin=plugin,
        served=tuple(sorted(name_of(n) for n in served)),
        patch=None,
    )
    unreached = tuple(
        sorted((name_of(n), why) for n in served if (why := _why_not(view, n)) is not None)
    )
    extra = tuple(
        sorted(
            name_of(n)
            for n in nodes
            if labels_of(n).get(SelectorKey) != plugin and reaches(view, n)
        )
    )
    client, client_value = client_selector(view, served, PlacementRecord.of(daemonset))
    dropped = {SelectorKey, GPU_CLIENT_LABEL} if client == "removed" else {SelectorKey}
    own = replace(
        view, node_selector={k: v for k, v in view.node_selector.items() if k not in dropped}
    )
    excluded = tuple(
        sorted(
            (name_of(n), p)
            for n in served
            if (p := selector_problem(_unpaused(own, n), n)) is not None
        )
    )
    if excluded:
        return replace(base, excluded=excluded, unreached=unreached, extra=extra)
    tolerations = [dict(t) for t in view.tolerations]
    added: list[dict[str, str]] = []
    needed = {(t.key, t.effect, t.value): t for n in served for t in _policy_taints(n)}
    for _, taint in sorted(needed.items()):
        as_dict = {"key": taint.key, "value": taint.value, "effect": taint.effect}
        if any(_tolerates(t, as_dict) for t in tolerations):
            continue
        tolerations.append(toleration_for(taint))
        added.append(toleration_for(taint))
    spec: dict[str, Any] = {}
    selector: dict[str, str | None] = {}
    if view.node_selector.get(SelectorKey) != plugin:
        selector[SelectorKey] = plugin
    if client is not None:
        selector[GPU_CLIENT_LABEL] = client_value
    if selector:
        spec["nodeSelector"] = selector
    if added:
        spec["tolerations"] = tolerations
    merged = {**view.node_selector, **selector, SelectorKey: plugin}
    after = replace(
        view,
        node_selector={k: v for k, v in merged.items() if v is not None},
        tolerations=tuple(tolerations),
    )
    still = tuple(
        sorted((name_of(n), why) for n in served if (why := _why_not(after, n)) is not None)
    )
    return replace(
        base,
        patch={"spec": {"template": {"spec": spec}}} if spec else None,
        unreached=unreached,
        extra=extra,
        still_unreached=still,
        added_tolerations=tuple(added),
        gpu_client=client,
    )


def placement_patch_text(p: Placement) -> str:
    """The patch as a person applies it (`kubectl patch --type=strategic`)."""
    return json.dumps(p.patch, separators=(",", ":"), sort_keys=True)


def placements(s: ClusterSnapshot) -> list[Placement]:
    """The placement of each plugin DaemonSet the operator keeps: HAMi's vGPU plugin's once
    the operator manages nodes, the Ascend plugin's too when Ascend vNPU is enabled, the DRA
    driver's kubelet plugin's with the operator config's `dra` (that installation serves the dra
    pools only, so it runs nowhere while there are none). Nothing before any node is managed (a
    nodeSelector on a label no node has yet would stop the plugin everywhere)."""
    if not any(contract.ANN_CONFIG in (meta(n).get("annotations") or {}) for n in s.nodes):
        return []
    targets: list[tuple[str, str, contract.DevicePlugin]] = [
        (s.config.device_plugin.namespace, s.config.device_plugin.name, "hami")
    ]
    if s.config.ascend_vnpu.enabled:
        ref = s.config.ascend_device_plugin
        targets.append((ref.namespace, ref.name, "ascend"))
    if s.config.dra is not None:
        dra = s.config.dra.kubelet_plugin_daemon_set
        targets.append((dra.namespace, dra.name, "dra"))
    out = []
    for namespace, name, plugin in targets:
        ds = s.daemonset(namespace, name)
        if ds is not None:
            out.append(plan_placement(ds, plugin, s.nodes))
    return out

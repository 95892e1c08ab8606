"""The workload part of the write plan (`core.volcano.writes`): one strategic merge PATCH per
HAMi plugin DaemonSet (its args and its placement, with the placement record and the
resourceVersion), due when what the plugin reads has settled and the restart limits allow it;
then the restarts the planner asks for on the cluster as the writes leave it. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.nodes.status import change_stamp
from vgpu_operator.core.volcano.placement import Placement, placements
from vgpu_operator.core.volcano.plugin_identity import foreign_vgpu_plugin
from vgpu_operator.core.volcano.render import render_plugin_args
from vgpu_operator.core.volcano.restarts import (
    RESTARTED_AT,
    RestartAction,
    RestartSettings,
    daemonset_key,
    plan_restarts,
    record,
    restart_inputs,
    restarted_at,
    rollout_due,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, meta, name_of, pod_done
from vgpu_operator.core.volcano.times import data_changed_at, known_after
from vgpu_operator.core.volcano.write_plan import ConfigMapWrite, Restart, WorkloadPatch, WritePlan
from vgpu_operator.models.placement import PlacementRecord
from vgpu_operator.models.volcano_views import workload_view

Obj = dict[str, Any]


def _placement_what(p: Placement) -> str:
    parts = []
    spec = p.patch["spec"]["template"]["spec"] if p.patch is not None else {}
    for key, value in (spec.get("nodeSelector") or {}).items():  # the plugin's; gpu.deploy.client
        parts.append(
            f"nodeSelector {key}={value}" if value is not None else f"no nodeSelector {key}"
        )
    for t in p.added_tolerations:
        value = f"={t['value']}" if t.get("value") else ""
        parts.append(f"toleration {t['key']}{value}:{t['effect']}")
    return "placement: " + ", ".join(parts)


def inputs_settled(
    s: ClusterSnapshot, written: list[ConfigMapWrite], settings: RestartSettings, now: datetime
) -> datetime:
    """When the plugin pods a rollout starts now are sure to read the current configuration: a
    `settle` after the last change of what the plugin reads (this plan's ConfigMap writes
    included), and never in the second of that change (pod start times are whole seconds:
    `core.volcano.restarts`). A DaemonSet PATCH waits for it, as the planner's restarts do."""
    inputs = restart_inputs(s)
    changed = [t for t in (inputs.plugin_reads_changed, *inputs.node_entries_changed.values()) if t]
    # The node configs' own last change too: an entry taken over unchanged keeps an older stamp
    # of its own, while the ConfigMap the plugin pods mount changed just now.
    for ref in (s.config.node_config, s.config.ascend_node_config):
        cm = s.configmap(*ref.ref())
        if cm is not None and (at := data_changed_at(cm)) is not None:
            changed.append(at)
    scheduler_conf = s.config.scheduler.config_map.ref()
    if any((w.namespace, w.name) != scheduler_conf for w in written):
        changed.append(now)  # a ConfigMap a plugin reads (the scheduler conf is not one)
    return max(now, known_after(max(changed)) + settings.settle) if changed else now


def _strategic(template_spec: Mapping[str, Any], patch: Mapping[str, Any]) -> Obj:
    """A pod template spec after the operator's strategic merge patch: nodeSelector merged,
    tolerations replaced (no merge key), containers merged by name."""
    out = dict(template_spec)
    for key, value in patch.items():
        if key == "nodeSelector":  # a null value takes the key off
            merged = {**(out.get(key) or {}), **value}
            out[key] = {k: v for k, v in merged.items() if v is not None}
        elif key == "containers":
            by_name = {c["name"]: c for c in value}
            out[key] = [
                {**c, **by_name.get(c.get("name"), {})} for c in out.get("containers") or []
            ]
        else:
            out[key] = value
    return out


@dataclass
class _Patch:
    raw: Obj
    spec: Obj
    what: list[str]
    args: bool = False
    due: datetime | None = None
    record: PlacementRecord | None = None


def workload_patches(
    s: ClusterSnapshot,
    written: list[ConfigMapWrite],
    ledger: Mapping[str, datetime],
    settings: RestartSettings,
    now: datetime,
) -> tuple[ClusterSnapshot, list[WorkloadPatch]]:
    """One PATCH per plugin DaemonSet: its args (vGPU plugin <= v1.11) and its placement. Both
    change the pod template, so its pods restart: the PATCH waits until what the plugin reads
    has settled, and a placement change also for the restart limits (when restarts are not
    allowed it is not planned: the rule `plugin-placement` reports it). A DaemonSet that is not
    HAMi's plugin is never patched (rule `plugin-not-hami`)."""
    settled = inputs_settled(s, written, settings, now)
    patches: dict[tuple[str, str], _Patch] = {}
    ref = s.config.device_plugin
    foreign = foreign_vgpu_plugin(s)
    ds = s.daemonset(ref.namespace, ref.name) if foreign is None else None
    args = render_plugin_args(ds, s.config) if ds is not None else None
    if ds is not None and args is not None:
        patches[(ref.namespace, ref.name)] = _Patch(
            ds,
            {"containers": [{"name": args.container, "args": args.args}]},
            ["args " + " ".join(args.args)],
            args=True,
            due=settled,
        )
    for p in placements(s):
        raw = s.daemonset(p.namespace, p.name)
        if p.patch is None or p.excluded or raw is None or p.adopted:
            continue  # (adopted: already runs exactly there, core.volcano.config_adoption)
        if p.plugin == "hami" and (p.namespace, p.name) == foreign:
            continue
        due = rollout_due(
            ledger, daemonset_key(p.namespace, p.name), restarted_at(raw), settings, now
        )
        if due is None:
            continue  # restarts are not allowed: the rule reports the patch
        patch = patches.setdefault((p.namespace, p.name), _Patch(raw, {}, []))
        placed = p.patch["spec"]["template"]["spec"]
        patch.spec.update(placed)
        patch.what.append(_placement_what(p))
        # what this placement sets, recorded on the DaemonSet for `cleanup` to take off exactly
        patch.record = PlacementRecord.of(raw).adding(
            placed.get("nodeSelector") or {}, p.added_tolerations
        )
        patch.due = max(due, settled, patch.due or now)
    out: list[WorkloadPatch] = []
    daemonsets = list(s.daemonsets)
    for (namespace, name), patch in patches.items():
        metadata: Obj = {}
        if patch.record is not None:
            metadata["annotations"] = {contract.ANN_PLACEMENT: patch.record.to_annotation()}
        metadata["resourceVersion"] = meta(patch.raw).get("resourceVersion")
        body = {"spec": {"template": {"spec": patch.spec}}, "metadata": metadata}
        due = patch.due if patch.due is not None and patch.due > now else None
        uid = str(meta(patch.raw).get("uid") or "")
        out.append(
            WorkloadPatch(
                "DaemonSet", namespace, name, tuple(patch.what), body, patch.args, due, uid
            )
        )
        for i, ds in enumerate(daemonsets):
            if (meta(ds).get("namespace"), name_of(ds)) == (namespace, name):
                template = dict(ds["spec"]["template"])
                template["spec"] = _strategic(template.get("spec") or {}, patch.spec)
                daemonsets[i] = {**ds, "spec": {**ds["spec"], "template": template}}
    return replace(s, daemonsets=daemonsets), out


# --- 3. restarts -----------------------------------------------------------------------------


def on_delete_pods(s: ClusterSnapshot, action: RestartAction) -> list[str]:
    """The live pods of a DaemonSet with `updateStrategy: OnDelete` (a template change does not
    replace them: they have to be deleted); empty for any other workload."""
    if action.kind != "rollout-daemonset":
        return []
    raw = s.daemonset(action.namespace, action.name)
    strategy = (((raw or {}).get("spec") or {}).get("updateStrategy") or {}).get("type")
    if raw is None or strategy != "OnDelete":
        return []
    view = workload_view(raw)
    return [str(meta(p).get("name")) for p in s.pods_of(view) if not pod_done(p)]


def restart_body(now: datetime) -> Obj:
    """A rollout restart, as `kubectl rollout restart` does it: the pod template's restartedAt."""
    restarted = {RESTARTED_AT: change_stamp(now)}
    return {"spec": {"template": {"metadata": {"annotations": restarted}}}}


def restarts(
    s: ClusterSnapshot,
    patches: list[WorkloadPatch],
    ledger: Mapping[str, datetime],
    settings: RestartSettings,
    now: datetime,
) -> list[Restart]:
    """What must restart to re-read what changed, on the cluster as the writes leave it. A
    DaemonSet PATCH due now counts as its restart; one that waits restarts its pods when it
    goes, so no other restart of them is planned meanwhile."""
    rolled = [
        RestartAction(
            "rollout-daemonset", w.namespace, w.name, daemonset_key(w.namespace, w.name), ""
        )
        for w in patches
        if w.due is None
    ]
    planned = plan_restarts(restart_inputs(s), record(ledger, rolled, now), settings, now)
    pending = WritePlan(workloads=tuple(patches)).pending(now)
    plugin = (s.config.device_plugin.namespace, s.config.device_plugin.name)
    out: list[Restart] = []
    for action in planned.actions:
        if (action.kind == "rollout-daemonset" and (action.namespace, action.name) in pending) or (
            action.kind == "delete-pod" and plugin in pending
        ):
            continue  # the DaemonSet's own pending template change restarts those pods
        body = None if action.kind == "delete-pod" else restart_body(now)
        out.append(Restart(action, None, body, tuple(on_delete_pods(s, action))))
    out += [Restart(d.action, d.until) for d in planned.deferred]
    return out

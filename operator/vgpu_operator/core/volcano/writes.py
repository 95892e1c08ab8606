"""The configuration part of a plan (`core.plan`): the ConfigMaps the operator renders from the
nodes' released configurations, as unified diffs, and the one PATCH per HAMi plugin DaemonSet
(its args and its placement), each replayed on the snapshot so what follows (restarts, rules)
sees the cluster after them. The same renderers and in the same order as `enforce` mode
(`controller.volcano_writes`, `controller.workload_writes`). Pure.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.volcano.placement import placements
from vgpu_operator.core.volcano.plugin_identity import foreign_vgpu_plugin
from vgpu_operator.core.volcano.render import (
    Rendered,
    RenderError,
    render_ascend_node_config,
    render_device_config,
    render_node_config,
    render_plugin_args,
    render_scheduler_conf,
    vnpus_section,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, annotations_of, meta, name_of
from vgpu_operator.models.config_refs import ConfigMapRef
from vgpu_operator.models.node import NodeConfig

Obj = dict[str, Any]


@dataclass(frozen=True)
class ConfigMapChange:
    namespace: str
    name: str
    create: bool
    diff: str  # unified diff of every data key that changes
    entries: tuple[str, ...] = ()  # node-config entries that change


@dataclass(frozen=True)
class WorkloadPatch:
    kind: str
    namespace: str
    name: str
    what: tuple[str, ...]
    patch: Mapping[str, Any]


def _diff(before: Mapping[str, str], after: Mapping[str, str], ref: str) -> str:
    out: list[str] = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key, ""), after.get(key, "")
        if old == new:
            continue
        out.extend(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                f"{ref}:{key} (now)",
                f"{ref}:{key} (planned)",
            )
        )
    return "".join(line if line.endswith("\n") else line + "\n" for line in out)


def _rendered(render: Callable[[], Rendered], notes: list[str], what: str) -> Rendered | None:
    try:
        rendered = render()
    except RenderError as exc:
        notes.append(f"{what} is not rendered: {exc} (the operator leaves it as it is)")
        return None
    return rendered if rendered.changed else None


def _with_configmap(
    s: ClusterSnapshot, ref: ConfigMapRef, cm: Obj | None, rendered: Rendered
) -> ClusterSnapshot:
    new: Obj = dict(cm) if cm is not None else {"metadata": {"namespace": ref.namespace}}
    m = dict(new.get("metadata") or {})
    m.update(name=ref.name, namespace=ref.namespace)
    m["annotations"] = {**annotations_of(new), **rendered.annotations}
    new.update(metadata=m, data=dict(rendered.data))
    rest = [c for c in s.configmaps if c is not cm]
    return replace(s, configmaps=[*rest, new])


def _released(s: ClusterSnapshot) -> dict[str, NodeConfig | None]:
    return {name_of(n): s.released(n) for n in s.nodes if contract.ANN_CONFIG in annotations_of(n)}


def configmaps(
    s: ClusterSnapshot, stamp: str, notes: list[str]
) -> tuple[ClusterSnapshot, list[ConfigMapChange]]:
    """Every ConfigMap the operator renders, in the order `enforce` writes them."""
    cfg = s.config
    out: list[ConfigMapChange] = []
    src = cfg.ascend_vnpu.scheduler_device
    vnpus = vnpus_section(s.configmap(*src.ref()), src.key) if cfg.ascend_vnpu.enabled else None
    steps: list[tuple[ConfigMapRef, Callable[[Obj | None], Rendered]]] = [
        (
            cfg.device_config,
            lambda cm: render_device_config(
                cm, cfg, stamp, mig_models=s.mig_gpu_names, reported=s.reported_models, vnpus=vnpus
            ),
        ),
        (
            cfg.node_config,
            lambda cm: partial(render_node_config, gpus=s.gpus_by_node)(
                cm, _released(s), cfg, stamp
            ),
        ),
        (
            cfg.ascend_node_config,
            lambda cm: partial(render_ascend_node_config, hami_vnpu_core=s.hami_vnpu_core)(
                cm, _released(s), cfg, stamp
            ),
        ),
    ]
    if s.scheduler_cm is not None:
        steps.append((cfg.scheduler.config_map, lambda cm: render_scheduler_conf(cm, cfg, stamp)))
    for ref, render in steps:
        cm = s.configmap(*ref.ref())
        rendered = _rendered(partial(render, cm), notes, f"{ref.namespace}/{ref.name}")
        if rendered is None:
            continue
        before = dict((cm or {}).get("data") or {})
        out.append(
            ConfigMapChange(
                ref.namespace,
                ref.name,
                cm is None,
                _diff(before, rendered.data, f"{ref.namespace}/{ref.name}"),
                tuple(sorted(rendered.changed_entries)),
            )
        )
        s = _with_configmap(s, ref, cm, rendered)
    return s, out


def _strategic(template_spec: Mapping[str, Any], patch: Mapping[str, Any]) -> Obj:
    """A pod template spec after the operator's strategic merge patch: nodeSelector merged,
    tolerations replaced (no merge key), containers merged by name."""
    out = dict(template_spec)
    for key, value in patch.items():
        if key == "nodeSelector":
            out[key] = {**(out.get(key) or {}), **value}
        elif key == "containers":
            by_name = {c["name"]: c for c in value}
            out[key] = [
                {**c, **by_name.get(c.get("name"), {})} for c in out.get("containers") or []
            ]
        else:
            out[key] = value
    return out


def daemonsets(s: ClusterSnapshot) -> tuple[ClusterSnapshot, list[WorkloadPatch]]:
    """One PATCH per plugin DaemonSet: its args and its placement (as `enforce` sends it)."""
    specs: dict[tuple[str, str], tuple[Obj, list[str]]] = {}
    ref = s.config.device_plugin
    foreign = foreign_vgpu_plugin(s)  # not HAMi's plugin: not patched (rule plugin-not-hami)
    ds = s.daemonset(ref.namespace, ref.name) if foreign is None else None
    if ds is not None:
        args = render_plugin_args(ds, s.config)
        if args is not None:
            specs[(ref.namespace, ref.name)] = (
                {"containers": [{"name": args.container, "args": args.args}]},
                ["args " + " ".join(args.args)],
            )
    for p in placements(s):
        if p.patch is None or p.excluded or p.adopted:
            continue  # (adopted: already runs exactly there, core.volcano.config_adoption)
        if p.plugin == "hami" and (p.namespace, p.name) == foreign:
            continue
        spec, what = specs.setdefault((p.namespace, p.name), ({}, []))
        spec.update(p.patch["spec"]["template"]["spec"])
        added = [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in p.added_tolerations]
        what.append(
            f"placement: nodeSelector {contract.LABEL_DEVICE_PLUGIN}={p.plugin}"
            + "".join(f", toleration {t}" for t in added)
        )
    out: list[WorkloadPatch] = []
    daemonsets = list(s.daemonsets)
    for (namespace, name), (spec, what) in sorted(specs.items()):
        body = {"spec": {"template": {"spec": spec}}}
        out.append(WorkloadPatch("DaemonSet", namespace, name, tuple(what), body))
        for i, ds in enumerate(daemonsets):
            if (meta(ds).get("namespace"), name_of(ds)) == (namespace, name):
                template = dict(ds["spec"]["template"])
                template["spec"] = _strategic(template.get("spec") or {}, spec)
                daemonsets[i] = {**ds, "spec": {**ds["spec"], "template": template}}
    return replace(s, daemonsets=daemonsets), out

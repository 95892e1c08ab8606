"""The ConfigMap part of the write plan (`core.volcano.writes`): every ConfigMap the operator
renders (device config, node configs, scheduler conf), in the order enforce writes them, each a
create or a JSON merge PATCH with its unified diff, replayed on the snapshot. Pure."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.volcano.component_versions import scheduler_reads_dra_argument
from vgpu_operator.core.volcano.render import (
    Rendered,
    RenderError,
    render_ascend_node_config,
    render_device_config,
    render_node_config,
    render_scheduler_conf,
    vnpus_section,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, annotations_of, meta, name_of
from vgpu_operator.core.volcano.write_plan import MANAGED_BY, ConfigMapWrite
from vgpu_operator.models.config_refs import ConfigMapRef
from vgpu_operator.models.node import NodeConfig

Obj = dict[str, Any]


def released_configs(s: ClusterSnapshot) -> dict[str, NodeConfig | None]:
    """{node: released configuration} of every node the operator manages."""
    return {name_of(n): s.released(n) for n in s.nodes if contract.ANN_CONFIG in annotations_of(n)}


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
    """The rendered ConfigMap when it changed; None (nothing written) when it did not, or when
    the renderer could not read the current one: the `payload-readable` and `*-rendered`
    rules report that with the object and the key. Nothing a ConfigMap holds may fail a pass."""
    try:
        rendered = render()
    except RenderError as exc:
        notes.append(f"{what} is not rendered: {exc} (the operator leaves it as it is)")
        return None
    except Exception as exc:  # a renderer's bug must not stop the other writes and the rules
        notes.append(f"{what} is not rendered: {type(exc).__name__}: {exc}")
        return None
    return rendered if rendered.changed else None


def _body(ref: ConfigMapRef, cm: Obj | None, rendered: Rendered) -> Obj:
    if cm is None:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": ref.name,
                "namespace": ref.namespace,
                "labels": dict(MANAGED_BY),
                "annotations": dict(rendered.annotations),
            },
            "data": dict(rendered.data),
        }
    return {
        "metadata": {
            "resourceVersion": meta(cm).get("resourceVersion"),
            "annotations": dict(rendered.annotations),
        },
        "data": dict(rendered.data),
    }


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


def scheduler_needs_dra(s: ClusterSnapshot) -> bool:
    """Whether the scheduler conf must switch kube-scheduler's DRA plugin on in `predicates`: a
    node is in a dra pool or on its way there, and the scheduler reads the switch (Volcano <=
    v1.14.x), or its version is not known (the argument is harmless where it is not read; left
    out where it is, no claim of a Volcano job would ever be allocated)."""
    if not s.dra_nodes:
        return False
    version = s.scheduler_container.version if s.scheduler_container else None
    return version is None or scheduler_reads_dra_argument(version)


def configmaps(
    s: ClusterSnapshot, stamp: str, notes: list[str]
) -> tuple[ClusterSnapshot, list[ConfigMapWrite]]:
    """Every ConfigMap the operator renders, in the order enforce writes them, each replayed
    on the snapshot so what follows sees the cluster after it."""
    cfg = s.config
    released = released_configs(s)
    src = cfg.ascend_vnpu.scheduler_device
    vnpus = vnpus_section(s.configmap(*src.ref()), src.key) if cfg.ascend_vnpu.enabled else None
    steps: list[tuple[ConfigMapRef, Callable[[Obj | None], Rendered], str | None]] = [
        (
            cfg.device_config,
            lambda cm: render_device_config(
                cm,
                cfg,
                stamp,
                mig_models=s.mig_gpu_names,
                reported=s.reported_models,
                vnpus=vnpus,
                scheduler_version=s.scheduler_container.version if s.scheduler_container else None,
            ),
            "device config",
        ),
        (
            cfg.node_config,
            lambda cm: render_node_config(cm, released, cfg, stamp, gpus=s.gpus_by_node),
            None,
        ),
        (
            cfg.ascend_node_config,
            lambda cm: render_ascend_node_config(
                cm, released, cfg, stamp, hami_vnpu_core=s.hami_vnpu_core
            ),
            None,
        ),
    ]
    if s.scheduler_cm is not None:
        dra = scheduler_needs_dra(s)
        steps.append(
            (
                cfg.scheduler.config_map,
                lambda cm: render_scheduler_conf(cm, cfg, stamp, dra=dra),
                "deviceshare and predicates arguments" if dra else "deviceshare arguments",
            )
        )
    out: list[ConfigMapWrite] = []
    for ref, render, what in steps:
        cm = s.configmap(*ref.ref())
        rendered = _rendered(partial(render, cm), notes, f"{ref.namespace}/{ref.name}")
        if rendered is None:
            continue
        entries = tuple(sorted(rendered.changed_entries))
        before = dict((cm or {}).get("data") or {})
        out.append(
            ConfigMapWrite(
                ref.namespace,
                ref.name,
                cm is None,
                _body(ref, cm, rendered),
                _diff(before, rendered.data, f"{ref.namespace}/{ref.name}"),
                entries,
                what or f"entries {', '.join(entries) or 'ownership'}",
            )
        )
        s = _with_configmap(s, ref, cm, rendered)
    return s, out

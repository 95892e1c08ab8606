"""What the rollout waits for around the node's device plugin, from the configuration
reconciler's last snapshot (`controller.volcano`). Pure.

Two waits make the plugin restart exactly once in a disruptive change:
- Pausing -> Applying: the plugin pod has left the node (its DaemonSet no longer selects the node
  once the placement label is off; a terminating pod still holds the devices). A reading taken
  before the pause began says nothing about it: only a later one counts.
- Applying -> Verifying (the resume): the node-config entry the plugin reads at start
  (`volcano-vgpu-node-config`, `hami-device-node-config`) renders the released configuration.
  Resumed earlier, the new plugin pod would read the old entry, and the configuration pass that
  rewrites it would restart the pod a second time.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from vgpu_operator import contract
from vgpu_operator.core.volcano.render.common import RenderError
from vgpu_operator.core.volcano.render.node_config import (
    owned_entries,
    render_ascend_node_config,
    render_node_config,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, annotations_of, name_of
from vgpu_operator.core.volcano.times import known_after, parse_time
from vgpu_operator.models.node import NodeConfig


@dataclass(frozen=True)
class PluginReading:
    """What the configuration reconciler last read for one node, at `read_at`.
    `running`: a device-plugin pod is on the node (a terminating one too).
    `entry`: the released configuration (`vgpu.volcano.sh/config` text) that the node's
    node-config entry renders; None when the entry does not render the configuration released
    then (not rewritten yet, or the ConfigMap cannot be rendered).
    `enforced`: the operator writes the entries (mode `enforce`); otherwise nobody will, and the
    resume does not wait for them. `served`: a device-plugin DaemonSet exists (none: no plugin
    pod can come to the node and nothing reads the entry; neither is waited for)."""

    read_at: datetime
    running: bool
    entry: str | None
    enforced: bool = True
    served: bool = True
    # When the entry last changed (the ConfigMap's `vgpu.volcano.sh/owned-entries`): a plugin
    # pod that starts in that second counts as having read the old entry and is restarted
    # (`core.volcano.snapshot.started_before`), so the resume waits for the next second.
    entry_changed: datetime | None = None


def _same(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    try:
        ca, cb = NodeConfig.from_annotation(a), NodeConfig.from_annotation(b)
    except ValueError:
        return False
    return ca is not None and cb is not None and ca.to_annotation() == cb.to_annotation()


def plugin_left(reading: PluginReading | None, since: datetime) -> bool:
    """The plugin pod is gone from the node, as read after `since` (the pause). No reading (no
    configuration reconciler runs): nothing to wait for."""
    if reading is None or not reading.served:
        return True
    return reading.read_at >= since and not reading.running


def resume_at(reading: PluginReading | None) -> datetime | None:
    """The earliest time a plugin pod started then counts as having read the entry."""
    if reading is None or reading.entry_changed is None:
        return None
    return known_after(reading.entry_changed)


def entry_rendered(reading: PluginReading | None, released: str) -> bool:
    """The node-config entry renders `released` (no reading, or the operator does not write
    entries: nothing to wait for)."""
    if reading is None or not reading.enforced or not reading.served:
        return True
    return _same(reading.entry, released)


def plugin_readings(
    snapshot: ClusterSnapshot, read_at: datetime, nodes: Collection[str], *, enforced: bool
) -> dict[str, PluginReading]:
    """The readings of `nodes` from one snapshot (read at `read_at`)."""
    if not nodes:
        return {}
    running: set[str] = set()
    plugins = [
        w for w in (snapshot.plugin, snapshot.ascend_plugin, snapshot.dra_plugin) if w is not None
    ]
    for workload in plugins:
        for pod in snapshot.pods_of(workload):
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                running.add(str(node))  # terminating: still holds the devices
    cfg = snapshot.config
    texts = {name_of(n): annotations_of(n).get(contract.ANN_CONFIG) for n in snapshot.nodes}
    changed_at = {
        node: when
        for ref in (cfg.ascend_node_config, cfg.node_config)  # a vGPU entry wins
        for node, stamp in owned_entries(snapshot.configmap(ref.namespace, ref.name)).items()
        if (when := parse_time(stamp)) is not None
    }
    released = {name_of(n): rc for n in snapshot.nodes if (rc := snapshot.released(n))}
    # as the rule `node-config-rendered` renders them: an entry that would change is not current
    vgpu = snapshot.configmap(cfg.node_config.namespace, cfg.node_config.name)
    ascend = snapshot.configmap(cfg.ascend_node_config.namespace, cfg.ascend_node_config.name)
    changed: set[str] = set()
    unrenderable = False
    try:
        changed |= render_node_config(
            vgpu, released, cfg, "", gpus=snapshot.gpus_by_node
        ).changed_entries
        changed |= render_ascend_node_config(
            ascend, released, cfg, "", hami_vnpu_core=snapshot.hami_vnpu_core
        ).changed_entries
    except RenderError:
        unrenderable = True
    return {
        name: PluginReading(
            read_at=read_at,
            running=name in running,
            entry=None if unrenderable or name in changed else texts.get(name),
            enforced=enforced,
            served=bool(plugins),
            entry_changed=changed_at.get(name),
        )
        for name in nodes
    }

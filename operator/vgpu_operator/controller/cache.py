"""The controller's read-only view of the cluster: made once (`controller.app`), handed to both
reconcilers and the rollout.

    the informers (controller.informer): Nodes, the GPU pods per node (controller.pods), the
    ResourceClaims' drivers (controller.claims), DaemonSets, the configured ConfigMaps and the
    scheduler Deployment (by name); Kopf's policy index (controller.policies)
      -> ClusterCache: what the passes read of them; `wait_*` until what a reader needs is listed
    the configuration reconciler's passes (controller.volcano)
      -> ConfigurationState: the last pass's snapshot, when its reading began, its findings

The informers fill the cache and the configuration reconciler publishes its state; the other
parts only read them. Nothing here writes to the cluster or asks for work.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vgpu_operator.controller.claims import ClaimIndex
from vgpu_operator.controller.informer import Informer
from vgpu_operator.controller.kept import IndexedNode, PolicyEntry
from vgpu_operator.controller.pods import PodIndex
from vgpu_operator.controller.policies import PolicyCache
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.volcano.plugin_refusal import PluginNodeValues, plugin_node_values
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.findings import Finding
from vgpu_operator.waiting import wait_set

log = logging.getLogger("vgpu_operator.controller")

DAEMONSETS_WAIT = 30.0  # seconds the first node pass waits for the DaemonSet listing

Obj = dict[str, Any]


@dataclass
class ClusterCache:
    """What the watches hold, as the passes read it (one event loop: no lock). The DaemonSets
    and the named objects are watched only where a configuration reconciler runs (None and []
    otherwise)."""

    config: OperatorConfig
    nodes: Informer[IndexedNode]
    policies: PolicyCache  # Kopf's index (controller.handlers)
    pods: PodIndex
    claims: ClaimIndex  # which driver allocated a pod's ResourceClaim
    # Held by namespace/name: the plugin is found by both, and a same-named DaemonSet in
    # another namespace must not replace it.
    daemonsets: Informer[Obj] | None = None
    named: list[Informer[str]] = field(default_factory=list)

    # -- the policy reconciler --------------------------------------------------------------
    def snapshot(self) -> tuple[dict[str, NodeFacts], dict[str, PolicyEntry]]:
        """Every Node's facts and every policy, as held now."""
        return {k: v.facts for k, v in self.nodes.items.items()}, dict(self.policies.items)

    def node_uid(self, name: str) -> str:
        node = self.nodes.items.get(name)
        return node.uid if node else ""

    def node_object(self, name: str) -> Obj | None:
        """The compact Node (the rollout reads the plugin's registration on it)."""
        node = self.nodes.items.get(name)
        return node.obj if node else None

    def plugin_daemonset(self) -> Obj | None:
        """The configured vGPU plugin DaemonSet, from the watch (None: not there, not watched)."""
        if self.daemonsets is None:
            return None
        ref = self.config.device_plugin
        return self.daemonsets.items.get(f"{ref.namespace}/{ref.name}")

    def plugin_values(self) -> PluginNodeValues | None:
        """What the configured HAMi plugin registers whatever a node's entry says (≤ v1.11;
        None: it applies per-node values, or is unknown): policies it cannot apply are refused
        (`core.volcano.plugin_refusal`)."""
        return plugin_node_values(self.plugin_daemonset(), self.config)

    # -- the rollout ------------------------------------------------------------------------
    def gpu_consumers(self, node: str) -> list[Obj] | None:
        """The GPU consumers on a node, for the drain (a claim by the claim index now: absent
        or not synced, it counts); None until the pod index is synced."""
        if not self.pods.synced.is_set():
            return None
        return self.pods.consumers_on(node, self.claims.drivers())

    # -- the configuration reconciler: None until listed (a pass then lists them itself) ----
    def node_objects(self) -> list[Obj] | None:
        """Every Node as the configuration rules read it."""
        if not self.nodes.synced.is_set():
            return None
        return [v.obj for v in self.nodes.items.values()]

    def gpu_pods(self) -> list[Obj] | None:
        return self.pods.pods() if self.pods.synced.is_set() else None

    def daemonset_objects(self) -> list[Obj] | None:
        if self.daemonsets is None or not self.daemonsets.synced.is_set():
            return None
        return list(self.daemonsets.items.values())

    # -- listed -----------------------------------------------------------------------------
    async def wait_synced(self) -> None:
        """Until the node watch has delivered its first listing and Kopf's policy index holds
        every policy: what they hold is the cluster."""
        await self.nodes.synced.wait()
        await self.policies.synced.wait()

    async def wait_reconcile_sources(self) -> None:
        """`wait_synced`, and the DaemonSets when they are watched: the plugin's version and
        flags decide which policies are refused (`core.volcano.plugin_refusal`). A DaemonSet
        listing that does not come (RBAC, an apiserver error) must not stop the node writes:
        after `DAEMONSETS_WAIT` seconds the passes start without it (nothing is refused then;
        a change the plugin cannot apply fails its first node, `core.rollout.plugin`)."""
        await self.wait_synced()
        if self.daemonsets is not None and not await wait_set(
            self.daemonsets.synced, DAEMONSETS_WAIT
        ):
            log.warning(
                "no DaemonSet listing after %.0fs: reconciling nodes without the plugin's "
                "version (no policy is refused for it until the listing comes)",
                DAEMONSETS_WAIT,
            )

    async def wait_sources(self) -> None:
        """Until the pod index and the DaemonSet informer have their first listing."""
        await self.pods.synced.wait()
        if self.daemonsets is not None:
            await self.daemonsets.synced.wait()


@dataclass
class ConfigurationState:
    """What the configuration reconciler's last pass found, published by it alone: the rollout
    waits on it for the plugin pod and the node-config entry (`core.rollout.plugin`), and each
    policy's ConfigConsistent condition is read off its findings."""

    snapshot: ClusterSnapshot | None = None  # after the pass's writes
    read_at: datetime | None = None  # when that snapshot's reading began
    findings: list[Finding] | None = None  # None: not checked yet

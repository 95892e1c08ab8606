"""The controller's read-only cache (`controller.cache.ClusterCache`) for unit tests: its informers
made but never run (no request is made) and filled by the test, or one whose snapshot and
plugin values a stand-in gives (`FakeNodes.snapshot`, a plugin the test swaps).

    cache = empty_cache()
    cache.nodes.synced.set()
    reconciler = Reconciler(api, StubCache(fake.snapshot, plugin=lambda: V11), post_event)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vgpu_operator.controller.cache import ClusterCache
from vgpu_operator.controller.claims import ClaimIndex
from vgpu_operator.controller.informer import Change, Informer
from vgpu_operator.controller.kept import PolicyEntry, indexed_node, namespaced_name
from vgpu_operator.controller.pods import PodIndex
from vgpu_operator.controller.policies import PolicyCache
from vgpu_operator.controller.snapshot import compact_daemonset
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.rollout.gpu_pods import gpu_resources
from vgpu_operator.core.volcano.plugin_refusal import PluginNodeValues
from vgpu_operator.models.config import OperatorConfig

Snapshot = Callable[[], tuple[dict[str, NodeFacts], dict[str, PolicyEntry]]]
NO_API: Any = None  # the informers never run


async def _ignored(change: Change[Any]) -> None:
    """An informer's change: the tests deliver them to the cache only."""


def empty_cache(config: OperatorConfig | None = None, *, daemonsets: bool = False) -> ClusterCache:
    """A cache of informers that never run; `daemonsets`: the DaemonSets are watched too."""
    config = config or OperatorConfig()
    watched: Informer[Any] | None = None
    if daemonsets:
        path = "/apis/apps/v1/daemonsets"
        ds = compact_daemonset
        watched = Informer(NO_API, "daemonsets", path, ds, _ignored, key=namespaced_name)
    return ClusterCache(
        config,
        nodes=Informer(NO_API, "nodes", "/api/v1/nodes", indexed_node, _ignored),
        policies=PolicyCache(),
        pods=PodIndex(NO_API, gpu_resources(config)),
        claims=ClaimIndex(NO_API),
        daemonsets=watched,
    )


class StubCache(ClusterCache):
    """A cache whose snapshot (every Node's facts and every policy) and plugin values come
    from the test."""

    def __init__(
        self, snapshot: Snapshot, plugin: Callable[[], PluginNodeValues | None] = lambda: None
    ) -> None:
        base = empty_cache()
        super().__init__(base.config, base.nodes, base.policies, base.pods, base.claims)
        self._snapshot, self._plugin = snapshot, plugin

    def snapshot(self) -> tuple[dict[str, NodeFacts], dict[str, PolicyEntry]]:
        return self._snapshot()

    def plugin_values(self) -> PluginNodeValues | None:
        return self._plugin()

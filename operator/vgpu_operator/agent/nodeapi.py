"""The agent's view of the Kubernetes API: its own Node and Events, nothing else.

Reads, PATCHes and Events go through `kubeapi.request` (plain JSON, the error tree, the agent's
field manager on every write); the Node's changes come from `kubeapi.list_watch` with the field
selector `metadata.name=<node>` (the list-then-watch the controller's informer uses too: resume,
bookmarks, listing again on 410, randomized timeouts, back-off).

RBAC cannot narrow a DaemonSet's access to the node it runs on: `list`/`watch` with the field
selector `metadata.name=<node>` still need the cluster-wide verbs (charts/.../agent-rbac.yaml).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from kubernetes_asyncio import client

from vgpu_operator import contract, kubeapi
from vgpu_operator.kubeapi.events import events_path


class NodeApi(Protocol):
    """What the loop needs from the API server (agent.loop); tests substitute an in-memory one."""

    node: str

    async def get(self) -> dict[str, Any] | None: ...

    def changes(self) -> AsyncIterator[kubeapi.Listing | kubeapi.WatchEvent]: ...

    async def patch(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def post_event(self, body: dict[str, Any]) -> None: ...


class KubeNodeApi:
    """NodeApi on a kubernetes-asyncio ApiClient."""

    def __init__(self, api: client.ApiClient, node: str, *, watch_timeout: float = 300) -> None:
        self.api = api
        self.node = node
        self.options = kubeapi.WatchOptions(
            field_selector=f"metadata.name={node}",
            min_watch_seconds=watch_timeout,
            kind="node",
        )

    async def get(self) -> dict[str, Any] | None:
        try:
            return await kubeapi.request(self.api, "GET", kubeapi.node_path(self.node))
        except kubeapi.NotFound:
            return None

    def changes(self) -> AsyncIterator[kubeapi.Listing | kubeapi.WatchEvent]:
        """Listings (zero or one Node) and watch events of the own Node, forever."""
        return kubeapi.list_watch(self.api, kubeapi.node_path(), self.options)

    async def patch(self, body: dict[str, Any]) -> dict[str, Any]:
        return await kubeapi.request(
            self.api,
            "PATCH",
            kubeapi.node_path(self.node),
            body=body,
            content_type=kubeapi.MERGE_PATCH,
            field_manager=contract.AGENT_FIELD_MANAGER,
        )

    async def post_event(self, body: dict[str, Any]) -> None:
        await kubeapi.request(
            self.api,
            "POST",
            events_path(body),
            body=body,
            field_manager=contract.AGENT_FIELD_MANAGER,
        )

"""The agent's view of the Kubernetes API: its own Node and Events, nothing else.

Reads, PATCHes and Events go through the agent's own client (`kubeapi.lite`: plain JSON on asyncio
streams, the `kubeapi.errors` tree, the agent's field manager on every write); the Node's changes
come from its `list_watch` with the field selector `metadata.name=<node>` (`kubeapi.reflector`,
the list-then-watch the controller's informer uses too: resume, bookmarks, listing again on 410,
randomized timeouts, back-off).

RBAC cannot narrow a DaemonSet's access to the node it runs on: `list`/`watch` with the field
selector `metadata.name=<node>` still need the cluster-wide verbs (charts/.../agent-rbac.yaml).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from vgpu_operator import contract
from vgpu_operator.kubeapi.auth import AuthHealth
from vgpu_operator.kubeapi.errors import NotFound
from vgpu_operator.kubeapi.events import events_path
from vgpu_operator.kubeapi.lite import LiteClient, Settings
from vgpu_operator.kubeapi.reflector import Listing, WatchEvent, WatchOptions
from vgpu_operator.kubeapi.resources import MERGE_PATCH, node_path


class NodeApi(Protocol):
    """What the loop needs from the API server (agent.loop); tests substitute an in-memory one."""

    node: str

    async def get(self) -> dict[str, Any] | None: ...

    def changes(self) -> AsyncIterator[Listing | WatchEvent]: ...

    async def patch(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def post_event(self, body: dict[str, Any]) -> None: ...


class KubeNodeApi:
    """NodeApi on the agent's client (`kubeapi.lite.LiteClient`)."""

    def __init__(self, api: LiteClient, node: str, *, watch_timeout: float = 300) -> None:
        self.api = api
        self.node = node
        self.options = WatchOptions(
            field_selector=f"metadata.name={node}",
            min_watch_seconds=watch_timeout,
            kind="node",
        )

    async def get(self) -> dict[str, Any] | None:
        try:
            return await self.api.request("GET", node_path(self.node))
        except NotFound:
            return None

    def changes(self) -> AsyncIterator[Listing | WatchEvent]:
        """Listings (zero or one Node) and watch events of the own Node, forever."""
        return self.api.list_watch(node_path(), self.options)

    async def patch(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.api.request(
            "PATCH",
            node_path(self.node),
            body=body,
            content_type=MERGE_PATCH,
            field_manager=contract.AGENT_FIELD_MANAGER,
        )

    async def post_event(self, body: dict[str, Any]) -> None:
        await self.api.request(
            "POST", events_path(body), body=body, field_manager=contract.AGENT_FIELD_MANAGER
        )


def agent_client(settings: Settings, node: str, *, auth_bound: float = 300.0) -> LiteClient:
    """The API client as `vgpu-operator agent` makes it for its node (agent.cli): 4 kept-alive
    connections at most, the user agent `vgpu-operator-agent/<node>`, and the record of refused
    credentials that fails its liveness probe after `auth_bound` seconds."""
    return LiteClient(
        settings,
        user_agent=f"vgpu-operator-agent/{node}",
        auth=AuthHealth(bound=auth_bound),
        pool_size=4,
    )

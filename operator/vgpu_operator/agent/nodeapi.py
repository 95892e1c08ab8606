"""The agent's view of the Kubernetes API: its own Node and Events, nothing else.

Reads, PATCHes and Events go through `kubeapi.request` (plain JSON, status checked, the agent's
field manager on every write). The watch is the one call `request` cannot make: it reads the
whole body, and a watch is a stream of JSON lines. `watch` below makes the same call on the same
ApiClient (connection pool, token, TLS) and reads it line by line.

RBAC cannot narrow a DaemonSet's access to the node it runs on: `list`/`watch` with the field
selector `metadata.name=<node>` still need the cluster-wide verbs (charts/.../agent-rbac.yaml).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from vgpu_operator import contract, kubeapi
from vgpu_operator.agent.decide import EVENTS_NAMESPACE

MAX_LINE = 8 * 1024 * 1024  # one watch event (a Node) per line; etcd caps objects at 1.5 MiB


class NodeApi(Protocol):
    """What the loop needs from the API server (agent.loop); tests substitute an in-memory one."""

    node: str

    async def get(self) -> dict[str, Any] | None: ...

    async def list(self) -> tuple[dict[str, Any] | None, str]: ...

    def watch(self, resource_version: str) -> AsyncIterator[dict[str, Any]]: ...

    async def patch(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def post_event(self, body: dict[str, Any]) -> None: ...


class KubeNodeApi:
    """NodeApi on a kubernetes-asyncio ApiClient."""

    def __init__(self, api: client.ApiClient, node: str, *, watch_timeout: int = 300) -> None:
        self.api = api
        self.node = node
        self.watch_timeout = watch_timeout

    @property
    def _selector(self) -> dict[str, str]:
        return {"fieldSelector": f"metadata.name={self.node}"}

    async def get(self) -> dict[str, Any] | None:
        try:
            return await kubeapi.request(self.api, "GET", kubeapi.node_path(self.node))
        except kubeapi.NotFound:
            return None

    async def list(self) -> tuple[dict[str, Any] | None, str]:
        """The Node (None if absent) and the list's resourceVersion to watch from."""
        body = await kubeapi.request(self.api, "GET", kubeapi.node_path(), query=self._selector)
        items = body.get("items") or []
        rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
        return (items[0] if items else None), rv

    async def watch(self, resource_version: str) -> AsyncIterator[dict[str, Any]]:
        """The watch events after `resource_version` until the server ends the watch."""
        query = {
            **self._selector,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(self.watch_timeout),
        }
        raw: Any = self.api
        try:
            resp = await raw.call_api(
                kubeapi.node_path(),
                "GET",
                query_params=list(query.items()),
                header_params={"Accept": kubeapi.JSON},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                # (connect, read): no byte for longer than the server's own timeout = a dead peer
                _request_timeout=(30, self.watch_timeout + 30),
            )
        except ApiException as exc:
            if exc.status == 404:
                raise kubeapi.NotFound(kubeapi.node_path()) from exc
            raise
        try:
            if not 200 <= resp.status <= 299:
                err = ApiException(status=resp.status, reason=resp.reason)
                err.body = (await resp.read()).decode(errors="replace")
                raise err
            while True:
                line = await resp.content.readline(max_line_length=MAX_LINE)
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            resp.release()

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
            f"/api/v1/namespaces/{EVENTS_NAMESPACE}/events",
            body=body,
            field_manager=contract.AGENT_FIELD_MANAGER,
        )

"""The controller, started in one place: `await start(settings)` returns it with every part.

    Settings (frozen: credentials, options, operator config)
      -> start(): one API client, one Event poster,
                  informers of Nodes and policies (kubeapi.list_watch), the policy reconciler,
                  the configuration reconciler; their tasks
      -> Controller.stop()

Kopf (controller.handlers) calls `start` from its start-up hook, directly or once this replica
leads (controller.leader), and `stop` from its clean-up; its ConfigMap and workload watches only
call `request_configuration_pass`. The watch callbacks here only turn events into requests for
work; the reconcilers do the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.informer import DELETED, Change, Informer
from vgpu_operator.controller.reconciler import PolicyEntry, Reconciler, ReconcilerOptions
from vgpu_operator.controller.snapshot import compact_node
from vgpu_operator.controller.volcano import VolcanoOptions, VolcanoReconciler
from vgpu_operator.core.findings import CONDITION, ConditionValue
from vgpu_operator.core.nodefacts import NodeFacts, node_facts
from vgpu_operator.core.validate import parse_policy
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.kubeapi.events import EventPoster
from vgpu_operator.models.config import OperatorConfig

log = logging.getLogger("vgpu_operator.controller")

USER_AGENT = "vgpu-operator"


@dataclass(frozen=True)
class Settings:
    """Everything the controller is started with."""

    credentials: Credentials
    options: ReconcilerOptions = field(default_factory=ReconcilerOptions)
    config: OperatorConfig = field(default_factory=OperatorConfig)
    volcano: VolcanoOptions = field(default_factory=VolcanoOptions)
    user_agent: str = USER_AGENT  # tells replicas apart in the audit log


@dataclass(frozen=True)
class IndexedNode:
    """What the operator keeps per Node: the facts the policy reconciler plans with, and the
    compact object the configuration rules read (so no pass has to list Nodes)."""

    facts: NodeFacts
    obj: dict[str, Any]
    uid: str


def indexed_node(body: Mapping[str, Any]) -> IndexedNode:
    return IndexedNode(node_facts(body), compact_node(body), str(body["metadata"].get("uid", "")))


def policy_entry(body: Mapping[str, Any]) -> PolicyEntry:
    meta = body.get("metadata") or {}
    return PolicyEntry(
        parsed=parse_policy(body),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        finalizers=tuple(meta.get("finalizers") or ()),
        status=dict(body.get("status") or {}),
    )


class Controller:
    """The running controller. Made by `start`; every part exists from construction on."""

    def __init__(self, settings: Settings, api: kubeapi.Client) -> None:
        self.settings = settings
        self.api = api
        self.events = EventPoster(
            api, component=USER_AGENT, instance=settings.user_agent, field_manager=None
        )
        self.nodes: Informer[IndexedNode] = Informer(
            api, "nodes", kubeapi.node_path(), indexed_node, self.node_event
        )
        self.policies: Informer[PolicyEntry] = Informer(
            api, "policies", kubeapi.policy_path(), policy_entry, self.policy_event
        )
        self.reconciler = Reconciler(
            api=api,
            snapshot=self.snapshot,
            post_event=self.events,
            node_uid=self.node_uid,
            options=settings.options,
            extra_conditions=self.policy_conditions,
        )
        self.volcano: VolcanoReconciler | None = None  # off when the options say so
        if settings.volcano.enabled:
            self.volcano = VolcanoReconciler(
                api=api,
                config=settings.config,
                post_event=self.events,
                options=settings.volcano,
                on_findings_changed=self.reconciler.request_full,  # ConfigConsistent
                node_source=self.node_objects,
                nodes_idle=self.reconciler.idle,
            )
        self.tasks: list[asyncio.Task[None]] = []
        self._seen_policies: dict[str, tuple[int, bool, tuple[str, ...]]] = {}

    def launch(self) -> None:
        tasks = {
            "vgpu-watch-nodes": self.nodes.run(),
            "vgpu-watch-policies": self.policies.run(),
            # No pass before both listings are in: with the policies not yet known, every
            # owned node would look like a node of a deleted policy, and be cleaned.
            "vgpu-reconciler": after(self.wait_synced(), self.reconciler.run()),
        }
        if self.volcano is not None:
            tasks["vgpu-volcano"] = self.volcano.run()
        self.tasks = [asyncio.create_task(coro, name=name) for name, coro in tasks.items()]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.volcano is not None:
            self.volcano.stop()
        await self.events.drain()
        await self.api.close()

    # -- what the parts read ----------------------------------------------------------------
    async def wait_synced(self) -> None:
        """Until both watches have delivered their first listing: what they hold is the cluster."""
        await self.nodes.synced.wait()
        await self.policies.synced.wait()

    def snapshot(self) -> tuple[dict[str, NodeFacts], dict[str, PolicyEntry]]:
        return {k: v.facts for k, v in self.nodes.items.items()}, dict(self.policies.items)

    def node_objects(self) -> list[dict[str, Any]] | None:
        """Every Node as the configuration rules read it, from the watch; None until the
        first listing is in."""
        if not self.nodes.synced.is_set():
            return None
        return [v.obj for v in self.nodes.items.values()]

    def node_uid(self, name: str) -> str:
        node = self.nodes.items.get(name)
        return node.uid if node else ""

    def policy_conditions(self, policy: str, nodes: frozenset[str]) -> dict[str, ConditionValue]:
        """The extra status conditions of a policy. Until the first configuration pass has run,
        the policy keeps the condition it has (a restarted operator writes no status for it)."""
        if self.volcano is None:
            return {}
        value = self.volcano.condition(nodes)
        if value is not None:
            return {CONDITION: value}
        stored = self.policies.items.get(policy)
        for c in (stored.status if stored else {}).get("conditions") or []:
            if c.get("type") == CONDITION:
                kept = (c.get("status", "Unknown"), c.get("reason", ""), c.get("message", ""))
                return {CONDITION: kept}
        return {}

    # -- requests from the watches ----------------------------------------------------------
    def request_configuration_pass(self) -> None:
        if self.volcano is not None:
            self.volcano.request()

    async def node_event(self, change: Change[IndexedNode]) -> None:
        if self.volcano is not None:  # the plugin's registration, for the configuration rules
            self.volcano.node_changed(change.name, change.obj, deleted=change.type == DELETED)
        if change.type == DELETED:
            self.reconciler.request_nodes([])  # statuses count nodes: recompute them
            self.request_configuration_pass()
            return
        facts = change.item.facts
        if change.previous is not None and same_facts(change.previous.facts, facts):
            return  # a heartbeat or another change the operator does not read
        self.request_configuration_pass()  # released config, inventory, labels or taints
        if self.reconciler.is_own_write(change.name, facts):
            return  # the echo of the operator's own PATCH
        self.reconciler.request_nodes([change.name])

    async def policy_event(self, change: Change[PolicyEntry]) -> None:
        name = change.name
        if change.type == DELETED:
            self._seen_policies.pop(name, None)
            self.reconciler.forget_policy(name)
            self.reconciler.request_full()
            self.request_configuration_pass()
            return
        meta = change.obj.get("metadata") or {}
        finalizers = change.item.finalizers
        deleting = change.item.parsed.deleting
        key = (int(meta.get("generation") or 0), deleting, finalizers)
        if self._seen_policies.get(name) == key:
            return  # a status write (ours) or a label/annotation edit: nothing to do
        self._seen_policies[name] = key
        # The pass does not wait for the finalizer's round trip: until it is on, a deletion is
        # still handled (the policy's nodes are then released as nodes of no policy).
        self.reconciler.request_full()
        self.request_configuration_pass()
        missing = not deleting and contract.FINALIZER not in finalizers
        if missing and not await self._add_finalizer(name, meta):
            self._seen_policies.pop(name, None)  # handle the newer version when it comes

    async def _add_finalizer(self, name: str, meta: Mapping[str, Any]) -> bool:
        finalizers = [*list(meta.get("finalizers") or ()), contract.FINALIZER]
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        try:
            await kubeapi.request(
                self.api,
                "PATCH",
                kubeapi.policy_path(name),
                body=body,
                content_type=kubeapi.MERGE_PATCH,
            )
        except (kubeapi.Conflict, kubeapi.NotFound):
            return False  # a newer version exists (or none): its event comes next
        return True


async def start(settings: Settings) -> Controller:
    """Connect, build every part, start their tasks."""
    api = await settings.credentials.client(
        pool_size=settings.options.concurrency + 16, user_agent=settings.user_agent
    )
    controller = Controller(settings, api)
    controller.launch()
    log.info("controller started (%s)", settings.credentials.describe())
    return controller


async def after(first: Coroutine[Any, Any, None], then: Coroutine[Any, Any, None]) -> None:
    """`then` once `first` is done; a cancelled wait closes `then` unstarted."""
    try:
        await first
    except BaseException:
        then.close()
        raise
    await then


def same_facts(a: NodeFacts, b: NodeFacts) -> bool:
    """Equal for the operator's purposes: everything but the resourceVersion."""
    return (
        a.labels == b.labels
        and a.annotations == b.annotations
        and a.taints == b.taints
        and a.errors == b.errors
    )

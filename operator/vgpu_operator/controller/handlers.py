"""Kopf registrations, and the two watches the operator keeps whole in memory.

Nodes and policies are watched by the lean informer (`controller.informer`), not by Kopf: Node
events come by the thousand, and Kopf's per-event pipeline cost more than the operator's own work
(and its change-detecting handlers would store their state in annotations on every Node: extra
writes). Kopf runs the rest: login, settings, start-up and clean-up, the liveness probe, and the
configuration reconciler's watches of ConfigMaps and workloads (few objects, filtered by name).
Event callbacks only ask the reconcilers for work. The policy finalizer is the operator's own
(`vgpu.volcano.sh/finalizer`), added here and removed by the reconciler once the policy's nodes
are clean.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import kopf
from kubernetes_asyncio import client

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.events import EventPoster
from vgpu_operator.controller.informer import DELETED, Change, Informer
from vgpu_operator.controller.kube import Credentials
from vgpu_operator.controller.reconciler import PolicyEntry, Reconciler, ReconcilerOptions
from vgpu_operator.controller.snapshot import compact_node
from vgpu_operator.controller.volcano import (
    VolcanoOptions,
    VolcanoReconciler,
    policy_conditions,
)
from vgpu_operator.controller.volcano import register as register_volcano
from vgpu_operator.core.nodefacts import NodeFacts, node_facts
from vgpu_operator.core.validate import parse_policy
from vgpu_operator.models.config import OperatorConfig

log = logging.getLogger("vgpu_operator.handlers")


class NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """The diff-base of an operator without change-detecting handlers: empty.

    Kopf builds an object's "essence" (a deep copy without status and system fields) on every
    watch event, to compare it with the last handled one for on.create/update/resume handlers.
    This operator has none (`build_registry` checks): it reacts to events only, so the essence
    is never used.
    """

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def configure_settings(settings: kopf.OperatorSettings) -> None:
    """Production Kopf settings (kopf-anchors.md): own prefixes, timeouts on every watch."""
    # Kopf's own finalizer must differ from the operator's: Kopf removes its finalizer from
    # objects no handler of its needs it for, which would fight the operator's own.
    settings.persistence.finalizer = f"{contract.GROUP}/kopf-finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=contract.GROUP)
    settings.persistence.diffbase_storage = NoDiffBase(
        prefix=contract.GROUP, key="last-handled-configuration"
    )
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 310
    settings.watching.connect_timeout = 30
    settings.watching.reconnect_backoff = 1.0
    settings.networking.request_timeout = 60
    settings.scanning.disabled = True  # cluster-wide; no namespace/CRD discovery needed
    settings.posting.level = logging.WARNING  # Events come from the reconciler, deliberately


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


@dataclass
class ControllerState:
    credentials: Credentials
    options: ReconcilerOptions = field(default_factory=ReconcilerOptions)
    config: OperatorConfig = field(default_factory=OperatorConfig)
    api: client.ApiClient | None = None
    reconciler: Reconciler | None = None
    events: EventPoster | None = None
    task: asyncio.Task[None] | None = None
    volcano_options: VolcanoOptions = field(default_factory=VolcanoOptions)
    volcano: VolcanoReconciler | None = None  # the configuration reconciler (controller.volcano)
    volcano_task: asyncio.Task[None] | None = None
    nodes: Informer[IndexedNode] | None = None
    policies: Informer[PolicyEntry] | None = None
    watch_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    seen_policies: dict[str, tuple[int, bool, tuple[str, ...]]] = field(default_factory=dict)

    async def wait_synced(self) -> None:
        """Until both watches have delivered their first listing: what they hold is the cluster."""
        for watch in (self.nodes, self.policies):
            assert watch is not None, "the operator has not started"
            await watch.synced.wait()

    def snapshot(self) -> tuple[dict[str, NodeFacts], dict[str, PolicyEntry]]:
        nodes = {k: v.facts for k, v in self.nodes.items.items()} if self.nodes else {}
        policies = dict(self.policies.items) if self.policies else {}
        return nodes, policies

    def node_objects(self) -> list[dict[str, Any]] | None:
        """Every Node as the configuration rules read it, from the watch; None until the
        first listing is in."""
        if self.nodes is None or not self.nodes.synced.is_set():
            return None
        return [v.obj for v in self.nodes.items.values()]

    def node_uid(self, name: str) -> str:
        node = self.nodes.items.get(name) if self.nodes else None
        return node.uid if node else ""

    def policy(self, name: str) -> PolicyEntry | None:
        return self.policies.items.get(name) if self.policies else None

    @property
    def work(self) -> Reconciler:
        assert self.reconciler is not None, "the operator has not started"
        return self.reconciler


def build_registry(state: ControllerState) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return state.credentials.connection_info()

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure_settings(settings)
        state.api = state.credentials.api_client(pool_size=state.options.concurrency + 8)
        state.events = EventPoster(state.api)
        state.reconciler = Reconciler(
            api=state.api,
            snapshot=state.snapshot,
            post_event=state.events,
            node_uid=state.node_uid,
            options=state.options,
            extra_conditions=partial(policy_conditions, state),
        )
        state.nodes = Informer(
            state.api, "nodes", kubeapi.node_path(), indexed_node, partial(node_event, state)
        )
        state.policies = Informer(
            state.api, "policies", kubeapi.policy_path(), policy_entry, partial(policy_event, state)
        )
        state.watch_tasks = [
            asyncio.create_task(state.nodes.run(), name="vgpu-watch-nodes"),
            asyncio.create_task(state.policies.run(), name="vgpu-watch-policies"),
        ]
        # No pass before both listings are in: with the policies not yet known, every owned
        # node would look like a node of a deleted policy, and be cleaned.
        state.task = asyncio.create_task(
            _after(state.wait_synced(), state.reconciler.run()), name="vgpu-reconciler"
        )

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        tasks = [t for t in (state.task, *state.watch_tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if state.events is not None:
            await state.events.drain()
        if state.api is not None:
            await state.api.close()

    @kopf.on.probe(registry=registry, id="reconcilePasses")
    def passes(**_: Any) -> int:
        return state.reconciler.passes if state.reconciler else 0

    register_volcano(registry, state)
    check_registry(registry)
    return registry


async def _after(first: Coroutine[Any, Any, None], then: Coroutine[Any, Any, None]) -> None:
    try:
        await first
    except BaseException:
        then.close()
        raise
    await then


async def node_event(state: ControllerState, change: Change[IndexedNode]) -> None:
    if state.volcano is not None:  # the plugin's registration, for the configuration rules
        state.volcano.node_changed(change.name, change.obj, deleted=change.type == DELETED)
    if change.type == DELETED:
        state.work.request_nodes([])  # statuses count nodes: recompute them
        _nudge_volcano(state)
        return
    facts = change.item.facts
    if change.previous is not None and _same_facts(change.previous.facts, facts):
        return  # a heartbeat or another change the operator does not read
    _nudge_volcano(state)  # released config, inventory, labels or taints changed
    if state.work.is_own_write(change.name, facts):
        return  # the echo of the operator's own PATCH
    state.work.request_nodes([change.name])


async def policy_event(state: ControllerState, change: Change[PolicyEntry]) -> None:
    name = change.name
    if change.type == DELETED:
        state.seen_policies.pop(name, None)
        state.work.forget_policy(name)
        state.work.request_full()
        _nudge_volcano(state)
        return
    meta = change.obj.get("metadata") or {}
    finalizers = change.item.finalizers
    deleting = change.item.parsed.deleting
    key = (int(meta.get("generation") or 0), deleting, finalizers)
    if state.seen_policies.get(name) == key:
        return  # a status write (ours) or a label/annotation edit: nothing to do
    state.seen_policies[name] = key
    # The pass does not wait for the finalizer's round trip: until it is on, a deletion is
    # still handled (the policy's nodes are then released as nodes of no policy).
    state.work.request_full()
    _nudge_volcano(state)
    missing = not deleting and contract.FINALIZER not in finalizers
    if missing and not await _add_finalizer(state, name, meta):
        state.seen_policies.pop(name, None)  # handle the newer version when it comes


def check_registry(registry: kopf.OperatorRegistry) -> None:
    """With `NoDiffBase`, a change-detecting handler would never see a change: refuse it."""
    if registry._changing.get_all_handlers():
        raise RuntimeError("change-detecting handlers need Kopf's diff-base storage back")


def _nudge_volcano(state: ControllerState) -> None:
    if state.volcano is not None:
        state.volcano.request()


def _same_facts(a: NodeFacts, b: NodeFacts) -> bool:
    """Equal for the operator's purposes: everything but the resourceVersion."""
    return (
        a.labels == b.labels
        and a.annotations == b.annotations
        and a.taints == b.taints
        and a.errors == b.errors
    )


async def _add_finalizer(state: ControllerState, name: str, meta: Mapping[str, Any]) -> bool:
    assert state.api is not None
    finalizers = [*list(meta.get("finalizers") or ()), contract.FINALIZER]
    try:
        await kubeapi.request(
            state.api,
            "PATCH",
            kubeapi.policy_path(name),
            body={
                "metadata": {
                    "finalizers": finalizers,
                    "resourceVersion": meta.get("resourceVersion"),
                }
            },
            content_type=kubeapi.MERGE_PATCH,
        )
    except (kubeapi.Conflict, kubeapi.NotFound):
        return False  # a newer version exists (or none): its event comes next
    return True

"""Kopf registrations: watches feed two indexes; handlers only ask the reconciler for work.

Nodes are watched with an index and an event handler only, never with Kopf's change-detecting
handlers: those store their state in annotations on the handled object, which would be extra
writes on every Node. Policies likewise: the finalizer is the operator's own
(`vgpu.volcano.sh/finalizer`) and removed by the reconciler once the policy's nodes are clean.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import kopf
from kubernetes_asyncio import client

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.events import EventPoster
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

NODES_INDEX = "vgpu_nodes"
POLICIES_INDEX = "vgpu_policies"


class NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """The diff-base of an operator without change-detecting handlers: empty.

    Kopf builds an object's "essence" (a deep copy without status and system fields) on every
    watch event, to compare it with the last handled one for on.create/update/resume handlers.
    This operator has none (`build_registry` checks): it reacts to events and indexes only, so
    the essence is never used, and building it was a third of Kopf's time per Node event.
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


def _first(store: Any) -> Any:
    return next(iter(store))


@dataclass(frozen=True)
class IndexedNode:
    """What the node index keeps per Node: the facts the policy reconciler plans with, and
    the compact object the configuration rules read (so no pass has to list Nodes)."""

    facts: NodeFacts
    obj: dict[str, Any]


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
    nodes_index: Mapping[str, Any] | None = None
    policies_index: Mapping[str, Any] | None = None
    node_uids: dict[str, str] = field(default_factory=dict)
    seen_nodes: dict[str, NodeFacts] = field(default_factory=dict)
    seen_policies: dict[str, tuple[int, bool, tuple[str, ...]]] = field(default_factory=dict)
    # Kopf runs resource handlers only once every watched resource has been listed and
    # indexed: the first handler call sets this, and the node index is complete from then on.
    indexed: bool = False

    def snapshot(self) -> tuple[dict[str, NodeFacts], dict[str, PolicyEntry]]:
        nodes = {k: _first(v).facts for k, v in (self.nodes_index or {}).items()}
        policies = {k: _first(v) for k, v in (self.policies_index or {}).items()}
        return nodes, policies

    def node_objects(self) -> list[dict[str, Any]] | None:
        """Every Node as the configuration rules read it, from the watch; None until the
        index is complete."""
        if not self.indexed or self.nodes_index is None:
            return None
        return [_first(v).obj for v in self.nodes_index.values()]

    def bind(self, nodes_index: Mapping[str, Any], policies_index: Mapping[str, Any]) -> None:
        self.nodes_index = nodes_index
        self.policies_index = policies_index

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
    async def startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        configure_settings(settings)
        state.bind(kwargs[NODES_INDEX], kwargs[POLICIES_INDEX])  # filled once Kopf has listed
        state.api = state.credentials.api_client(pool_size=state.options.concurrency + 8)
        state.events = EventPoster(state.api)
        state.reconciler = Reconciler(
            api=state.api,
            snapshot=state.snapshot,
            post_event=state.events,
            node_uid=lambda name: state.node_uids.get(name, ""),
            options=state.options,
            extra_conditions=partial(policy_conditions, state),
        )
        state.task = asyncio.create_task(state.reconciler.run(), name="vgpu-reconciler")

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        if state.task is not None:
            state.task.cancel()
            await asyncio.gather(state.task, return_exceptions=True)
        if state.events is not None:
            await state.events.drain()
        if state.api is not None:
            await state.api.close()

    @kopf.on.probe(registry=registry, id="reconcilePasses")
    def passes(**_: Any) -> int:
        return state.reconciler.passes if state.reconciler else 0

    # Handlers are coroutines: Kopf runs plain functions in a thread pool, a hand-off per
    # call that costs more than these handlers do.
    @kopf.index("nodes", registry=registry, id=NODES_INDEX)
    async def vgpu_nodes(name: str, uid: str, body: kopf.Body, **_: Any) -> dict[str, IndexedNode]:
        state.node_uids[name] = uid
        return {name: IndexedNode(node_facts(body), compact_node(body))}

    @kopf.index(
        contract.GROUP,
        contract.VERSION,
        contract.POLICY_PLURAL,
        registry=registry,
        id=POLICIES_INDEX,
    )
    async def vgpu_policies(
        name: str, uid: str, body: kopf.Body, **_: Any
    ) -> dict[str, PolicyEntry]:
        meta = body.get("metadata", {})
        return {
            name: PolicyEntry(
                parsed=parse_policy(body),
                uid=uid,
                resource_version=str(meta.get("resourceVersion", "")),
                finalizers=tuple(meta.get("finalizers") or ()),
                status=dict(body.get("status") or {}),
            )
        }

    @kopf.on.event("nodes", registry=registry)
    async def node_event(type: str, name: str, body: kopf.Body, **kwargs: Any) -> None:
        state.indexed = True
        if state.volcano is not None:  # the plugin's registration, for the configuration rules
            state.volcano.node_changed(name, body, deleted=type == "DELETED")
        if type == "DELETED":
            state.seen_nodes.pop(name, None)
            state.node_uids.pop(name, None)
            state.work.request_nodes([])  # statuses count nodes: recompute them
            _nudge_volcano(state)
            return
        # The index has already parsed this event's body: reuse it instead of parsing again.
        store = kwargs[NODES_INDEX].get(name)
        facts = _first(store).facts if store else None
        rv = body.get("metadata", {}).get("resourceVersion")
        if facts is None or facts.resource_version != rv:
            facts = node_facts(body)
        previous = state.seen_nodes.get(name)
        state.seen_nodes[name] = facts
        if previous is not None and _same_facts(previous, facts):
            return  # a heartbeat or another change the operator does not read
        _nudge_volcano(state)  # released config, inventory, labels or taints changed
        if state.work.is_own_write(name, facts):
            return  # the echo of the operator's own PATCH
        state.work.request_nodes([name])

    @kopf.on.event(contract.GROUP, contract.VERSION, contract.POLICY_PLURAL, registry=registry)
    async def policy_event(type: str, name: str, body: kopf.Body, **kwargs: Any) -> None:
        state.indexed = True
        if type == "DELETED":
            state.seen_policies.pop(name, None)
            state.work.forget_policy(name)
            state.work.request_full()
            _nudge_volcano(state)
            return
        meta = body.get("metadata", {})
        finalizers = tuple(meta.get("finalizers") or ())
        deleting = bool(meta.get("deletionTimestamp"))
        key = (int(meta.get("generation") or 0), deleting, finalizers)
        if state.seen_policies.get(name) == key:
            return  # a status write (ours) or a label/annotation edit: nothing to do
        state.seen_policies[name] = key
        missing = not deleting and contract.FINALIZER not in finalizers
        if missing and not await _add_finalizer(state, name, meta):
            state.seen_policies.pop(name, None)  # handle the newer version when it comes
        state.work.request_full()
        _nudge_volcano(state)

    register_volcano(registry, state)
    check_registry(registry)
    return registry


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

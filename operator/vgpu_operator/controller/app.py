"""The controller, started in one place: `await start(settings, policies)` returns it.

    Settings (frozen: credentials, options, operator config), Kopf's policy index
      -> start(): one API client, one Event poster, the Node informer (kubeapi.list_watch),
                  the pod index (pods holding GPU resources, per node), the claim index
                  (ResourceClaims' drivers), the DaemonSet informer, the named ConfigMaps' and
                  the scheduler Deployment's informers, the policy reconciler, the configuration
                  reconciler, the unschedulable pod warnings; their tasks
      -> Controller.stop()

Kopf (controller.handlers) calls `start` from its start-up handler, once this replica leads
(controller.leader), and `stop` from its clean-up; its policy handlers call `policy_changed`,
`policy_gone` and `release`. The informers' callbacks here only turn events into requests for
work (and a pending GPU pod into its fit check); the reconcilers do the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.claims import ClaimIndex
from vgpu_operator.controller.discovery import discover_at_start
from vgpu_operator.controller.informer import DELETED, Change, Informer
from vgpu_operator.controller.kept import (
    IndexedNode,
    daemonset_spec,
    indexed_node,
    kept_node,
    namespaced_name,
    resource_version,
    same_facts,
)
from vgpu_operator.controller.pods import PAGE, PodIndex
from vgpu_operator.controller.policies import PolicyCache
from vgpu_operator.controller.reconciler import PolicyEntry, Reconciler, ReconcilerOptions
from vgpu_operator.controller.rollout import PluginReadings, RolloutDriver
from vgpu_operator.controller.snapshot import (
    collection_path,
    compact_daemonset,
    watched_objects,
)
from vgpu_operator.controller.unschedulable import UnschedulableWarnings
from vgpu_operator.controller.volcano import VolcanoOptions, VolcanoReconciler
from vgpu_operator.core.findings import CONDITION, ConditionValue
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.rollout.gpu_pods import gpu_resources
from vgpu_operator.core.volcano.plugin_refusal import PluginNodeValues, plugin_node_values
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.kubeapi.events import EventPoster
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.volcano import registration
from vgpu_operator.waiting import wait_set

log = logging.getLogger("vgpu_operator.controller")

DAEMONSETS_WAIT = 30.0  # seconds the first node pass waits for the DaemonSet listing

USER_AGENT = "vgpu-operator"
DAEMONSETS_PATH = "/apis/apps/v1/daemonsets"

Obj = dict[str, Any]


@dataclass(frozen=True)
class Settings:
    """Everything the controller is started with."""

    credentials: Credentials
    options: ReconcilerOptions = field(default_factory=ReconcilerOptions)
    config: OperatorConfig = field(default_factory=OperatorConfig)
    volcano: VolcanoOptions = field(default_factory=VolcanoOptions)
    user_agent: str = USER_AGENT  # tells replicas apart in the audit log


class Controller:
    """The running controller. Made by `start`; every part exists from construction on."""

    def __init__(
        self, settings: Settings, api: kubeapi.Client, policies: PolicyCache | None = None
    ) -> None:
        self.settings = settings
        self.api = api
        self.events = EventPoster(
            api, component=USER_AGENT, instance=settings.user_agent, field_manager=None
        )
        self.nodes: Informer[IndexedNode] = Informer(
            api,
            "nodes",
            kubeapi.node_path(),
            indexed_node,
            self.node_event,
            # A listing of thousands of Nodes is cut down page by page, not held whole: held
            # whole, 5,000 Nodes as kwok keeps them left the process 100 MiB larger.
            kubeapi.WatchOptions(page_size=PAGE, reduce=kept_node),
        )
        # Kopf's index (controller.handlers), read-only here; an empty one for tests
        self.policies = policies if policies is not None else PolicyCache()
        self.pods = PodIndex(api, gpu_resources(settings.config), self.pod_event)
        self.claims = ClaimIndex(api)  # which driver allocated a pod's ResourceClaim
        # Held by namespace/name: the plugin is found by both, and a same-named DaemonSet in
        # another namespace must not replace it.
        self.daemonsets: Informer[Obj] = Informer(
            api,
            "daemonsets",
            DAEMONSETS_PATH,
            compact_daemonset,
            self.daemonset_event,
            key=namespaced_name,
        )
        # The configured ConfigMaps and the scheduler Deployment, each watched by name (the
        # chart's Roles grant only these names): any event asks for a configuration pass.
        self.named: list[Informer[str]] = [
            Informer(
                api,
                kind.lower(),
                collection_path(kind, namespace),
                resource_version,
                self.named_event,
                kubeapi.WatchOptions(field_selector=f"metadata.name={name}"),
                key=namespaced_name,
            )
            for kind, namespace, name in watched_objects(settings.config)
        ]
        self.unschedulable = UnschedulableWarnings(self.events, fresh=self.snapshot_fresh)
        self.reconciler = Reconciler(
            api=api,
            snapshot=self.snapshot,
            post_event=self.events,
            node_uid=self.node_uid,
            options=settings.options,
            extra_conditions=self.policy_conditions,
            plugin_values=self.plugin_node_values,
            rollout=RolloutDriver(
                api,
                self.events,
                self.rollout_pods,
                self.node_object,
                node_uid=self.node_uid,
                plugin_readings=PluginReadings(
                    self.configuration_read, enforced=settings.config.mode == "enforce"
                ),
            ),
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
                pod_source=self.gpu_pods,
                daemonset_source=self.daemonset_objects,
                on_snapshot=self.snapshot_taken,
                nodes_idle=self.reconciler.idle,
            )
        self.tasks: list[asyncio.Task[None]] = []

    def launch(self) -> None:
        tasks = {
            "vgpu-watch-nodes": self.nodes.run(),
            "vgpu-policies-listed": self.policies.wait_listed(self.api),
            "vgpu-watch-pods": self.pods.run(),
            "vgpu-watch-resourceclaims": self.claims.run(),
            # No pass before both listings are in: with the policies not yet known, every
            # owned node would look like a node of a deleted policy, and be cleaned.
            "vgpu-reconciler": after(self.wait_reconcile_sources(), self.reconciler.run()),
        }
        if self.volcano is not None:
            tasks["vgpu-watch-daemonsets"] = self.daemonsets.run()
            for i, informer in enumerate(self.named):
                tasks[f"vgpu-watch-{informer.kind}-{i}"] = informer.run()
            # Nor a configuration pass before the pods and DaemonSets are in: it reads them
            # from there, and lists no Pod or DaemonSet across the cluster.
            tasks["vgpu-volcano"] = after(self.wait_sources(), self.volcano.run())
        self.tasks = [asyncio.create_task(coro, name=name) for name, coro in tasks.items()]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.volcano is not None:
            self.volcano.stop()
        if self.reconciler.rollout is not None:
            self.reconciler.rollout.stop()
        await self.events.drain()
        await self.api.close()

    # -- what the parts read ----------------------------------------------------------------
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
        if self.volcano is not None and not await wait_set(self.daemonsets.synced, DAEMONSETS_WAIT):
            log.warning(
                "no DaemonSet listing after %.0fs: reconciling nodes without the plugin's "
                "version (no policy is refused for it until the listing comes)",
                DAEMONSETS_WAIT,
            )

    def plugin_daemonset(self) -> Obj | None:
        """The configured vGPU plugin DaemonSet, from the watch (None: not there, not watched)."""
        ref = self.settings.config.device_plugin
        return self.daemonsets.items.get(f"{ref.namespace}/{ref.name}")

    def plugin_node_values(self) -> PluginNodeValues | None:
        return plugin_node_values(self.plugin_daemonset(), self.settings.config)

    async def wait_sources(self) -> None:
        """Until the pod index and the DaemonSet informer have their first listing."""
        await self.pods.synced.wait()
        await self.daemonsets.synced.wait()

    def gpu_pods(self) -> list[Obj] | None:
        return self.pods.pods() if self.pods.synced.is_set() else None

    def daemonset_objects(self) -> list[Obj] | None:
        if not self.daemonsets.synced.is_set():
            return None
        return list(self.daemonsets.items.values())

    def snapshot_fresh(self) -> bool:
        """The last configuration pass's snapshot still holds: no pass is due, no Node is
        being written."""
        return self.volcano is not None and not self.volcano.due() and self.reconciler.idle.is_set()

    def snapshot_taken(self, snapshot: ClusterSnapshot) -> None:
        self.pods.snapshot_taken(snapshot)  # NVIDIA's device plugin's renamed resources
        try:
            self.unschedulable.snapshot_taken(snapshot, self.pods.unbound())
        except Exception:  # the warnings must not fail the configuration pass
            log.exception("checking pending GPU pods failed")
        rollout = self.reconciler.rollout
        if rollout is not None and rollout.waiting_on_configuration:
            # the plugin pod left or the node-config entry was rewritten: the next step may go
            self.reconciler.request_nodes(rollout.waiting_on_configuration)
        observer = self.reconciler.observer  # mode: observe (controller.observe)
        parsed = [p.parsed for p in self.policies.items.values()]
        if observer is not None and observer.configuration(snapshot, parsed):
            self.reconciler.request_full()  # the policies' Observed condition

    def snapshot(self) -> tuple[dict[str, NodeFacts], dict[str, PolicyEntry]]:
        return {k: v.facts for k, v in self.nodes.items.items()}, dict(self.policies.items)

    def node_objects(self) -> list[dict[str, Any]] | None:
        """Every Node as the configuration rules read it, from the watch; None until the
        first listing is in."""
        if not self.nodes.synced.is_set():
            return None
        return [v.obj for v in self.nodes.items.values()]

    def configuration_read(self) -> tuple[ClusterSnapshot | None, datetime | None] | None:
        """The last configuration pass's snapshot and its time (None: no such reconciler)."""
        if self.volcano is None:
            return None
        return self.volcano.last_snapshot, self.volcano.last_read_at

    def rollout_pods(self, name: str) -> list[Obj] | None:
        """The GPU consumers on a node, for the drain (a claim by the claim index now: absent
        or not synced, it counts); None until the pod index is synced."""
        if not self.pods.synced.is_set():
            return None
        return self.pods.consumers_on(name, self.claims.drivers())

    def node_object(self, name: str) -> Obj | None:
        node = self.nodes.items.get(name)
        return node.obj if node else None

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
        stored = self.policies.get(policy)
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
            if contract.ANN_ROLLOUT in facts.annotations and registration(
                change.previous.obj
            ) != registration(change.obj):
                # a node in Verifying waits for the plugin's registration, which is not a fact
                self.reconciler.request_nodes([change.name])
            return  # a heartbeat or another change the operator does not read
        self.request_configuration_pass()  # released config, inventory, labels or taints
        if self.reconciler.is_own_write(change.name, facts):
            return  # the echo of the operator's own PATCH
        self.reconciler.request_nodes([change.name])

    async def pod_event(self, change: Change[Obj]) -> None:
        """A GPU pod came, changed or went: a pending one gets its fit check."""
        await self.unschedulable.pod_changed(change)

    async def named_event(self, change: Change[str]) -> None:
        """A configured ConfigMap or the scheduler Deployment came, changed or went."""
        self.request_configuration_pass()

    async def daemonset_event(self, change: Change[Obj]) -> None:
        """A configured plugin DaemonSet: a pass on every event (its rollout shows in its
        status); any other: when its spec changed (the rules look for MindCluster and NVIDIA
        device plugins among them)."""
        if self.volcano is None:
            return
        meta = change.obj.get("metadata") or {}
        named = (meta.get("namespace"), str(meta.get("name", "")))
        respecced = daemonset_spec(change.previous) != daemonset_spec(change.item)
        if self.volcano.watches("DaemonSet", *named) or respecced:
            self.request_configuration_pass()
        ref = self.settings.config.device_plugin
        if named == (ref.namespace, ref.name):  # which policies are refused may change
            config = self.settings.config
            gone = change.type == DELETED
            before = plugin_node_values(change.previous, config) if change.previous else None
            if before != (None if gone else plugin_node_values(change.item, config)):
                self.reconciler.request_full()

    # -- requests from Kopf's policy handlers (controller.handlers) --------------------------
    def policy_changed(self) -> None:
        """A policy was created, changed, resumed or marked for deletion: one full pass of each
        reconciler (priorities and conflicts are cluster-wide: no policy is planned alone)."""
        self.reconciler.request_full()
        self.request_configuration_pass()

    def policy_gone(self, name: str) -> None:
        """A policy left the cluster (its index entry is gone): statuses and gauges again."""
        self.reconciler.forget_policy(name)
        self.policy_changed()

    async def release(self, name: str, timeout: float) -> list[str]:
        """Until the reconciler has released every node of the deleted policy `name` ([]), or
        `timeout` seconds (the nodes it still holds)."""
        self.request_configuration_pass()
        return await self.reconciler.wait_released(name, timeout)


async def start(settings: Settings, policies: PolicyCache | None = None) -> Controller:
    """Connect, build every part, start their tasks. `policies`: Kopf's policy index (None:
    an empty one, for tests that add entries themselves)."""
    api = await settings.credentials.client(
        pool_size=settings.options.concurrency + 16, user_agent=settings.user_agent
    )
    if settings.config.auto_fields():  # `auto` in the config: resolved once, here, and logged
        try:
            settings = replace(settings, config=await discover_at_start(api, settings.config))
        except BaseException:
            await api.close()
            raise
    controller = Controller(settings, api, policies)
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

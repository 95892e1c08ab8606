"""The controller, started in one place: `await start(settings, policies)` returns it.

    Settings (frozen: credentials, options, operator config), Kopf's policy index
      -> start(): one API client, one Event poster; the informers (kubeapi.list_watch: Nodes,
                  the pod index of the pods holding GPU resources, the claim index of the
                  ResourceClaims' drivers and unallocated requests, DaemonSets, the named
                  ConfigMaps and the scheduler Deployment) and the read-only cache they fill
                  (`controller.cache`); the configuration state; the policy reconciler (with
                  its node and status writers and the rollout), the configuration reconciler,
                  the unschedulable pod warnings; their tasks
      -> Controller.stop()

Kopf (controller.handlers) calls `start` from its start-up handler, once this replica leads
(controller.leader), and `stop` from its clean-up; its policy handlers call `policy_changed`,
`policy_gone` and `release`. The callbacks here only turn events (a watch event, the end of a
configuration pass) into requests for work (and a pending GPU or claim pod into its fit check);
the reconcilers do the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.cache import ClusterCache, ConfigurationState
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
from vgpu_operator.controller.reconciler import Reconciler, ReconcilerOptions
from vgpu_operator.controller.rollout import PluginReadings, RolloutDriver
from vgpu_operator.controller.snapshot import (
    collection_path,
    compact_daemonset,
    watched_objects,
)
from vgpu_operator.controller.unschedulable import UnschedulableWarnings
from vgpu_operator.controller.volcano import VolcanoOptions, VolcanoReconciler
from vgpu_operator.core.findings import ConditionValue
from vgpu_operator.core.rollout.gpu_pods import gpu_resources
from vgpu_operator.core.volcano.dra_kubelet_plugin import dra_gpu_container
from vgpu_operator.core.volcano.plugin_refusal import plugin_node_values
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.kubeapi.events import EventPoster
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.volcano import registration
from vgpu_operator.models.volcano_views import workload_view

log = logging.getLogger("vgpu_operator.controller")

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
    # The AdmissionPoliciesEnforced condition of every policy, as the admission check says it
    # now (controller.admission_guard; None: no such condition, for a controller started
    # without the runtime and its check, as unit tests start one)
    admission: Callable[[], ConditionValue] | None = None


class Controller:
    """The running controller. Made by `start`; every part exists from construction on."""

    def __init__(
        self, settings: Settings, api: kubeapi.Client, policies: PolicyCache | None = None
    ) -> None:
        self.settings = settings
        self.api = api
        config = settings.config
        configuring = settings.volcano.enabled  # a configuration reconciler runs
        self.events = EventPoster(
            api, component=USER_AGENT, instance=settings.user_agent, field_manager=None
        )
        # What the informers fill and the passes read, with Kopf's index (held even while it
        # is empty, as it is at start-up) or, for tests, an empty one
        index = policies if policies is not None else PolicyCache()
        self.cache = self.watches(config, index, configuring)
        # What the configuration reconciler's passes publish (None: it does not run).
        self.configuration = ConfigurationState() if configuring else None
        self.unschedulable = UnschedulableWarnings(
            self.events, fresh=self.snapshot_fresh, claims=self.cache.claims.asks
        )
        readings = PluginReadings(self.configuration, enforced=config.mode == "enforce")
        self.reconciler = Reconciler(
            api,
            self.cache,
            self.events,
            settings.options,
            rollout=RolloutDriver(api, self.events, self.cache, readings),
            configuration=self.configuration,
            admission=settings.admission,
        )
        self.volcano: VolcanoReconciler | None = None  # off when the options say so
        if self.configuration is not None:
            self.volcano = VolcanoReconciler(
                api=api,
                config=config,
                post_event=self.events,
                options=settings.volcano,
                cache=self.cache,
                published=self.configuration,
                passed=self.configuration_passed,
                nodes_idle=self.reconciler.idle,
            )
        self.tasks: list[asyncio.Task[None]] = []

    def watches(
        self, config: OperatorConfig, policies: PolicyCache, configuring: bool
    ) -> ClusterCache:
        """The informers, their callbacks this controller's, and the cache they fill with Kopf's
        policy index. The DaemonSets and the named objects are watched for the configuration
        reconciler only (`configuring`)."""
        api = self.api
        return ClusterCache(
            config,
            nodes=Informer(
                api,
                "nodes",
                kubeapi.node_path(),
                indexed_node,
                self.node_event,
                # A listing of thousands of Nodes is cut down page by page, not held whole:
                # held whole, 5,000 Nodes as kwok keeps them left the process 100 MiB larger.
                kubeapi.WatchOptions(page_size=PAGE, reduce=kept_node),
            ),
            policies=policies,
            pods=PodIndex(api, gpu_resources(config), self.pod_event),
            claims=ClaimIndex(api, on_ask=self.claim_event),
            daemonsets=(
                Informer(
                    api,
                    "daemonsets",
                    DAEMONSETS_PATH,
                    compact_daemonset,
                    self.daemonset_event,
                    key=namespaced_name,
                )
                if configuring
                else None
            ),
            # The configured ConfigMaps and the scheduler Deployment, each watched by name
            # (the chart's Roles grant only these names): any event asks for a configuration
            # pass.
            named=[
                Informer(
                    api,
                    kind.lower(),
                    collection_path(kind, namespace),
                    resource_version,
                    self.named_event,
                    kubeapi.WatchOptions(field_selector=f"metadata.name={name}"),
                    key=namespaced_name,
                )
                for kind, namespace, name in (watched_objects(config) if configuring else ())
            ],
        )

    def launch(self) -> None:
        cache = self.cache
        tasks = {
            "vgpu-watch-nodes": cache.nodes.run(),
            "vgpu-policies-listed": cache.policies.wait_listed(self.api),
            "vgpu-watch-pods": cache.pods.run(),
            "vgpu-watch-resourceclaims": cache.claims.run(),
            # No pass before both listings are in: with the policies not yet known, every
            # owned node would look like a node of a deleted policy, and be cleaned.
            "vgpu-reconciler": after(cache.wait_reconcile_sources(), self.reconciler.run()),
        }
        if self.volcano is not None and cache.daemonsets is not None:
            tasks["vgpu-watch-daemonsets"] = cache.daemonsets.run()
            for i, informer in enumerate(cache.named):
                tasks[f"vgpu-watch-{informer.kind}-{i}"] = informer.run()
            # Nor a configuration pass before the pods and DaemonSets are in: it reads them
            # from there, and lists no Pod or DaemonSet across the cluster.
            tasks["vgpu-volcano"] = after(cache.wait_sources(), self.volcano.run())
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

    def snapshot_fresh(self) -> bool:
        """The last configuration pass's snapshot still holds: no pass is due, no Node is
        being written."""
        return self.volcano is not None and not self.volcano.due() and self.reconciler.idle.is_set()

    # -- requests from the configuration passes ---------------------------------------------
    def configuration_passed(self, snapshot: ClusterSnapshot, findings_changed: bool) -> None:
        """A configuration pass published `snapshot` (and its findings)."""
        if findings_changed:
            self.reconciler.request_full()  # the policies' ConfigConsistent condition
        self.reconciler.configuration_published(snapshot)  # which policies are refused
        pods = self.cache.pods
        pods.snapshot_taken(snapshot)  # NVIDIA's device plugin's renamed resources
        try:
            self.unschedulable.snapshot_taken(snapshot, pods.unbound())
        except Exception:  # the warnings must not fail the configuration pass
            log.exception("checking pending GPU pods failed")
        rollout = self.reconciler.rollout
        if rollout is not None and rollout.waiting_on_configuration:
            # the plugin pod left or the node-config entry was rewritten: the next step may go
            self.reconciler.request_nodes(rollout.waiting_on_configuration)
        observer = self.reconciler.observer  # mode: observe (controller.observe)
        parsed = [p.parsed for p in self.cache.policies.items.values()]
        if observer is not None and observer.configuration(snapshot, parsed):
            self.reconciler.request_full()  # the policies' Observed condition

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
        if self.reconciler.node_writer.is_own_write(change.name, facts):
            return  # the echo of the operator's own PATCH
        self.reconciler.request_nodes([change.name])

    async def pod_event(self, change: Change[Obj]) -> None:
        """A GPU pod came, changed or went: a pending one gets its fit check."""
        await self.unschedulable.pod_changed(change)

    async def claim_event(self, key: str) -> None:
        """A ResourceClaim not yet allocated came or changed: the pending pods holding it get
        their fit check again."""
        await self.unschedulable.claim_changed(key, self.cache.pods.unbound())

    async def named_event(self, change: Change[str]) -> None:
        """A configured ConfigMap or the scheduler Deployment came, changed or went."""
        self.request_configuration_pass()

    async def daemonset_event(self, change: Change[Obj]) -> None:
        """A configured plugin DaemonSet: a pass on every event (its rollout shows in its
        status); any other: when it came, went or its spec changed (the rules look for
        MindCluster and NVIDIA device plugins and the GPUs' second owners among them; NVIDIA's
        DRA kubelet plugin holds static layouts, `controller.reconciler`)."""
        if self.volcano is None:
            return
        meta = change.obj.get("metadata") or {}
        named = (meta.get("namespace"), str(meta.get("name", "")))
        gone = change.type == DELETED  # (a deletion's item is its last state: the same spec)
        respecced = gone or daemonset_spec(change.previous) != daemonset_spec(change.item)
        if self.volcano.watches("DaemonSet", *named) or respecced:
            self.request_configuration_pass()
        if respecced and dra_gpu_container(workload_view(change.obj)) is not None:
            # NVIDIA's DRA kubelet plugin came, went or moved: the nodes whose static layout it
            # holds are planned again now, not after the configuration pass that follows
            self.reconciler.request_full()
        ref = self.settings.config.device_plugin
        if named == (ref.namespace, ref.name):  # which policies are refused may change
            config = self.settings.config
            before = plugin_node_values(change.previous, config) if change.previous else None
            if before != (None if gone else plugin_node_values(change.item, config)):
                self.reconciler.request_full()

    # -- requests from Kopf's policy handlers (controller.handlers) -------------------------
    def policy_changed(self) -> None:
        """A policy was created, changed, resumed or marked for deletion: one full pass of each
        reconciler (priorities and conflicts are cluster-wide: no policy is planned alone)."""
        self.reconciler.request_full()
        self.request_configuration_pass()

    def policy_gone(self, name: str) -> None:
        """A policy left the cluster (its index entry is gone): statuses and gauges again."""
        self.reconciler.status_writer.forget_policy(name)
        self.policy_changed()

    async def release(self, name: str, timeout: float) -> list[str]:
        """Until the reconciler has released every node of the deleted policy `name` ([]), or
        `timeout` seconds (the nodes it still holds)."""
        self.request_configuration_pass()
        return await self.reconciler.status_writer.wait_released(name, timeout)


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

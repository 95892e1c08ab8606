"""The operator's Kopf handlers: the whole of what Kopf reacts to, in one registry.

- login, start-up, clean-up: credentials for Kopf's watches; the controller started with Kopf's
  policy index, and stopped (`controller.runtime.Runtime`).
- VGPUNodePolicies: an index (`policies`: the controller's read-only view of every policy), and
  the lifecycle. Creation, a change of spec, labels or annotations, and the resumption of every
  policy when Kopf starts wake the reconcilers for one pass over the whole cluster (priorities
  and conflicts are cluster-wide: no handler plans one policy alone). Deletion waits until the
  reconciler reports that the policy's nodes are released; Kopf's finalizer
  (`vgpu.volcano.sh/finalizer`, the name earlier releases put on the policies) holds the policy
  until then. In observe mode the deletion handler is optional: Kopf puts no finalizer on a
  policy (observe releases no node, so it holds no deletion). Status is the reconciler's own
  PATCH, not Kopf's: it is computed from every node in the same pass.

Nodes, Pods, DaemonSets, and by name the configured ConfigMaps and the scheduler Deployment are
watched by the controller's informers (`controller.informer`), not by Kopf: docs/architecture.md
gives the figures and the reasons kind by kind.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import kopf

from vgpu_operator import contract
from vgpu_operator.controller.app import Controller
from vgpu_operator.controller.policies import INDEX, KopfIndex, index_entry
from vgpu_operator.controller.runtime import Runtime

log = logging.getLogger("vgpu_operator.handlers")

POLICIES = (contract.GROUP, contract.VERSION, contract.POLICY_PLURAL)
# How long Kopf's deletion handler waits for the reconciler's release before it hands the
# policy back to Kopf. Kopf processes one object's events in order, so while the handler waits,
# the policy's index entry stands still (an edit of a policy being deleted, such as cleanup's
# evict-gpu-pods annotation, would not reach the reconciler): the wait is short, and Kopf
# retries after RELEASE_RETRY seconds, or at once when the policy changes (each retry is one
# Kopf write to the policy, its progress annotation).
RELEASE_WAIT = 5.0
RELEASE_RETRY = 20.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class NamedConnection(kopf.ConnectionInfo):
    """Kopf's connection, sending the controller's own User-Agent: the audit log tells the
    replicas apart by it (Kopf sends `kopf/<version>` only where no User-Agent is set)."""

    user_agent: str = ""

    def as_http_headers(self) -> dict[str, str]:
        headers = super().as_http_headers()
        if self.user_agent:
            headers["User-Agent"] = self.user_agent
        return headers


def configure_settings(settings: kopf.OperatorSettings) -> None:
    """Kopf's settings: the operator's finalizer and prefixes, timeouts on every watch."""
    settings.persistence.finalizer = contract.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=contract.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=contract.GROUP, key="last-handled-configuration"
    )
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 310
    settings.watching.connect_timeout = 30
    settings.watching.reconnect_backoff = 1.0
    settings.networking.request_timeout = 60
    settings.scanning.disabled = True  # cluster-wide; no namespace/CRD discovery needed
    # The reconcilers post the operator's Events, aggregated per policy and node; Kopf's own
    # (one per handler outcome) would repeat them.
    settings.posting.enabled = False


def build_registry(runtime: Runtime) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    observe = runtime.settings.options.observe

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        # Called again by Kopf on a 401: the credentials are loaded anew each time.
        info = await runtime.settings.credentials.connection_info()
        fields = {f.name: getattr(info, f.name) for f in dataclasses.fields(info)}
        return NamedConnection(**fields, user_agent=runtime.settings.user_agent)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        configure_settings(settings)
        index: KopfIndex = kwargs[INDEX]  # Kopf hands its (still empty) indices to start-up
        await runtime.startup(index)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await runtime.cleanup()

    @kopf.index(*POLICIES, id=INDEX, registry=registry)
    def policies(body: kopf.Body, **_: Any) -> dict[str, Any]:
        return index_entry(body)

    @kopf.on.create(*POLICIES, id="policy_changed", registry=registry)
    @kopf.on.update(*POLICIES, id="policy_changed", registry=registry)
    @kopf.on.resume(*POLICIES, id="policy_changed", registry=registry)
    async def policy_changed(**_: Any) -> None:
        controller(runtime).policy_changed()

    @kopf.on.delete(*POLICIES, id="policy_deleted", registry=registry, optional=observe)
    async def policy_deleted(name: str, **_: Any) -> None:
        running = controller(runtime)
        if observe:
            running.policy_changed()
            return
        still = await running.release(name, RELEASE_WAIT)
        if still:
            shown = ", ".join(still[:5]) + (f" and {len(still) - 5} more" if len(still) > 5 else "")
            raise kopf.TemporaryError(
                f"{len(still)} node(s) still to release: {shown}", delay=RELEASE_RETRY
            )

    @kopf.on.event(*POLICIES, id="policy_gone", registry=registry)
    async def policy_gone(name: str, type: str | None, **_: Any) -> None:
        if type == "DELETED":  # Kopf's index has dropped it
            controller(runtime).policy_gone(name)

    return registry


def controller(runtime: Runtime) -> Controller:
    """The running controller (Kopf calls resource handlers only after its start-up)."""
    if runtime.controller is None:
        raise kopf.TemporaryError("the controller is not running yet", delay=1)
    return runtime.controller

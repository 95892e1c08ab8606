"""Every reason a pending pod can never be scheduled, in one place: the vGPU checks
(core.volcano.unschedulable, against the vGPU nodes) and the DRA checks (core.dra.unschedulable,
against what the DRA nodes publish). Pure.

The two meet where a DeviceClass of the configured DRA driver maps an extended resource onto its
devices (`spec.extendedResourceName`, Kubernetes 1.36+: core.dra.selectors): a pod asking that
resource can then be served by the DRA nodes, so the vGPU causes, which count only the vGPU
nodes, are not certain and are not said when the DRA nodes may hold what it asks
(`core.dra.unschedulable.serves_extended`). Legacy GPU sharing asked while the scheduler's switch
is off (`gpu-sharing-off`) stays: no DeviceClass changes what the scheduler's switch does. On a
cluster that maps nothing (1.35 and before: the apiserver drops the field) the vGPU causes are
exactly what core.volcano.unschedulable says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from vgpu_operator import contract
from vgpu_operator.core.dra.driver import RESOURCE_API
from vgpu_operator.core.dra.unschedulable import (
    ClaimCause,
    DraOffer,
    claim_causes,
    offer,
    serves_extended,
)
from vgpu_operator.core.volcano import node_inputs
from vgpu_operator.core.volcano.fit_context import FitContext, fit_context
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, annotations_of, name_of
from vgpu_operator.core.volcano.unschedulable import Cause, causes, pending

Obj = Mapping[str, Any]
AnyCause: TypeAlias = Cause | ClaimCause

# the vGPU causes a DRA-served extended resource does not change
KEPT_WHEN_DRA_SERVES = frozenset({"gpu-sharing-off"})


@dataclass(frozen=True)
class NeverFitContext:
    """What the checks compare a pod with: the vGPU nodes, and the DRA nodes' offer (None: the
    operator config has no `dra` section, or the DRA API was not read or is not served)."""

    vgpu: FitContext
    dra: DraOffer | None = None


def dra_offer(s: ClusterSnapshot) -> DraOffer | None:
    """The DRA nodes' offer in a snapshot: nodes released or targeted into a dra pool; those not
    settled there (released elsewhere, targeted elsewhere, or in a transition) are not known."""
    dra, api = s.config.dra, s.dra_api
    if dra is None or api is None or RESOURCE_API not in api.served:
        return None
    names = [name_of(n) for n in s.dra_nodes]
    settled = set()
    for node in s.plugin_nodes("dra"):
        target = node_inputs.target(node)
        moving = contract.ANN_ROLLOUT in annotations_of(node)
        if not moving and (target is None or target.mode == "dra"):
            settled.add(name_of(node))
    return offer(
        api.device_classes,
        api.resource_slices,
        names,
        driver=dra.driver,
        unsettled=[n for n in names if n not in settled],
    )


def never_fit_context(s: ClusterSnapshot) -> NeverFitContext:
    return NeverFitContext(fit_context(s), dra_offer(s))


def pod_causes(pod: Obj, ctx: NeverFitContext, claims: Mapping[str, Obj]) -> list[AnyCause]:
    """Why this pending pod can never be scheduled; empty when it can (or is not pending).
    `claims`: "namespace/name" -> a ResourceClaim's spec or what `claim_ask` keeps of it (the
    claims not there are not checked)."""
    if not pending(pod):
        return []
    found: list[AnyCause] = list(causes(pod, ctx.vgpu))
    if ctx.dra is None:
        return found
    if found and serves_extended(pod, ctx.vgpu.vgpu_names, ctx.dra):
        found = [c for c in found if c.id in KEPT_WHEN_DRA_SERVES]
    return [*found, *claim_causes(pod, claims, ctx.dra)]

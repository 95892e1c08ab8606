"""Which `dra` pools the cluster's installation of NVIDIA's DRA driver can serve. Pure.

A dra policy the installation cannot serve is *refused* (`ParsedPolicy.refused`): held as if
suspended, its nodes keep what they have, its status says Stalled naming the field, the gate or
the conflict and the fix (as `core.volcano.plugin_refusal` refuses what HAMi's plugin cannot
apply). Refused:

- any dra policy while the operator config has no `dra` section: the operator would not know
  which DaemonSet is the driver's kubelet plugin, so it could not place it on the pool;
- `devices: dynamic-mig` while the config's `dra.dynamicMIG` is false: the driver partitions per
  claim only under its alpha `DynamicMIG` feature gate, off by default
  (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:pkg/featuregates/featuregates.go), and the
  operator cannot read a kubelet plugin's gates, so it goes by what the config says;
- `devices: dynamic-mig` beside a `static-mig` pool: both are served by the one installation, and
  with `DynamicMIG` on its kubelet plugin destroys at start every MIG device it did not create
  (`DestroyUnknownMIGDevices`, kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
  cmd/gpu-kubelet-plugin/device_state.go), the static pool's layout included;
- `devices: static-mig` while `dra.dynamicMIG` is true, for the same reason.

A policy being deleted, or invalid, is left as it is (its nodes leave as any deletion's do).
"""

from __future__ import annotations

from collections.abc import Iterable

from vgpu_operator.core.nodes.validate import ParsedPolicy, Problem
from vgpu_operator.models.config_dra import DraInstallation
from vgpu_operator.models.policy import VGPUNodePolicy

__all__ = ["DRA_REFUSED", "dra_refusals", "refuse_unservable_dra"]

DRA_REFUSED = "DraDriverCannotServe"

_KEEP = "(no node is taken, its nodes keep their configuration)"
# Partitionable devices (KEP-4815): alpha and off through Kubernetes 1.35, beta and on from 1.36.
_PARTITIONS = (
    "dynamic MIG also needs Kubernetes' DRAPartitionableDevices feature gate (beta and on from "
    "1.36; alpha and off through 1.35) in kube-apiserver and kube-scheduler, and in vc-scheduler's "
    "own --feature-gates for Volcano jobs"
)


def _static_pools(policies: Iterable[ParsedPolicy]) -> list[str]:
    return sorted(
        p.name
        for p in policies
        if p.usable
        and p.policy is not None
        and not p.deleting
        and p.policy.spec.mode == "dra"
        and p.policy.spec.effective_dra().devices == "static-mig"
    )


def dra_refusals(
    policy: VGPUNodePolicy, dra: DraInstallation | None, static_pools: Iterable[str] = ()
) -> list[Problem]:
    """Why the driver installation `dra` (None: the operator config has none) cannot serve
    `policy` (empty: it can, or the policy is not a dra pool). `static_pools`: the dra policies
    whose pools use static MIG."""
    spec = policy.spec
    if spec.mode != "dra":
        return []
    if dra is None:
        return [
            Problem(
                field="spec.mode",
                reason=DRA_REFUSED,
                message="mode dra needs the operator config's `dra` section: without it the "
                "operator does not know which DaemonSet runs the DRA driver's kubelet plugin and "
                f"cannot place it on the pool's nodes; the policy is refused {_KEEP}",
                fix="set dra.kubeletPluginDaemonSet (namespace, name) and dra.dynamicMIG in the "
                "operator config (the chart's config.dra), or use another mode",
            )
        ]
    ds = f"{dra.kubelet_plugin_daemon_set.namespace}/{dra.kubelet_plugin_daemon_set.name}"
    devices = spec.effective_dra().devices
    out: list[Problem] = []
    if devices == "dynamic-mig" and not dra.dynamic_mig:
        out.append(
            Problem(
                field="spec.dra.devices",
                reason=DRA_REFUSED,
                message="dynamic-mig needs the DRA driver's DynamicMIG feature gate (alpha, off "
                f"by default) and the operator config says it is off (dra.dynamicMIG: false) "
                f"for the installation of {ds}; {_PARTITIONS}; the policy is refused {_KEEP}",
                fix="install the driver with featureGates DynamicMIG=true and set "
                "dra.dynamicMIG: true in the operator config, or use devices static-mig with a "
                "layout",
            )
        )
    others = [name for name in static_pools if name != policy.name]
    if devices == "dynamic-mig" and others:
        out.append(
            Problem(
                field="spec.dra.devices",
                reason=DRA_REFUSED,
                message=f"dynamic-mig shares the driver installation of {ds} with the static-mig "
                f"pool of {', '.join(others)}: with DynamicMIG on, its kubelet plugin destroys "
                "at start every MIG device it did not create, that pool's layout included; the "
                f"policy is refused {_KEEP}",
                fix="use devices static-mig here too, or move the static-mig pool to another "
                "mode (one DynamicMIG setting per driver installation)",
            )
        )
    if devices == "static-mig" and dra.dynamic_mig:
        out.append(
            Problem(
                field="spec.dra.devices",
                reason=DRA_REFUSED,
                message=f"static-mig under the driver installation of {ds}, whose DynamicMIG "
                "feature gate is on (dra.dynamicMIG: true): its kubelet plugin destroys at start "
                "every MIG device it did not create, the layout the agent applies included; the "
                f"policy is refused {_KEEP}",
                fix="use devices dynamic-mig (the driver partitions per claim), or whole-gpu",
            )
        )
    return out


def refuse_unservable_dra(
    policies: Iterable[ParsedPolicy], dra: DraInstallation | None
) -> list[ParsedPolicy]:
    """The policies, each dra pool the installation cannot serve marked refused (its problems
    added to any it has); a policy being deleted, or invalid, is left as it is."""
    parsed = list(policies)
    static = _static_pools(parsed)
    return [p.refuse_for(lambda policy: dra_refusals(policy, dra, static)) for p in parsed]

"""Who else drives MIG on a node, as the node itself shows it: one decision, read by the node
agent (which applies no static layout where another owner is found: `agent.decide`) and by the
rules that name the second owners (`core.rules.second_owners`). Labels and annotations only:
the agent can read nothing but its own Node.

- the GPU Operator's mig-manager: its DaemonSet runs where `nvidia.com/gpu.deploy.mig-manager`
  is `true` (NVIDIA/gpu-operator@v26.7.0:assets/state-mig-manager/0600_daemonset.yaml) and
  applies the mig-parted configuration the node's `nvidia.com/mig.config` names
  (NVIDIA/mig-parted@v0.15.0:cmd/nvidia-mig-manager); `false` (a policy's
  `disableNvidiaMigManager`) means it is not deployed there, whatever `mig.config` still says
  (the GPU Operator labels MIG-capable nodes `all-disabled` by default); any other value, or a
  `mig.config` without the deploy label, counts as configured;
- HAMi's own device plugin (Project-HAMi/HAMi@v2.10.0, not Volcano's
  volcano-vgpu-device-plugin): it registers the node's GPUs in the annotation
  `hami.io/node-nvidia-register` (Project-HAMi/HAMi@v2.10.0:pkg/device/nvidia/device.go
  `RegisterAnnos`, written by pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go) and,
  in its MIG mode, creates and destroys GPU instances itself
  (Project-HAMi/HAMi@v2.10.0:pkg/device-plugin/nvidiadevice/nvinternal/plugin/migmgr.go).

NVIDIA's DRA driver leaves nothing on the Node (its kubelet plugin publishes ResourceSlices), so
the agent cannot see it: the controller does, from the driver's DaemonSet
(`core.volcano.dra_kubelet_plugin`), and releases no static MIG layout to a node its kubelet
plugin reaches (`layout_held`, read by `core.nodes.planner` and `core.rollout.decide`); the rule
`dra-driver-conflict` names the same nodes with the same fix (`DRA_FIX`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from vgpu_operator.models.node import (
    GPU_OPERATOR_MIG_CONFIG_LABEL,
    GPU_OPERATOR_MIG_MANAGER_LABEL,
    NodeConfig,
)

HAMI_REGISTER_ANNOTATION: Final = "hami.io/node-nvidia-register"

MIG_MANAGER = "the GPU Operator's mig-manager"
HAMI_DEVICE_PLUGIN = "HAMi's own device plugin (hami-device-plugin)"

MIG_MANAGER_FIX = (
    "set disableNvidiaMigManager: true on the node's policy (it labels the node "
    f"{GPU_OPERATOR_MIG_MANAGER_LABEL}=false), or remove the GPU Operator's MIG labels"
)
DRA_KUBELET_PLUGIN = "the kubelet plugin of NVIDIA's DRA driver"
DRA_FIX = (
    "keep the kubelet plugin off these nodes (the driver chart's kubeletPlugin.nodeSelector or "
    "kubeletPlugin.affinity: select only the nodes meant for DRA), or move these nodes to a pool "
    "that hands their GPUs out through DRA"
)
HAMI_FIX = (
    "keep HAMi's own device plugin off the node (its chart's devicePlugin.nvidiaNodeSelector, "
    '`gpu: "on"` by default: remove that label from the node, or uninstall HAMi\'s chart when '
    f"Volcano schedules the GPUs), then remove the stale {HAMI_REGISTER_ANNOTATION} annotation"
)


@dataclass(frozen=True)
class OtherOwner:
    """Another component that drives the node's MIG layout, with what on the Node says so."""

    component: str
    evidence: str  # the labels as `key=value`, or the annotation's key
    fix: str
    how: str = "is configured on this node"  # what the evidence says the component does

    @property
    def said(self) -> str:
        return f"{self.component} {self.how} ({self.evidence})"


def gpu_operator_mig_manager(labels: Mapping[str, str]) -> str | None:
    """How the GPU Operator's mig-manager is configured on a node (its labels as `key=value`),
    or None when it is not (see the module's docstring)."""
    deploy = labels.get(GPU_OPERATOR_MIG_MANAGER_LABEL)
    config = labels.get(GPU_OPERATOR_MIG_CONFIG_LABEL)
    if deploy == "false" or (deploy is None and config is None):
        return None
    said = [
        f"{k}={v}"
        for k, v in (
            (GPU_OPERATOR_MIG_MANAGER_LABEL, deploy),
            (GPU_OPERATOR_MIG_CONFIG_LABEL, config),
        )
        if v is not None
    ]
    return ", ".join(said)


def other_owners(
    labels: Mapping[str, str], annotations: Mapping[str, str]
) -> tuple[OtherOwner, ...]:
    """Every other MIG owner the node's labels and annotations show, in a fixed order."""
    found: list[OtherOwner] = []
    manager = gpu_operator_mig_manager(labels)
    if manager is not None:
        found.append(OtherOwner(MIG_MANAGER, manager, MIG_MANAGER_FIX))
    if annotations.get(HAMI_REGISTER_ANNOTATION):
        found.append(
            OtherOwner(
                HAMI_DEVICE_PLUGIN,
                HAMI_REGISTER_ANNOTATION,
                HAMI_FIX,
                how="has registered this node's GPUs",
            )
        )
    return tuple(found)


def dra_kubelet_plugin(daemonset: str, *, dynamic_mig: bool) -> OtherOwner:
    """NVIDIA's DRA kubelet plugin as a node's other MIG owner: `daemonset` its
    `namespace/name`, `dynamic_mig` whether its `DynamicMIG` feature gate is on (it then creates
    and destroys MIG devices itself; off, it hands out the MIG devices it finds)."""
    gate = (
        "DynamicMIG on: it creates and destroys MIG devices itself"
        if dynamic_mig
        else "DynamicMIG off: it hands out the MIG devices it finds for ResourceClaims"
    )
    return OtherOwner(
        DRA_KUBELET_PLUGIN, f"DaemonSet {daemonset}, {gate}", DRA_FIX, how="reaches this node"
    )


LAYOUT_HELD = "AnotherMIGManager"  # the reason, as the agent's Event for its own refusal says it


def layout_held(
    node: str, target: NodeConfig | None, owners: Mapping[str, OtherOwner] | None
) -> OtherOwner | None:
    """The other owner for whom the controller releases no static MIG layout to `node` (None:
    it may): `target` is the node's desired configuration, `owners` the other MIG owners the
    controller sees by node name (`core.volcano.dra_kubelet_plugin.layout_owners`). One MIG
    manager per GPU: the agent applies what is released, so a layout released beside another
    owner would have both create and destroy instances on the same GPUs. A `dra` pool's nodes
    are the driver's own (`core.nodes.dra_pools` decides what it may serve): never held here."""
    if owners is None or not agent_partitions(target):
        return None
    return owners.get(node)


def agent_partitions(target: NodeConfig | None) -> bool:
    """Whether the node agent applies a static MIG layout for `target` (mode mig, static)."""
    if target is None or target.mode != "mig" or target.gpu_mig is None:
        return False
    return target.gpu_mig.partitioning == "static"

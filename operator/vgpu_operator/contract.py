"""The node contract: label and annotation names shared by the controller, the agent and rollout.

Every key the operator, the node agent and the transition logic read or write on a Node is named
here and only here (docs/architecture.md, "The node contract").
"""

from __future__ import annotations

from typing import Final, Literal

GROUP: Final = "vgpu.volcano.sh"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
POLICY_KIND: Final = "VGPUNodePolicy"
POLICY_PLURAL: Final = "vgpunodepolicies"
POLICY_SINGULAR: Final = "vgpunodepolicy"
POLICY_SHORT: Final = "vnp"
CATEGORY: Final = "vgpu"

# Labels.
LABEL_POLICY: Final = f"{GROUP}/policy"  # controller: name of the owning policy
LABEL_MODE: Final = f"{GROUP}/mode"  # controller: hami-core | mig | whole-gpu | ascend-vnpu | dra
LABEL_STATE: Final = f"{GROUP}/state"  # agent: pending | applying | success | failed | blocked
LABEL_EXCLUDE: Final = f"{GROUP}/exclude"  # user: "true" keeps the node out of every policy
# controller: which device plugin must run on the node, `hami` (HAMi's vGPU plugin: hami-core and
# dynamic MIG), `ascend` (HAMi's Ascend plugin) or `dra` (the kubelet plugin of NVIDIA's DRA
# driver: dra nodes); absent where none of them belongs (whole-gpu, static MIG: NVIDIA's device
# plugin serves those). The plugin DaemonSets select on it.
LABEL_DEVICE_PLUGIN: Final = f"{GROUP}/device-plugin"

# Annotations (JSON payloads).
ANN_OWNED: Final = f"{GROUP}/owned"  # controller: labels and taints the operator set
ANN_TARGET: Final = f"{GROUP}/target"  # controller: desired node configuration
ANN_CONFIG: Final = f"{GROUP}/config"  # controller: configuration released to the node
ANN_INVENTORY: Final = f"{GROUP}/inventory"  # agent: what the hardware has
ANN_ROLLOUT: Final = f"{GROUP}/rollout"  # controller: transition state machine
# controller: the policy whose deletion left this node as it was (spec.onDelete: Retain)
ANN_RETAINED: Final = f"{GROUP}/retained"

# Annotations the operator keeps on the Volcano/HAMi ConfigMaps it renders.
ANN_OWNED_ENTRIES: Final = f"{GROUP}/owned-entries"  # JSON {node: RFC 3339 of its entry's change}
ANN_DATA_CHANGED_AT: Final = f"{GROUP}/data-changed-at"  # RFC 3339 of the last data change
# JSON {node: [the entries by its name a person wrote, as they were before the operator took the
# node over]}: put back when the node leaves (core.volcano.render.entry_origins)
ANN_ORIGINAL_ENTRIES: Final = f"{GROUP}/original-entries"
# Annotation on HAMi's plugin DaemonSets: the placement patch the operator put there (JSON: the
# nodeSelector entries it set, the tolerations it added; models/placement.py). Cleanup reverts it.
ANN_PLACEMENT: Final = f"{GROUP}/placement"

# Annotation on a policy (`vgpu-operator cleanup` sets it before deleting one): "false" means its
# deletion evicts no GPU pod; a node that runs GPU pods keeps its configuration (and the policy its
# finalizer) until they end (core.rollout.decide). Absent or anything else: drained as usual.
ANN_EVICT_GPU_PODS: Final = f"{GROUP}/evict-gpu-pods"

# The finalizer on policies (own prefix, not Kopf's default).
FINALIZER: Final = f"{GROUP}/finalizer"

# Field manager names for server-side bookkeeping of who wrote what.
FIELD_MANAGER: Final = "vgpu-operator"
AGENT_FIELD_MANAGER: Final = "vgpu-operator-agent"

Mode = Literal["hami-core", "mig", "whole-gpu", "ascend-vnpu", "dra"]
MODES: Final[tuple[Mode, ...]] = ("hami-core", "mig", "whole-gpu", "ascend-vnpu", "dra")

DevicePlugin = Literal["hami", "ascend", "dra"]
DEVICE_PLUGINS: Final[tuple[DevicePlugin, ...]] = ("hami", "ascend", "dra")


def device_plugin_for(mode: str, partitioning: str | None = None) -> DevicePlugin | None:
    """The value of `LABEL_DEVICE_PLUGIN` for a node in `mode` (MIG: with `partitioning`,
    dynamic when unset): HAMi's vGPU plugin serves hami-core and dynamic MIG, HAMi's Ascend plugin
    ascend-vnpu, the DRA driver's kubelet plugin dra (whatever devices it publishes); whole-gpu
    and static MIG nodes are NVIDIA's device plugin's."""
    if mode == "hami-core" or (mode == "mig" and partitioning in (None, "dynamic")):
        return "hami"
    if mode == "ascend-vnpu":
        return "ascend"
    if mode == "dra":
        return "dra"
    return None


AgentState = Literal["pending", "applying", "success", "failed", "blocked"]
AGENT_STATES: Final[tuple[AgentState, ...]] = (
    "pending",
    "applying",
    "success",
    "failed",
    "blocked",
)

# Labels NVIDIA GPU Feature Discovery sets, which the simulated nodes carry too.
GFD_PRODUCT: Final = "nvidia.com/gpu.product"
GFD_COUNT: Final = "nvidia.com/gpu.count"
GFD_MEMORY: Final = "nvidia.com/gpu.memory"
GFD_MIG_CAPABLE: Final = "nvidia.com/mig.capable"
GFD_PRESENT: Final = "nvidia.com/gpu.present"
NVIDIA_GPU_RESOURCE: Final = "nvidia.com/gpu"  # NVIDIA's device plugin's capacity

# Evidence of Ascend NPUs on a node (what the operator itself never writes, unlike `ascend=on`):
# the capacity the Ascend device plugins register (huawei.com/Ascend910, Ascend910B..., and
# Ascend310P; gitcode.com/Ascend/mind-cluster component/ascend-device-plugin
# pkg/common/constants.go, and Project-HAMi/ascend-device-plugin), the chip label that device
# plugin sets (`ChipNameLabel` there), and Node Feature Discovery's PCI label for a processing
# accelerator (class 1200) of Huawei (vendor 19e5), from NFD's default pci label fields
# (https://kubernetes-sigs.github.io/node-feature-discovery/stable/usage/features.html).
ASCEND_RESOURCE_PREFIXES: Final = ("huawei.com/Ascend910", "huawei.com/Ascend310P")
ASCEND_CHIP_LABEL: Final = "node.kubernetes.io/npu.chip.name"
NFD_ASCEND_PCI_LABEL: Final = "feature.node.kubernetes.io/pci-1200_19e5.present"

# The GPU Operator's per-node switch for its device plugin (HAMi #829).
GPU_OPERATOR_DEVICE_PLUGIN_LABEL: Final = "nvidia.com/gpu.deploy.device-plugin"
# The GPU Operator's per-node switch for its mig-manager (NVIDIA/gpu-operator
# assets/state-mig-manager/0600_daemonset.yaml selects nodes on it).
GPU_OPERATOR_MIG_MANAGER_LABEL: Final = "nvidia.com/gpu.deploy.mig-manager"

# Defaults the seeds use.
DEFAULT_NODE_LABELS: Final = {"volcano.sh/vgpu.enabled": "true"}
DEFAULT_TAINT_KEY: Final = "volcano.sh/vgpu"
DEFAULT_TAINT_VALUE: Final = "hami"
DEFAULT_TAINT_EFFECT: Final = "NoSchedule"
ASCEND_DEFAULT_NODE_LABELS: Final = {"ascend": "on"}

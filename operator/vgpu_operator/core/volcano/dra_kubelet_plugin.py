"""Where the GPU kubelet plugin of NVIDIA's DRA driver reaches: one decision, read by the rule
`dra-driver-conflict` (`core.rules.second_owners`, which names the nodes) and by the controller
and `plan`, which release no static MIG layout to a node it reaches (`layout_owners`, handed to
`core.nodes.planner` and `core.rollout.decide`; `core.nodes.gpu_owners.layout_held`).

Which DaemonSet is the driver's is read from what the project ships, under any name or registry:
its chart's pod label (`core.dra.driver.PLUGIN_POD_LABEL`) or its image
`registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu`, the GPU plugin in container `gpus`
running `gpu-kubelet-plugin`, its feature gates in the env `FEATURE_GATES` (or the flag
`--feature-gates`) (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/
dra-driver-nvidia-gpu/templates/kubeletplugin.yaml, values.yaml; pkg/flags/featuregates.go,
pkg/flags/utils.go). With its `DynamicMIG` gate on it destroys, when it starts, every MIG
instance it did not create (`DestroyUnknownMIGDevices`,
kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/driver.go) and creates its
own per claim.

A node is reached when the DaemonSet places a pod there or holds a live pod there
(`core.volcano.placement.reached`). The controller reads the DaemonSets and Nodes as its watches
hold them at each pass, and the pods its last configuration pass read: those of the DaemonSet the
operator config's `dra` section names; of any other, it sees the placement (`doctor` and `plan`
list every pod).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_operator.core.dra.driver import PLUGIN_POD_LABEL
from vgpu_operator.core.nodes.gpu_owners import OtherOwner, dra_kubelet_plugin
from vgpu_operator.core.volcano.placement import reached
from vgpu_operator.core.volcano.snapshot import Obj, name_of
from vgpu_operator.models.volcano_views import (
    ContainerView,
    WorkloadView,
    go_parse_bool,
    workload_view,
)

__all__ = [
    "DRA_GPU_BINARY",
    "DRA_IMAGE",
    "DYNAMIC_MIG",
    "DraKubeletPlugin",
    "dra_gpu_container",
    "dra_kubelet_plugins",
    "feature_gates",
    "image_name",
    "layout_owners",
]

DRA_IMAGE = "dra-driver-nvidia-gpu"
DRA_GPU_BINARY = "gpu-kubelet-plugin"
DYNAMIC_MIG = "DynamicMIG"


def image_name(image: str) -> str:
    """`registry/path/name:tag@digest` -> `name`."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def dra_gpu_container(view: WorkloadView) -> ContainerView | None:
    """The container of the DRA driver's GPU kubelet plugin, or None (not the driver's
    DaemonSet, or one serving compute domains only)."""
    labelled = view.pod_labels.get(PLUGIN_POD_LABEL[0]) == PLUGIN_POD_LABEL[1]
    if not (labelled or any(image_name(c.image) == DRA_IMAGE for c in view.containers)):
        return None
    for c in view.containers:
        if c.name == "gpus" or any(DRA_GPU_BINARY in a for a in c.args):
            return c
    return None


def feature_gates(container: ContainerView) -> dict[str, bool]:
    """The feature gates the container's process starts with: `FEATURE_GATES`, the flag
    overriding it; `key=value` pairs split on ',' (k8s.io/component-base/featuregate `Set`),
    values read as Go's strconv.ParseBool (one that does not read fails the process at start,
    so it counts as nothing)."""
    flag = container.flags.get("feature-gates")
    text = flag.value if flag is not None and flag.value else container.env.get("FEATURE_GATES")
    gates: dict[str, bool] = {}
    for item in (text or "").split(","):
        key, _, value = item.strip().partition("=")
        parsed = go_parse_bool(value.strip())
        if key.strip() and parsed is not None:
            gates[key.strip()] = parsed
    return gates


@dataclass(frozen=True)
class DraKubeletPlugin:
    """One DaemonSet of the driver's GPU kubelet plugin and the nodes it reaches."""

    daemonset: Obj
    view: WorkloadView
    dynamic_mig: bool  # its DynamicMIG feature gate is on
    nodes: tuple[Obj, ...]  # of those asked about, the ones it reaches

    @property
    def owner(self) -> OtherOwner:
        """What a reached node's other MIG owner is (`core.nodes.gpu_owners`)."""
        ref = f"{self.view.namespace}/{self.view.name}"
        return dra_kubelet_plugin(ref, dynamic_mig=self.dynamic_mig)


def dra_kubelet_plugins(
    daemonsets: Iterable[Obj], nodes: Sequence[Obj], pods: Sequence[Mapping[str, Any]]
) -> Iterator[DraKubeletPlugin]:
    """Each DaemonSet of the driver's GPU kubelet plugin among `daemonsets` that reaches one of
    `nodes` (by its placement, or a live pod of it among `pods`)."""
    for ds in daemonsets:
        view = workload_view(ds)
        container = dra_gpu_container(view)
        if container is None:
            continue
        reached_nodes = reached(view, nodes, pods)
        if reached_nodes:
            dynamic = feature_gates(container).get(DYNAMIC_MIG, False)
            yield DraKubeletPlugin(ds, view, dynamic, tuple(reached_nodes))


def layout_owners(
    daemonsets: Iterable[Obj], nodes: Sequence[Obj], pods: Sequence[Mapping[str, Any]]
) -> dict[str, OtherOwner]:
    """Node name -> the DRA kubelet plugin that reaches it (the first such DaemonSet), for each
    of `nodes`: the nodes no static MIG layout is released to. The controller hands in the
    DaemonSets and Nodes its watches hold and the pods its last configuration pass read; `plan`
    the snapshot's."""
    owners: dict[str, OtherOwner] = {}
    for plugin in dra_kubelet_plugins(daemonsets, nodes, pods):
        owner = plugin.owner  # one object shared by its nodes
        for node in plugin.nodes:
            owners.setdefault(name_of(node), owner)
    return owners

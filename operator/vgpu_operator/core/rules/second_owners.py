"""Rules on second owners of the GPUs the operator's pools hand out: components besides the
ones the operator keeps that register the same GPUs or drive their MIG layout. Where one of
them reaches a pool node, a GPU can go to two pods, or MIG instances are destroyed under the
pods using them. NVIDIA's own device plugin on vGPU nodes is `nvidia-device-plugin-conflict`.

- `hami-stack-conflict`: HAMi's own stack (Project-HAMi/HAMi@v2.10.0, its chart
  charts/hami: the `hami-scheduler` Deployment and the `hami-device-plugin` DaemonSet) beside
  Volcano's vGPU plugin: its device plugin registers the GPUs for HAMi's scheduler and, in its MIG
  mode, creates and destroys instances itself
  (Project-HAMi/HAMi@v2.10.0:pkg/device-plugin/nvidiadevice/nvinternal/plugin/migmgr.go);
- `dra-driver-conflict`: the kubelet plugin of NVIDIA's DRA driver
  (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1) on a vGPU or static-MIG node publishes the same
  GPUs for ResourceClaims; with its `DynamicMIG` feature gate it also destroys, when it starts,
  every MIG instance it did not create (`DestroyUnknownMIGDevices`,
  kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/driver.go) and creates its
  own per claim. Nodes of a `dra` pool are its own and not looked at here. Which nodes it
  reaches is `core.volcano.dra_kubelet_plugin`'s decision, the one the controller holds the
  static layouts by (it releases none to such a node: `core.nodes.gpu_owners.layout_held`);
- `mig-manager-conflict`: the GPU Operator's mig-manager configured on a node whose MIG layout
  the agent applies (static) or HAMi's plugin makes (dynamic): it applies the layout its
  `nvidia.com/mig.config` label names (NVIDIA/mig-parted@v0.15.0:pkg/mig/reconfigure/
  reconfigure.go). The agent, seeing the same labels (`core.nodes.gpu_owners`), applies no static
  layout there and reports `blocked`.

Which DaemonSet is which is read from what the projects ship, under any name or registry: a pod
label of their charts or their image's name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_operator.core.nodes.gpu_owners import (
    DRA_FIX,
    HAMI_FIX,
    HAMI_REGISTER_ANNOTATION,
    MIG_MANAGER_FIX,
    agent_partitions,
    gpu_operator_mig_manager,
)
from vgpu_operator.core.rules.base import Issue, ObjectRef, error, rule
from vgpu_operator.core.volcano import node_inputs
from vgpu_operator.core.volcano.dra_kubelet_plugin import (
    DYNAMIC_MIG,
    dra_gpu_container,
    dra_kubelet_plugins,
    feature_gates,
    image_name,
)
from vgpu_operator.core.volcano.placement import reached
from vgpu_operator.core.volcano.snapshot import (
    ClusterSnapshot,
    Obj,
    annotations_of,
    labels_of,
    name_of,
)
from vgpu_operator.models.volcano_views import WorkloadView, workload_view

__all__ = [
    "PoolNodes",
    "check_dra_driver",
    "check_hami_stack",
    "check_mig_manager",
    "dra_gpu_container",
    "feature_gates",
    "image_name",
    "is_hami_device_plugin",
    "is_mig_manager",
    "pool_nodes",
]

# HAMi's chart labels its device plugin's pods `app.kubernetes.io/component: hami-device-plugin`
# and runs it from the image `projecthami/hami`
# (Project-HAMi/HAMi@v2.10.0:charts/hami/templates/device-plugin/daemonsetnvidia.yaml, values.yaml
# `devicePlugin.image`); its default nodeSelector is `gpu: "on"`
# (`devicePlugin.nvidiaNodeSelector`).
HAMI_POD_LABEL = ("app.kubernetes.io/component", "hami-device-plugin")
HAMI_IMAGE = "hami"
# The GPU Operator's mig-manager DaemonSet
# (NVIDIA/gpu-operator@v26.7.0:assets/state-mig-manager/0600_daemonset.yaml).
MIG_MANAGER_NAME = "nvidia-mig-manager"
MIG_MANAGER_POD_LABEL = ("app", "nvidia-mig-manager")

SHOWN = 10  # node names a message lists before "and N more"


def _labelled(view: WorkloadView, label: tuple[str, str]) -> bool:
    return view.pod_labels.get(label[0]) == label[1]


def is_hami_device_plugin(view: WorkloadView) -> bool:
    """HAMi's own device plugin DaemonSet (not Volcano's volcano-vgpu-device-plugin)."""
    return _labelled(view, HAMI_POD_LABEL) or any(
        image_name(c.image) == HAMI_IMAGE for c in view.containers
    )


def is_mig_manager(view: WorkloadView) -> bool:
    return view.name == MIG_MANAGER_NAME or _labelled(view, MIG_MANAGER_POD_LABEL)


# --- the pools' nodes ----------------------------------------------------------------------


@dataclass(frozen=True)
class PoolNodes:
    """The managed nodes a second owner harms: `vgpu` HAMi's vGPU plugin serves (hami-core,
    dynamic MIG), `static` carry a static MIG layout the agent applies."""

    vgpu: tuple[Obj, ...]
    static: tuple[Obj, ...]

    def role(self, node: Mapping[str, Any]) -> str:
        name = name_of(node)
        if any(name_of(n) == name for n in self.static):
            if not agent_partitions(node_inputs.released(node)):
                return "static MIG: no layout released to its agent yet"
            return "static MIG: the agent partitions it"
        return "vGPU: Volcano's HAMi plugin serves it"


def pool_nodes(s: ClusterSnapshot) -> PoolNodes:
    """`static`: released a static layout, or on the way to one (its `target`): a node whose
    layout the controller holds (`core.nodes.gpu_owners.layout_held`) has none released yet."""
    static = [
        n
        for n in s.nodes
        if agent_partitions(s.released(n)) or agent_partitions(node_inputs.target(n))
    ]
    names = {name_of(n) for n in static}
    vgpu = tuple(n for n in s.vgpu_nodes if name_of(n) not in names)
    return PoolNodes(vgpu=vgpu, static=tuple(static))


def _names(nodes: Sequence[Obj], pools: PoolNodes) -> str:
    shown = [f"{name_of(n)} ({pools.role(n)})" for n in nodes[:SHOWN]]
    more = f" and {len(nodes) - SHOWN} more" if len(nodes) > SHOWN else ""
    return ", ".join(shown) + more


def _node_refs(nodes: Sequence[Obj]) -> list[ObjectRef]:
    return [ObjectRef(kind="Node", name=name_of(n)) for n in nodes]


def _daemonsets(s: ClusterSnapshot) -> Iterator[tuple[Obj, WorkloadView]]:
    for ds in s.daemonsets:
        yield ds, workload_view(ds)


# --- the rules -----------------------------------------------------------------------------


@rule("hami-stack-conflict", "HAMi's own device plugin stays off the pools' nodes")
def check_hami_stack(s: ClusterSnapshot) -> Iterator[Issue]:
    pools = pool_nodes(s)
    nodes = [*pools.vgpu, *pools.static]
    covered: set[str] = set()
    for ds, view in _daemonsets(s):
        if not is_hami_device_plugin(view):
            continue
        on = reached(view, nodes, s.pods)
        if not on:
            continue
        covered.update(name_of(n) for n in on)
        yield error(
            (ObjectRef.of("DaemonSet", ds), *_node_refs(on)),
            f"HAMi's own device plugin (DaemonSet {view.namespace}/{view.name}, HAMi's chart, "
            f"which schedules through hami-scheduler) runs on {len(on)} node(s) of the "
            f"operator's pools: {_names(on, pools)}. It registers the same GPUs for "
            "HAMi's scheduler, so one GPU can go to two pods, and in its MIG mode it creates and "
            "destroys MIG instances under the other owner",
            fix=f"{HAMI_FIX}; the pools' GPUs are served by Volcano's vGPU plugin "
            "(volcano-vgpu-device-plugin) and, on static-MIG nodes, NVIDIA's device plugin",
        )
    for node in nodes:
        if name_of(node) in covered or not annotations_of(node).get(HAMI_REGISTER_ANNOTATION):
            continue
        yield error(
            ObjectRef(kind="Node", name=name_of(node)),
            f"HAMi's own device plugin has registered the GPUs of {name_of(node)} "
            f"({pools.role(node)}) in {HAMI_REGISTER_ANNOTATION}: HAMi's scheduler hands them "
            "out too",
            fix=HAMI_FIX,
        )


@rule("dra-driver-conflict", "NVIDIA's DRA driver stays off the vGPU and static-MIG nodes")
def check_dra_driver(s: ClusterSnapshot) -> Iterator[Issue]:
    pools = pool_nodes(s)
    nodes = [*pools.vgpu, *pools.static]
    for plugin in dra_kubelet_plugins(s.daemonsets, nodes, s.pods):
        view, reached_nodes = plugin.view, plugin.nodes
        harm = (
            f"its {DYNAMIC_MIG} feature gate is on: when it starts it destroys every MIG "
            "instance it did not create (the agent's static layouts, the instances HAMi's plugin "
            "made for running pods) and then creates its own for claims"
            if plugin.dynamic_mig
            else "it publishes the same GPUs (and MIG instances) for ResourceClaims, so one GPU "
            "can go to two pods"
        )
        static_names = {name_of(n) for n in pools.static}
        static = [n for n in reached_nodes if name_of(n) in static_names]
        held = (
            f". The operator releases no static MIG layout to {len(static)} of them while it "
            "reaches them (one MIG manager per GPU; the policy's status names them)"
            if static
            else ""
        )
        yield error(
            (ObjectRef.of("DaemonSet", plugin.daemonset), *_node_refs(reached_nodes)),
            f"the kubelet plugin of NVIDIA's DRA driver (DaemonSet {view.namespace}/{view.name}) "
            f"runs on {len(reached_nodes)} node(s) of the operator's vGPU or static-MIG pools: "
            f"{_names(reached_nodes, pools)}; {harm}{held}",
            fix=DRA_FIX
            + (
                f"; with {DYNAMIC_MIG} off it at least leaves MIG instances alone"
                if plugin.dynamic_mig
                else ""
            ),
        )


@rule("mig-manager-conflict", "the GPU Operator's mig-manager is off where MIG is the pool's")
def check_mig_manager(s: ClusterSnapshot) -> Iterator[Issue]:
    pools = pool_nodes(s)
    mig_nodes = [*pools.static, *(n for n in pools.vgpu if s.is_mig(n))]
    configured = [(n, said) for n in mig_nodes if (said := gpu_operator_mig_manager(labels_of(n)))]
    if not configured:
        return
    managers = [
        ObjectRef.of("DaemonSet", ds) for ds, view in _daemonsets(s) if is_mig_manager(view)
    ]
    shown = "; ".join(
        f"{name_of(n)} ({_mig_role(pools, n)}: {said})" for n, said in configured[:SHOWN]
    )
    more = f" and {len(configured) - SHOWN} more" if len(configured) > SHOWN else ""
    policies = sorted(
        {rc.policy for n, _ in configured if (rc := s.released(n)) is not None and rc.policy}
    )
    yield error(
        (*managers, *_node_refs([n for n, _ in configured])),
        f"the GPU Operator's mig-manager is configured on {len(configured)} node(s) whose MIG "
        f"layout is the pool's: {shown}{more}. It applies the layout nvidia.com/mig.config "
        "names and destroys the instances there (on a static-MIG node the agent applies no "
        "layout while it is configured: state blocked)",
        fix=MIG_MANAGER_FIX.replace("the node's policy", f"the policies ({', '.join(policies)})")
        if policies
        else MIG_MANAGER_FIX,
    )


def _mig_role(pools: PoolNodes, node: Mapping[str, Any]) -> str:
    if any(name_of(n) == name_of(node) for n in pools.static):
        return "static MIG, the agent's"
    return "dynamic MIG, HAMi's plugin's"

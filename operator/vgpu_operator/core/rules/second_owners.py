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
  own per claim. Nodes of a `dra` pool are its own and not looked at here;
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

from vgpu_operator.core.dra.driver import PLUGIN_POD_LABEL
from vgpu_operator.core.nodes.gpu_owners import (
    HAMI_FIX,
    HAMI_REGISTER_ANNOTATION,
    MIG_MANAGER_FIX,
    gpu_operator_mig_manager,
)
from vgpu_operator.core.rules.base import Issue, ObjectRef, error, rule
from vgpu_operator.core.volcano.placement import reaches
from vgpu_operator.core.volcano.snapshot import (
    ClusterSnapshot,
    Obj,
    annotations_of,
    labels_of,
    name_of,
    pod_done,
)
from vgpu_operator.models.volcano_views import (
    ContainerView,
    WorkloadView,
    go_parse_bool,
    workload_view,
)

# HAMi's chart labels its device plugin's pods `app.kubernetes.io/component: hami-device-plugin`
# and runs it from the image `projecthami/hami`
# (Project-HAMi/HAMi@v2.10.0:charts/hami/templates/device-plugin/daemonsetnvidia.yaml, values.yaml
# `devicePlugin.image`); its default nodeSelector is `gpu: "on"`
# (`devicePlugin.nvidiaNodeSelector`).
HAMI_POD_LABEL = ("app.kubernetes.io/component", "hami-device-plugin")
HAMI_IMAGE = "hami"
# The DRA driver's chart: image `registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu`, the
# GPU plugin in container `gpus` running `gpu-kubelet-plugin`, its feature gates in the env
# `FEATURE_GATES` (or the flag `--feature-gates`)
# (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/
# templates/kubeletplugin.yaml, values.yaml; pkg/flags/featuregates.go, pkg/flags/utils.go).
DRA_IMAGE = "dra-driver-nvidia-gpu"
DRA_GPU_BINARY = "gpu-kubelet-plugin"
DYNAMIC_MIG = "DynamicMIG"
# The GPU Operator's mig-manager DaemonSet
# (NVIDIA/gpu-operator@v26.7.0:assets/state-mig-manager/0600_daemonset.yaml).
MIG_MANAGER_NAME = "nvidia-mig-manager"
MIG_MANAGER_POD_LABEL = ("app", "nvidia-mig-manager")

SHOWN = 10  # node names a message lists before "and N more"


def image_name(image: str) -> str:
    """`registry/path/name:tag@digest` -> `name`."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def _labelled(view: WorkloadView, label: tuple[str, str]) -> bool:
    return view.pod_labels.get(label[0]) == label[1]


def is_hami_device_plugin(view: WorkloadView) -> bool:
    """HAMi's own device plugin DaemonSet (not Volcano's volcano-vgpu-device-plugin)."""
    return _labelled(view, HAMI_POD_LABEL) or any(
        image_name(c.image) == HAMI_IMAGE for c in view.containers
    )


def dra_gpu_container(view: WorkloadView) -> ContainerView | None:
    """The container of the DRA driver's GPU kubelet plugin, or None (not the driver's
    DaemonSet, or one serving compute domains only)."""
    if not (
        _labelled(view, PLUGIN_POD_LABEL)
        or any(image_name(c.image) == DRA_IMAGE for c in view.containers)
    ):
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
            return "static MIG: the agent partitions it"
        return "vGPU: Volcano's HAMi plugin serves it"


def pool_nodes(s: ClusterSnapshot) -> PoolNodes:
    static = []
    for node in s.managed(("mig",)):
        rc = s.released(node)
        if rc is not None and rc.mig is not None and rc.mig.partitioning == "static":
            static.append(node)
    return PoolNodes(vgpu=tuple(s.vgpu_nodes), static=tuple(static))


def _names(nodes: Sequence[Obj], pools: PoolNodes) -> str:
    shown = [f"{name_of(n)} ({pools.role(n)})" for n in nodes[:SHOWN]]
    more = f" and {len(nodes) - SHOWN} more" if len(nodes) > SHOWN else ""
    return ", ".join(shown) + more


def _node_refs(nodes: Sequence[Obj]) -> list[ObjectRef]:
    return [ObjectRef(kind="Node", name=name_of(n)) for n in nodes]


def _daemonsets(s: ClusterSnapshot) -> Iterator[tuple[Obj, WorkloadView]]:
    for ds in s.daemonsets:
        yield ds, workload_view(ds)


def _reached(s: ClusterSnapshot, view: WorkloadView, nodes: Sequence[Obj]) -> list[Obj]:
    """The nodes the DaemonSet places a pod on now, or holds a live pod on (a NoSchedule taint the
    policy set later keeps new pods off but evicts none; `doctor` sees these pods, the
    controller, which lists only its components' pods, sees the placement)."""
    running = {
        str((p.get("spec") or {}).get("nodeName")) for p in s.pods_of(view) if not pod_done(p)
    }
    return [n for n in nodes if name_of(n) in running or reaches(view, n)]


# --- the rules -----------------------------------------------------------------------------


@rule("hami-stack-conflict", "HAMi's own device plugin stays off the pools' nodes")
def check_hami_stack(s: ClusterSnapshot) -> Iterator[Issue]:
    pools = pool_nodes(s)
    nodes = [*pools.vgpu, *pools.static]
    covered: set[str] = set()
    for ds, view in _daemonsets(s):
        if not is_hami_device_plugin(view):
            continue
        reached = _reached(s, view, nodes)
        if not reached:
            continue
        covered.update(name_of(n) for n in reached)
        yield error(
            (ObjectRef.of("DaemonSet", ds), *_node_refs(reached)),
            f"HAMi's own device plugin (DaemonSet {view.namespace}/{view.name}, HAMi's chart, "
            f"which schedules through hami-scheduler) runs on {len(reached)} node(s) of the "
            f"operator's pools: {_names(reached, pools)}. It registers the same GPUs for "
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
    for ds, view in _daemonsets(s):
        container = dra_gpu_container(view)
        if container is None:
            continue
        reached = _reached(s, view, nodes)
        if not reached:
            continue
        dynamic = feature_gates(container).get(DYNAMIC_MIG, False)
        harm = (
            f"its {DYNAMIC_MIG} feature gate is on: when it starts it destroys every MIG "
            "instance it did not create (the agent's static layouts, the instances HAMi's plugin "
            "made for running pods) and then creates its own for claims"
            if dynamic
            else "it publishes the same GPUs (and MIG instances) for ResourceClaims, so one GPU "
            "can go to two pods"
        )
        yield error(
            (ObjectRef.of("DaemonSet", ds), *_node_refs(reached)),
            f"the kubelet plugin of NVIDIA's DRA driver (DaemonSet {view.namespace}/{view.name}) "
            f"runs on {len(reached)} node(s) of the operator's vGPU or static-MIG pools: "
            f"{_names(reached, pools)}; {harm}",
            fix="keep the kubelet plugin off these nodes (the driver chart's "
            "kubeletPlugin.nodeSelector or kubeletPlugin.affinity: select only the nodes meant "
            "for DRA), or move these nodes to a pool that hands their GPUs out through DRA"
            + (
                f"; with {DYNAMIC_MIG} off it at least leaves MIG instances alone"
                if dynamic
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

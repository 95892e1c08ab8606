"""Rules on the DRA pools (`mode: dra`): the prerequisites of NVIDIA's DRA driver that the API
shows (core.dra.prerequisites: the API served, the DeviceClasses, a ResourceSlice per DRA node,
the kubelet plugin on exactly the DRA nodes, no second owner of their GPUs), and the feature
gates the pools' choices need, each as proven or not observable (core.dra.gates).

They look at the nodes released into a dra pool and out of any transition (a node being moved has
its plugin paused on purpose), and say nothing while the operator config has no `dra` section,
no node is in a dra pool, or the DRA API was not read (`ClusterSnapshot.dra_api`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from vgpu_operator import contract
from vgpu_operator.core.dra import gates
from vgpu_operator.core.dra.prerequisites import (
    DraCluster,
    api_served,
    device_classes,
    node_slices,
    plugin_placement,
    second_owners,
)
from vgpu_operator.core.rules.base import Issue, ObjectRef, error, info, rule
from vgpu_operator.core.volcano.dra_kubelet_plugin import dra_gpu_container, feature_gates
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, annotations_of, name_of
from vgpu_operator.models.findings import Finding
from vgpu_operator.models.volcano import HARDCODED_ALLOCATABLE


def dra_cluster(s: ClusterSnapshot) -> DraCluster | None:
    """What the prerequisite checks read, from the snapshot; None when there is nothing to
    check (no `dra` section, no DRA node, the DRA API not read)."""
    if s.config.dra is None or s.dra_api is None:
        return None
    released = s.plugin_nodes("dra")
    if not released:
        return None
    settled = [n for n in released if contract.ANN_ROLLOUT not in annotations_of(n)]
    ref = s.config.dra.kubelet_plugin_daemon_set
    view = s.dra_plugin
    return DraCluster(
        served=s.dra_api.served,
        device_classes=s.dra_api.device_classes,
        resource_slices=s.dra_api.resource_slices,
        dra_nodes=[name_of(n) for n in settled],
        nodes=s.nodes,
        plugin_pods=s.pods_of(view) if view is not None else [],
        plugin_daemonset=s.daemonset(ref.namespace, ref.name),
        driver=s.config.dra.driver,
        plugin_ref=(ref.namespace, ref.name),
        # what HAMi's plugin registers: the configured count name (the device config the
        # operator renders), and Volcano's hard-coded one
        vgpu_count_names=frozenset({s.config.resource_names.count, HARDCODED_ALLOCATABLE[0]}),
    )


def _issues(found: Iterable[Finding]) -> Iterator[Issue]:
    for f in found:
        yield Issue(f.severity, f.objects, f.message, f.fix)


def _checked(
    s: ClusterSnapshot, check: Callable[[DraCluster], Iterable[Finding]]
) -> Iterator[Issue]:
    """One prerequisite check, once the API is served (`dra-api-not-served` says so first)."""
    c = dra_cluster(s)
    if c is None or any(True for _ in api_served(c)):
        return
    yield from _issues(check(c))


@rule("dra-api-not-served", "the apiserver serves resource.k8s.io/v1 for the DRA pools")
def check_api(s: ClusterSnapshot) -> Iterator[Issue]:
    c = dra_cluster(s)
    if c is not None:
        yield from _issues(api_served(c))


@rule("dra-deviceclass", "the DRA driver's DeviceClasses are present as its chart makes them")
def check_device_classes(s: ClusterSnapshot) -> Iterator[Issue]:
    yield from _checked(s, device_classes)


@rule("dra-node-slices", "every DRA node has the driver's ResourceSlice with devices")
def check_node_slices(s: ClusterSnapshot) -> Iterator[Issue]:
    yield from _checked(s, node_slices)


@rule("dra-plugin-placement", "the DRA kubelet plugin runs on exactly the DRA nodes")
def check_plugin_pods(s: ClusterSnapshot) -> Iterator[Issue]:
    yield from _checked(s, plugin_placement)


@rule("dra-second-owner", "no other device plugin registers a DRA node's GPUs")
def check_second_owner(s: ClusterSnapshot) -> Iterator[Issue]:
    yield from _checked(s, second_owners)


def _dynamic_mig_nodes(s: ClusterSnapshot) -> list[str]:
    out = []
    for node in s.plugin_nodes("dra"):
        config = s.released(node)
        mig = config.gpu_mig if config is not None else None
        if mig is not None and mig.partitioning == "dynamic":
            out.append(name_of(node))
    return out


@rule("dra-feature-gates", "the feature gates the DRA pools need, proven or not observable")
def check_gates(s: ClusterSnapshot) -> Iterator[Issue]:
    c, dra = dra_cluster(s), s.config.dra
    if c is None or dra is None:
        return
    readings = [gates.dynamic_resource_allocation(c.served)]
    dynamic = _dynamic_mig_nodes(s)
    if dynamic:
        driver = dra.driver
        scheduler = s.scheduler_container
        plugin = dra_gpu_container(s.dra_plugin) if s.dra_plugin is not None else None
        readings += [
            gates.partitionable_devices_apiserver(c.resource_slices, driver),
            gates.partitionable_devices_volcano(
                feature_gates(scheduler) if scheduler is not None else None
            ),
            gates.dynamic_mig(
                c.resource_slices,
                driver,
                feature_gates(plugin) if plugin is not None else None,
                dra.dynamic_mig,
            ),
        ]
    why = f"dynamic-mig on {', '.join(dynamic[:5])}" if dynamic else "the DRA pools"
    for r in readings:
        subject = ObjectRef(kind="FeatureGate", name=f"{r.component}/{r.gate}")
        text = f"{r.gate} of {r.component}, needed by {why}: {r.state} ({r.why})"
        if r.state == "off":
            yield error(
                subject,
                text,
                fix=f"turn {r.gate} on in {r.component} (--feature-gates={r.gate}=true); the "
                "operator never sets a component's feature gates",
            )
        else:
            yield info(
                subject,
                text,
                fix="nothing to do"
                if r.state == "on"
                else f"make sure {r.component} runs with --feature-gates={r.gate}=true",
            )

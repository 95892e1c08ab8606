"""Which nodes the GPU kubelet plugin of NVIDIA's DRA driver reaches (`layout_owners`), the one
decision the rule `dra-driver-conflict` names the nodes by and the controller holds their static
layouts by: its placement as its chart ships it (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1,
tests/data/second_owners/), or a live pod of it already on the node."""

from __future__ import annotations

from typing import Any

from tests.kit.second_owners import DRA_NAMESPACE, dra_kubelet_plugin, hami_device_plugin
from tests.kit.volcano_fixtures import MIG_NODE, gpu_node, healthy, pod, replace
from vgpu_operator.core.nodes.gpu_owners import DRA_KUBELET_PLUGIN
from vgpu_operator.core.volcano.dra_kubelet_plugin import layout_owners
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot

DS = f"{DRA_NAMESPACE}/dra-driver-nvidia-gpu-kubelet-plugin"


def snapshot(*daemonsets: dict[str, Any], nodes: list[Any], pods: tuple[Any, ...] = ()) -> Any:
    base = healthy()
    return replace(base, daemonsets=[*base.daemonsets, *daemonsets], nodes=nodes, pods=list(pods))


def owned(s: ClusterSnapshot) -> dict[str, str]:
    found = layout_owners(s.daemonsets, s.nodes, s.pods)
    return {name: owner.evidence for name, owner in found.items()}


def test_every_untainted_gpu_node_its_affinity_matches_is_reached() -> None:
    untainted = gpu_node("a", "A100-SXM4-80GB", 1, released=MIG_NODE, tainted=False)
    tainted = gpu_node("b", "A100-SXM4-80GB", 1, released=MIG_NODE)  # the pool's NoSchedule
    outside = gpu_node("c", "A100-SXM4-80GB", 1)  # in no pool: reached all the same
    s = snapshot(dra_kubelet_plugin(), nodes=[untainted, tainted, outside])
    gate = "DynamicMIG on: it creates and destroys MIG devices itself"
    assert owned(s) == {"a": f"DaemonSet {DS}, {gate}", "c": f"DaemonSet {DS}, {gate}"}
    found = layout_owners(s.daemonsets, s.nodes, s.pods).values()
    [owner] = {id(o): o for o in found}.values()  # one object, shared by its nodes
    assert owner.component == DRA_KUBELET_PLUGIN and owner.how == "reaches this node"


def test_a_live_pod_on_a_node_tainted_later_still_counts() -> None:
    tainted = gpu_node("b", "A100-SXM4-80GB", 1, released=MIG_NODE)
    ds = dra_kubelet_plugin(dynamic_mig=False)
    # a pod the DaemonSet made before the taint: its template's labels, its selector's among them
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()
    running = pod(
        DRA_NAMESPACE, "dra-driver-nvidia-gpu-kubelet-plugin-q8x2v", node="b", labels=labels
    )
    assert owned(snapshot(ds, nodes=[tainted])) == {}
    evidence = owned(snapshot(ds, nodes=[tainted], pods=(running,)))
    assert evidence == {
        "b": f"DaemonSet {DS}, DynamicMIG off: it hands out the MIG devices it finds for "
        "ResourceClaims"
    }


def test_other_daemonsets_own_no_layout() -> None:
    untainted = gpu_node("a", "A100-SXM4-80GB", 1, released=MIG_NODE, tainted=False)
    assert owned(snapshot(hami_device_plugin(), nodes=[untainted])) == {}
    assert owned(snapshot(nodes=[untainted])) == {}

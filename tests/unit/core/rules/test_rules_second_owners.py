"""Second owners of the pools' GPUs (`core.rules.second_owners`), with the DaemonSets as their
projects ship them (tests/kit/second_owners.py): HAMi's own device plugin
(Project-HAMi/HAMi@v2.10.0:charts/hami), the DRA driver's kubelet plugin
(kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu) and the
GPU Operator's mig-manager (NVIDIA/gpu-operator@v26.7.0:assets/state-mig-manager). Each finding
names the component, the nodes and the fix; what the shipped placement cannot reach (the
policy's taint) counts only where a pod of it already runs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kit.second_owners import (
    HAMI_NODE_LABEL,
    HAMI_REGISTERED,
    dra_kubelet_plugin,
    hami_device_plugin,
    mig_manager,
)
from tests.kit.volcano_fixtures import (
    HAMI_NODE,
    MIG_NODE,
    findings,
    gpu_node,
    healthy,
    healthy_daemonset,
    pod,
    replace,
)
from vgpu_operator import contract
from vgpu_operator.agent import decide
from vgpu_operator.core.nodes.gpu_owners import DRA_FIX, HAMI_REGISTER_ANNOTATION
from vgpu_operator.core.rules.second_owners import (
    dra_gpu_container,
    feature_gates,
    is_hami_device_plugin,
    is_mig_manager,
)
from vgpu_operator.models.node import (
    GPU_OPERATOR_MIG_CONFIG_LABEL,
    GPU_OPERATOR_MIG_MANAGER_LABEL,
    NodeConfig,
)
from vgpu_operator.models.volcano_views import workload_view

STATIC = NodeConfig.model_validate(
    {
        "mode": "mig",
        "policy": "static-pool",
        "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]},
    }
)


def node(name: str, released: NodeConfig | None, *, tainted: bool = True, **labels: str) -> Any:
    n = gpu_node(name, "H100-80GB-HBM3", 1, released=released, tainted=tainted)
    n["metadata"]["labels"].update(labels)
    return n


def cluster(*daemonsets: dict[str, Any], nodes: list[Any], pods: tuple[Any, ...] = ()) -> Any:
    base = healthy()
    return replace(
        base,
        daemonsets=[healthy_daemonset(), *daemonsets],
        nodes=[*base.nodes, *nodes],
        pods=[*base.pods, *pods],
    )


def refs(f: Any) -> set[str]:
    return {str(o) for o in f.objects}


# --- which DaemonSet is which -----------------------------------------------------------------


def test_each_shipped_daemonset_is_told_apart() -> None:
    hami, volcanos = workload_view(hami_device_plugin()), workload_view(healthy_daemonset())
    assert is_hami_device_plugin(hami) and not is_hami_device_plugin(volcanos)
    dra = workload_view(dra_kubelet_plugin())
    container = dra_gpu_container(dra)
    assert container is not None and container.name == "gpus"
    assert feature_gates(container) == {"DynamicMIG": True}
    plain = dra_gpu_container(workload_view(dra_kubelet_plugin(dynamic_mig=False)))
    assert plain is not None and feature_gates(plain) == {}
    assert dra_gpu_container(hami) is None and not is_mig_manager(hami)
    assert is_mig_manager(workload_view(mig_manager()))


def test_a_compute_domain_only_kubelet_plugin_owns_no_gpu() -> None:
    ds = dra_kubelet_plugin()
    spec = ds["spec"]["template"]["spec"]
    spec["containers"] = [c for c in spec["containers"] if c["name"] != "gpus"]
    assert dra_gpu_container(workload_view(ds)) is None


@pytest.mark.parametrize(
    ("env", "flag", "gates"),
    [
        ("DynamicMIG=true,", None, {"DynamicMIG": True}),
        (" DynamicMIG = 1 , MPSSupport=false", None, {"DynamicMIG": True, "MPSSupport": False}),
        ("DynamicMIG=yes", None, {}),  # strconv.ParseBool refuses it: the process does not start
        ("DynamicMIG=true", "--feature-gates=DynamicMIG=false", {"DynamicMIG": False}),
    ],
)
def test_feature_gates_as_the_plugin_reads_them(
    env: str, flag: str | None, gates: dict[str, bool]
) -> None:
    ds = dra_kubelet_plugin()
    [gpus] = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "gpus"]
    gpus["env"] = [e for e in gpus["env"] if e["name"] != "FEATURE_GATES"]
    gpus["env"].append({"name": "FEATURE_GATES", "value": env})
    if flag:
        gpus["args"] = [*gpus["args"], flag]
    container = dra_gpu_container(workload_view(ds))
    assert container is not None and feature_gates(container) == gates


# --- HAMi's own stack ------------------------------------------------------------------------


def test_hamis_own_plugin_on_pool_nodes_is_named_with_nodes_and_fix() -> None:
    snap = cluster(
        hami_device_plugin(),
        nodes=[
            node("vgpu-1", HAMI_NODE, tainted=False, **HAMI_NODE_LABEL),
            node("static-1", STATIC, tainted=False, **HAMI_NODE_LABEL),
            node("outside", None, **HAMI_NODE_LABEL),  # no pool: HAMi may have it
            node("vgpu-2", HAMI_NODE, tainted=False),  # no gpu=on: not reached
        ],
    )
    [f] = findings(snap, "hami-stack-conflict")
    assert f.severity == "error"
    assert refs(f) == {
        "DaemonSet kube-system/hami-device-plugin",
        "Node vgpu-1",
        "Node static-1",
    }
    assert "runs on 2 node(s) of the operator's pools" in f.message
    assert "vgpu-1 (vGPU: Volcano's HAMi plugin serves it)" in f.message
    assert "static-1 (static MIG: the agent partitions it)" in f.message
    assert "devicePlugin.nvidiaNodeSelector" in f.fix and 'gpu: "on"' in f.fix


def test_the_policy_taint_keeps_it_off_unless_a_pod_already_runs_there() -> None:
    tainted = node("vgpu-1", HAMI_NODE, **HAMI_NODE_LABEL)
    assert findings(cluster(hami_device_plugin(), nodes=[tainted]), "hami-stack-conflict") == []
    # installed before the policy tainted the node: NoSchedule evicts nothing (doctor lists it)
    running = pod(
        "kube-system",
        "hami-device-plugin-x7k2p",
        node="vgpu-1",
        labels={  # the DaemonSet's selector (its chart's selectorLabels)
            "app.kubernetes.io/component": "hami-device-plugin",
            "app.kubernetes.io/name": "hami",
            "app.kubernetes.io/instance": "hami",
        },
    )
    [f] = findings(
        cluster(hami_device_plugin(), nodes=[tainted], pods=(running,)), "hami-stack-conflict"
    )
    assert "Node vgpu-1" in refs(f)


def test_a_registration_of_hamis_plugin_is_named_without_its_daemonset() -> None:
    registered = node("static-1", STATIC)
    registered["metadata"]["annotations"][HAMI_REGISTER_ANNOTATION] = HAMI_REGISTERED
    [f] = findings(cluster(nodes=[registered]), "hami-stack-conflict")
    assert refs(f) == {"Node static-1"}
    assert HAMI_REGISTER_ANNOTATION in f.message and "keep HAMi's own device plugin off" in f.fix
    # the agent on that node refuses the static layout for the same reason
    view = decide.node_view(registered)
    assert decide.mig_manager_block(view, decide.released(view)) is not None


def test_volcanos_own_plugin_is_no_second_owner() -> None:
    assert findings(healthy(), "hami-stack-conflict") == []


# --- NVIDIA's DRA driver ---------------------------------------------------------------------


def test_the_dra_kubelet_plugin_with_dynamic_mig_destroys_instances() -> None:
    snap = cluster(
        dra_kubelet_plugin(),
        nodes=[
            node("static-1", STATIC, tainted=False),
            node("vgpu-1", MIG_NODE, tainted=False),
            node("outside", None),  # the driver's own node: not the pools'
        ],
    )
    [f] = findings(snap, "dra-driver-conflict")
    assert refs(f) == {
        "DaemonSet dra-driver-nvidia-gpu/dra-driver-nvidia-gpu-kubelet-plugin",
        "Node static-1",
        "Node vgpu-1",
    }
    assert "DynamicMIG feature gate is on" in f.message
    assert "destroys every MIG instance it did not create" in f.message
    assert "kubeletPlugin.nodeSelector" in f.fix and "DynamicMIG off" in f.fix


def test_a_node_whose_static_layout_the_controller_holds_is_named_with_the_hold() -> None:
    # on its way to a static layout (its target), none released: the controller holds it
    # (core.nodes.gpu_owners.layout_held) while the plugin reaches it (here: `nodeTaints: []`)
    held = node("static-2", None, tainted=False)
    held["metadata"]["labels"] |= {contract.LABEL_POLICY: "static-pool", contract.LABEL_MODE: "mig"}
    held["metadata"].setdefault("annotations", {})[contract.ANN_TARGET] = STATIC.to_annotation()
    snap = cluster(dra_kubelet_plugin(), nodes=[held, node("vgpu-1", MIG_NODE, tainted=False)])
    [f] = findings(snap, "dra-driver-conflict")
    assert refs(f) >= {"Node static-2", "Node vgpu-1"}
    assert "static-2 (static MIG: no layout released to its agent yet)" in f.message
    assert "The operator releases no static MIG layout to 1 of them while it reaches them" in (
        f.message
    )
    assert f.fix.startswith(DRA_FIX)


def test_without_the_gate_it_still_hands_out_the_same_gpus() -> None:
    snap = cluster(
        dra_kubelet_plugin(dynamic_mig=False), nodes=[node("vgpu-1", HAMI_NODE, tainted=False)]
    )
    [f] = findings(snap, "dra-driver-conflict")
    assert "one GPU can go to two pods" in f.message and "DynamicMIG" not in f.message


def test_the_shipped_tolerations_keep_it_off_tainted_pool_nodes() -> None:
    snap = cluster(dra_kubelet_plugin(), nodes=[node("vgpu-1", HAMI_NODE)])
    assert findings(snap, "dra-driver-conflict") == []


# --- the GPU Operator's mig-manager ----------------------------------------------------------


def test_mig_manager_on_nodes_whose_mig_is_the_pools() -> None:
    configured = {
        GPU_OPERATOR_MIG_MANAGER_LABEL: "true",
        GPU_OPERATOR_MIG_CONFIG_LABEL: "all-1g.10gb",
    }
    snap = cluster(
        mig_manager(),
        nodes=[
            node("static-1", STATIC, **configured),
            node("dyn-1", MIG_NODE, **{GPU_OPERATOR_MIG_CONFIG_LABEL: "all-balanced"}),
            node("hami-1", HAMI_NODE, **configured),  # no MIG: not the pool's to lose
            node(
                "off-1",
                STATIC,
                **{
                    GPU_OPERATOR_MIG_MANAGER_LABEL: "false",
                    GPU_OPERATOR_MIG_CONFIG_LABEL: "all-disabled",
                },
            ),
        ],
    )
    [f] = findings(snap, "mig-manager-conflict")
    assert refs(f) == {"DaemonSet gpu-operator/nvidia-mig-manager", "Node static-1", "Node dyn-1"}
    assert "static-1 (static MIG, the agent's: nvidia.com/gpu.deploy.mig-manager=true" in f.message
    assert "dyn-1 (dynamic MIG, HAMi's plugin's: nvidia.com/mig.config=all-balanced)" in f.message
    assert "disableNvidiaMigManager: true on the policies (pool, static-pool)" in f.fix
    # the nodes named are the ones the agent refuses a static layout on
    views = [decide.node_view(n) for n in snap.nodes]
    blocked = {v.name for v in views if decide.mig_manager_block(v, decide.released(v))}
    assert blocked == {"static-1"}  # dyn-1 is HAMi's plugin's to partition, not the agent's


def test_no_mig_manager_no_finding() -> None:
    assert findings(healthy(), "mig-manager-conflict") == []

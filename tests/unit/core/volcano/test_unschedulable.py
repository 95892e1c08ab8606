"""Fit checks for pods that can never be scheduled, against the consistent cluster of the rule
tests (gpu-a: 2 x RTX 4090 in hami-core; gpu-b: 1 x A100-SXM4-40GB in mig) broken one way at a
time, and against hand-made node shapes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kit.volcano_fixtures import (
    HAMI_NODE,
    edit,
    gpu_node,
    healthy,
    pod,
    replace,
    scheduler_cm,
    text,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.unschedulable import (
    REASONS,
    Cause,
    FitContext,
    NodeShape,
    causes,
    container_asks,
    fit_context,
    quantity,
)
from vgpu_operator.models.node import NodeConfig

NUMBER, MEMORY, SHARE = (
    "volcano.sh/vgpu-number",
    "volcano.sh/vgpu-memory",
    ("volcano.sh/vgpu-memory-percentage"),
)
MODE = "volcano.sh/vgpu-mode"
# what every cause about memory also says: the unit of a request (core.volcano.memory_unit)
UNIT = (
    "volcano.sh/vgpu-memory: a request of N means N x 1 MiB (gpuMemoryFactor 1, from ConfigMap "
    "kube-system/volcano-vgpu-device-config)"
)


def pending(
    limits: dict[str, str],
    *,
    mode: str | None = None,
    scheduler: str = "volcano",
    **kwargs: Any,
) -> dict[str, Any]:
    annotations = {MODE: mode} if mode else {}
    p = pod(
        "team-a",
        "job-0",
        limits=limits,
        annotations=annotations,
        scheduler=scheduler,
        phase="Pending",
        **kwargs,
    )
    p["metadata"]["uid"] = "uid-job-0"
    return p


def ids(found: list[Cause]) -> list[str]:
    return [c.id for c in found]


def only(s: ClusterSnapshot, *names: str) -> ClusterSnapshot:
    return replace(s, nodes=[n for n in s.nodes if n["metadata"]["name"] in names])


HEALTHY = fit_context(healthy())


# --- pods that fit get nothing ------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "mode"),
    [
        ({NUMBER: "1"}, None),
        ({NUMBER: "2"}, None),  # gpu-a has two GPUs
        ({NUMBER: "1", MEMORY: "24564"}, "hami-core"),  # exactly one RTX 4090
        ({MEMORY: "3000"}, None),  # memory only: one vGPU
        ({NUMBER: "1", SHARE: "50"}, None),
        # the 7g.40gb instance: 39.25 GiB in nvidia-smi mig -lgip, written as 40186 MiB
        ({NUMBER: "1", MEMORY: "40186"}, "mig"),
        ({NUMBER: "1", MEMORY: "3000"}, "mig"),  # the smallest that holds it
        ({NUMBER: "1", MEMORY: "30000"}, None),  # too big for the 4090, fits an A100 instance
        ({"nvidia.com/gpu": "1"}, None),  # whole GPUs: not Volcano's vGPU to check
        ({"cpu": "1"}, None),
    ],
)
def test_a_pod_that_fits_gets_no_warning(limits: dict[str, str], mode: str | None) -> None:
    assert causes(pending(limits, mode=mode), HEALTHY) == []


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p["spec"].update(nodeName="gpu-a"),  # bound: no longer the scheduler's
        lambda p: p["metadata"].update(deletionTimestamp="2026-01-03T00:00:00Z"),
        lambda p: p["status"].update(phase="Failed"),
        lambda p: p["status"].update(phase="Succeeded"),
    ],
)
def test_only_pending_pods_are_checked(change: Any) -> None:
    p = pending({NUMBER: "9"}, scheduler="default-scheduler")
    assert ids(causes(p, HEALTHY)) == ["not-volcano", "vgpu-number-too-large"]
    change(p)
    assert causes(p, HEALTHY) == []


# --- no node in a mode that serves it ------------------------------------------------------


def test_vgpu_resources_with_no_vgpu_node_at_all() -> None:
    whole = NodeConfig(mode="whole-gpu", policy="pool", generation=1)
    s = replace(healthy(), nodes=[gpu_node("gpu-w", "A100-SXM4-80GB", 8, released=whole)])
    [cause] = causes(pending({NUMBER: "1"}), fit_context(s))
    assert cause.id == "no-vgpu-node" and cause.reason == "NoVGPUNode"
    assert cause.message == (
        "the pod requests volcano.sh/vgpu-number but no node runs in a mode that serves vGPUs "
        "(hami-core, or mig with dynamic partitioning): no node will ever offer them. Fix: "
        "select GPU nodes with a VGPUNodePolicy in mode hami-core (or mig), or request "
        "nvidia.com/gpu for whole GPUs instead"
    )


def test_a_static_mig_node_serves_no_vgpu() -> None:
    static = NodeConfig.model_validate(
        {
            "mode": "mig",
            "policy": "p",
            "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]},
        }
    )
    s = replace(healthy(), nodes=[gpu_node("gpu-s", "A100-SXM4-80GB", 8, released=static)])
    assert ids(causes(pending({NUMBER: "1"}), fit_context(s))) == ["no-vgpu-node"]


def test_mig_mode_asked_where_only_hami_core_nodes_run() -> None:
    ctx = fit_context(only(healthy(), "gpu-a"))
    [cause] = causes(pending({NUMBER: "1", MEMORY: "1000"}, mode="mig"), ctx)
    assert cause.id == "no-vgpu-node"
    assert "no node runs in mig mode (vGPU nodes run hami-core)" in cause.message
    assert "VGPUNodePolicy (spec.mode: mig), or remove the annotation" in cause.message
    assert causes(pending({NUMBER: "1", MEMORY: "1000"}), ctx) == []  # unpinned: fits


def test_hami_core_mode_asked_where_only_mig_nodes_run() -> None:
    ctx = fit_context(only(healthy(), "gpu-b"))
    [cause] = causes(pending({NUMBER: "1"}, mode="hami-core"), ctx)
    assert cause.id == "no-vgpu-node" and "no node runs in hami-core mode" in cause.message


def test_a_mode_no_node_can_have() -> None:
    [cause] = causes(pending({NUMBER: "1"}, mode="mps"), HEALTHY)
    assert cause.id == "no-vgpu-node"
    assert "volcano.sh/vgpu-mode: mps, a mode no node has" in cause.message


# --- MIG geometry ----------------------------------------------------------------------------


def test_mig_memory_larger_than_any_instance_of_the_geometries() -> None:
    [cause] = causes(pending({NUMBER: "1", MEMORY: "50000"}, mode="mig"), HEALTHY)
    assert cause.id == "no-mig-geometry" and cause.reason == "NoFittingMIGGeometry"
    assert cause.message == (
        "container main asks for 50000 MiB per vGPU in mig mode, but no MIG geometry of the MIG "
        "nodes' GPUs has an instance that large: the largest is 40186 MiB "
        "(kube-system/volcano-vgpu-device-config, knownMigGeometries); " + UNIT + ". Fix: ask "
        "for at most 40186 MiB of vGPU memory, or run the pod in hami-core mode (remove "
        "volcano.sh/vgpu-mode)"
    )


def unknown_mig_model(s: ClusterSnapshot) -> ClusterSnapshot:
    def rename(cm: dict[str, Any]) -> None:
        data = cm["data"]["device-config.yaml"]
        cm["data"]["device-config.yaml"] = data.replace("A100-SXM4-40GB", "A100-SXM4-40GB-X")

    return edit(s, "configmaps", "volcano-vgpu-device-config", rename)


def test_mig_nodes_whose_model_no_geometry_knows_count_as_hami_core() -> None:
    ctx = fit_context(unknown_mig_model(healthy()))
    [cause] = causes(pending({NUMBER: "1", MEMORY: "1000"}, mode="mig"), ctx)
    assert cause.id == "no-mig-geometry"
    assert "GPU models (NVIDIA A100-SXM4-40GB) match no knownMigGeometries entry" in cause.message
    # The scheduler treats the node as hami-core: a pod in that mode fits it.
    assert causes(pending({NUMBER: "1", MEMORY: "30000"}, mode="hami-core"), ctx) == []


def test_mig_memory_is_compared_after_the_memory_factor() -> None:
    a100 = NodeShape("mig", True, 1, 20480, (5120, 10240, 20480, 40960), 7)
    ctx = FitContext(shapes=frozenset({a100}), memory_factor=2)
    # 20000 units of 2 MiB: 40000 MiB, the 7g.40gb instance holds it; 20481 units do not fit.
    assert causes(pending({MEMORY: "20000"}, mode="mig"), ctx) == []
    assert ids(causes(pending({MEMORY: "20481"}, mode="mig"), ctx)) == ["no-mig-geometry"]


# --- memory and count ------------------------------------------------------------------------


def test_memory_per_vgpu_larger_than_any_gpu() -> None:
    [cause] = causes(pending({NUMBER: "1", MEMORY: "30000"}, mode="hami-core"), HEALTHY)
    assert cause.id == "vgpu-memory-too-large" and cause.reason == "VGPUMemoryTooLarge"
    assert cause.message == (
        "container main asks for 30000 MiB per vGPU, more than any GPU of the nodes that serve "
        "it in hami-core mode has: the largest has 24564; " + UNIT + ". Fix: ask for at most "
        "24564 (or for a "
        "share of a GPU with volcano.sh/vgpu-memory-percentage), or add nodes with larger GPUs "
        "to a vGPU policy"
    )


def test_memory_larger_than_every_gpu_and_every_mig_instance() -> None:
    [cause] = causes(pending({NUMBER: "1", MEMORY: "50000"}), HEALTHY)
    assert cause.id == "vgpu-memory-too-large"
    assert "the largest has 40186" in cause.message  # the 7g.40gb instance


def test_vgpu_number_larger_than_the_gpus_of_any_node() -> None:
    [cause] = causes(pending({NUMBER: "3"}, mode="hami-core"), HEALTHY)
    assert cause.id == "vgpu-number-too-large" and cause.reason == "VGPUNumberTooLarge"
    assert cause.message == (
        "container main asks for 3 vGPUs, and no node that serves it in hami-core mode has "
        "room for that many: the most is 2 (one vGPU per GPU of a container in hami-core "
        "mode). Fix: ask for at most 2, or spread the work over more pods"
    )


def test_enough_gpus_and_large_enough_gpus_but_not_on_one_node() -> None:
    many_small = NodeShape("hami-core", gpus=8, memory=24564)
    one_large = NodeShape("hami-core", gpus=1, memory=81920)
    ctx = FitContext(shapes=frozenset({many_small, one_large}))
    [cause] = causes(pending({NUMBER: "2", MEMORY: "40000"}), ctx)
    assert cause.id == "vgpu-number-too-large"
    assert "asks for 2 vGPUs of 40000 MiB each" in cause.message
    assert "a request of N means N x 1 MiB (gpuMemoryFactor 1, from the scheduler's default)" in (
        cause.message
    )
    assert causes(pending({NUMBER: "8", MEMORY: "20000"}), ctx) == []
    assert causes(pending({NUMBER: "1", MEMORY: "80000"}), ctx) == []


def test_a_node_whose_gpus_are_unknown_counts_as_one_that_fits() -> None:
    unknown = NodeShape("hami-core")
    ctx = FitContext(shapes=frozenset({unknown, NodeShape("hami-core", gpus=1, memory=1000)}))
    assert causes(pending({NUMBER: "64", MEMORY: "999999"}), ctx) == []


def test_gpus_are_read_from_labels_when_nothing_registered() -> None:
    s = healthy()
    node = gpu_node("gpu-c", "H200", 8, released=HAMI_NODE)  # not registered yet
    ctx = fit_context(replace(s, nodes=[*s.nodes, node]))
    assert causes(pending({NUMBER: "8", MEMORY: "140000"}, mode="hami-core"), ctx) == []
    assert ids(causes(pending({NUMBER: "9"}, mode="hami-core"), ctx)) == ["vgpu-number-too-large"]


def test_each_container_must_fit() -> None:
    p = pending({NUMBER: "1"})
    p["spec"]["initContainers"] = [
        {"name": "warmup", "resources": {"limits": {NUMBER: "1", MEMORY: "99999"}}}
    ]
    [cause] = causes(p, HEALTHY)
    assert cause.id == "vgpu-memory-too-large" and "container warmup asks" in cause.message


# --- legacy GPU sharing ----------------------------------------------------------------------


def test_legacy_gpu_memory_where_gpu_sharing_is_off() -> None:
    [cause] = causes(pending({"volcano.sh/gpu-memory": "1024"}), HEALTHY)
    assert cause.id == "gpu-sharing-off" and cause.reason == "GPUSharingDisabled"
    assert cause.message == (
        "the pod requests volcano.sh/gpu-memory (legacy GPU sharing) but "
        "deviceshare.GPUSharingEnable is off in volcano-system/volcano-scheduler-configmap: no "
        "scheduler plugin allocates a GPU for it, and the legacy device plugin finds none to "
        "give it. Fix: request volcano.sh/vgpu-number (and volcano.sh/vgpu-memory in MiB) "
        "instead; GPU sharing is deprecated since Volcano v1.9"
    )
    [number] = causes(pending({"volcano.sh/gpu-number": "1"}), HEALTHY)
    assert "deviceshare.GPUNumberEnable is off" in number.message


def with_conf(conf: str) -> FitContext:
    s = healthy()
    others = [c for c in s.configmaps if c["metadata"]["name"] != "volcano-scheduler-configmap"]
    return fit_context(replace(s, configmaps=[*others, scheduler_cm(conf)]))


def test_legacy_gpu_memory_where_gpu_sharing_is_on() -> None:
    assert (
        causes(
            pending({"volcano.sh/gpu-memory": "1024"}), with_conf(text("seed003_gpu_sharing.conf"))
        )
        == []
    )
    legacy_predicates = with_conf(text("seed003_legacy_predicates.conf"))  # Volcano <= 1.8
    assert causes(pending({"volcano.sh/gpu-memory": "1024"}), legacy_predicates) == []


def test_legacy_sharing_is_not_judged_without_a_scheduler_conf() -> None:
    s = healthy()
    ctx = fit_context(
        replace(
            s,
            configmaps=[
                c for c in s.configmaps if c["metadata"]["name"] != "volcano-scheduler-configmap"
            ],
        )
    )
    assert ctx.gpu_sharing is None
    assert causes(pending({"volcano.sh/gpu-memory": "1024"}), ctx) == []


# --- the scheduler ---------------------------------------------------------------------------


def test_vgpu_resources_with_another_scheduler() -> None:
    [cause] = causes(pending({NUMBER: "1"}, scheduler="default-scheduler"), HEALTHY)
    assert cause.id == "not-volcano" and cause.reason == "VGPUNotScheduledByVolcano"
    assert cause.message.startswith(
        "the pod requests volcano.sh/vgpu-number but is scheduled by default-scheduler, not "
        "volcano: only Volcano's deviceshare plugin allocates vGPUs"
    )
    assert "Fix: set spec.schedulerName: volcano" in cause.message
    # no schedulerName at all: the default scheduler's
    p = pending({NUMBER: "1"})
    del p["spec"]["schedulerName"]
    assert ids(causes(p, HEALTHY)) == ["not-volcano"]


def test_the_scheduler_name_comes_from_the_volcano_deployment() -> None:
    def rename(dep: dict[str, Any]) -> None:
        dep["spec"]["template"]["spec"]["containers"][0]["args"].append("--scheduler-name=vc")

    ctx = fit_context(edit(healthy(), "deployments", "volcano-scheduler", rename))
    assert ctx.scheduler_name == "vc"
    assert ids(causes(pending({NUMBER: "1"}), ctx)) == ["not-volcano"]
    assert causes(pending({NUMBER: "1"}, scheduler="vc"), ctx) == []


def test_several_causes_of_one_pod_are_all_named() -> None:
    p = pending({NUMBER: "4", "volcano.sh/gpu-memory": "1"}, scheduler="volcano", mode="hami-core")
    assert ids(causes(p, HEALTHY)) == ["gpu-sharing-off", "vgpu-number-too-large"]


# --- reading requests ------------------------------------------------------------------------


def test_container_asks() -> None:
    p = pending({NUMBER: "2", MEMORY: "4Ki"})
    p["spec"]["containers"].append({"name": "side", "resources": {"requests": {SHARE: "10"}}})
    p["spec"]["containers"].append({"name": "cpu", "resources": {"limits": {"cpu": "1"}}})
    asks = container_asks(p, HEALTHY)
    assert [(a.name, a.count, a.memory) for a in asks] == [("main", 2, 4096), ("side", 1, None)]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("3000", 3000), (3000, 3000), ("2k", 2000), ("1Gi", 2**30), ("1.5", None), ("x", None)],
)
def test_quantities(value: Any, expected: int | None) -> None:
    assert quantity(value) == expected


def test_every_cause_has_an_event_reason() -> None:
    assert set(REASONS) == {
        "no-vgpu-node",
        "no-mig-geometry",
        "vgpu-memory-too-large",
        "vgpu-number-too-large",
        "gpu-sharing-off",
        "not-volcano",
        "gpu-filter",
    }
    assert all(r[0].isupper() and " " not in r for r in REASONS.values())


def test_nodes_alike_share_one_shape() -> None:
    s = healthy()
    [a] = [n for n in s.nodes if n["metadata"]["name"] == "gpu-a"]
    twins = [{**a, "metadata": {**a["metadata"], "name": f"gpu-a{i}"}} for i in range(50)]
    ctx = fit_context(replace(s, nodes=[*s.nodes, *twins]))
    assert len(ctx.shapes) == 2  # 51 RTX 4090 nodes alike, and gpu-b

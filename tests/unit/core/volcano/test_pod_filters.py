"""The pod annotations that narrow a vGPU pod's GPUs, read as Volcano reads them, and the
never-fit warning for a pod they leave no GPU. The cases follow the scheduler's own tests
(volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/utils_test.go
`TestCheckGPUtype`; volcano-sh/volcano@v1.16.0-alpha.1:pkg/scheduler/api/devices/nvidia/vgpu/
utils_test.go `TestCheckGPUUUID`, `TestGPUUUIDConstraints`) and the code they test (`checkGPUtype`,
`gpuUUIDFilter` in utils.go of the same tags); the consistent cluster is the rule tests' (gpu-a:
2 x RTX 4090 in hami-core, gpu-b: 1 x A100-SXM4-40GB in mig), registered by the simulated plugin."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kit.volcano_fixtures import deployment, healthy, pod, replace
from vgpu_operator import contract
from vgpu_operator.core.volcano.pod_filters import (
    NOUSE_GPU_TYPE,
    NOUSE_GPU_UUID,
    USE_GPU_TYPE,
    USE_GPU_UUID,
    GpuFacts,
    read,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.unschedulable import causes, fit_context
from vgpu_operator.models.inventory import GpuInfo, Inventory
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, parse_register
from vgpu_operator.models.volcano_views import Version

V1_11, V1_15_1, V1_16_ALPHA_0 = Version(1, 11, 0), Version(1, 15, 1), Version(1, 16, 0)
RTX = "NVIDIA-NVIDIA GeForce RTX 4090"
A100 = "NVIDIA-NVIDIA A100-SXM4-40GB"
NUMBER, MEMORY, MODE = "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-mode"


def allowed(annotations: dict[str, str], gpu_type: str, version: Version | None = V1_15_1) -> bool:
    f = read(annotations, version)
    return f is None or f.allows(GpuFacts("GPU-0", gpu_type))


# --- nvidia.com/use-gputype and nouse-gputype (checkGPUtype) --------------------------------


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        ({USE_GPU_TYPE: "NVIDIA"}, True),  # "Single GPUInUse value matches"
        ({USE_GPU_TYPE: "nvidia"}, True),  # "GPUInUse mixed case matches"
        ({USE_GPU_TYPE: "AMD,NVIDIA,INTEL"}, True),  # "Multiple GPUInUse values, one matches"
        ({USE_GPU_TYPE: "AMD,INTEL,MLU"}, False),  # "Multiple GPUInUse values, none matches"
        ({NOUSE_GPU_TYPE: "NVIDIA"}, False),  # "Single GPUNoUse value matches"
        ({NOUSE_GPU_TYPE: "nvidia"}, False),  # "GPUNoUse mixed case matches"
        ({NOUSE_GPU_TYPE: "AMD,NVIDIA,INTEL"}, False),  # "Multiple GPUNoUse values, one matches"
        ({NOUSE_GPU_TYPE: "AMD,INTEL,MLU"}, True),  # "Multiple GPUNoUse values, none matches"
        ({}, True),
    ],
)
def test_gpu_type_annotations_as_the_scheduler_tests_them(
    annotations: dict[str, str], want: bool
) -> None:
    assert allowed(annotations, "NVIDIA") is want


def test_a_type_item_is_a_part_of_the_registered_type_ignoring_case() -> None:
    assert allowed({USE_GPU_TYPE: "a100"}, A100)
    assert not allowed({USE_GPU_TYPE: "a100"}, RTX)
    assert allowed({USE_GPU_TYPE: "NVIDIA-NVIDIA"}, A100)  # the registered prefix is part of it


def test_use_gputype_given_means_nouse_gputype_is_not_read() -> None:
    both = {USE_GPU_TYPE: "A100", NOUSE_GPU_TYPE: "A100"}
    assert allowed(both, A100)  # checkGPUtype returns from the use branch
    f = read(both, V1_15_1)
    assert f is not None and f.nouse_types is None and f.nouse_ignored


def test_an_empty_item_matches_every_type() -> None:
    assert allowed({USE_GPU_TYPE: "H100,"}, RTX)  # "" is a part of every string
    assert not allowed({NOUSE_GPU_TYPE: "H100,"}, RTX)
    assert not allowed({NOUSE_GPU_TYPE: ""}, RTX)


def test_up_to_v1_11_a_single_nouse_value_excludes_nothing() -> None:
    """volcano-sh/volcano@v1.11.0:pkg/scheduler/api/devices/nvidia/vgpu/utils.go returns true
    when the one value matches; v1.12.0 returns false."""
    assert allowed({NOUSE_GPU_TYPE: "A100"}, A100, V1_11)
    assert not allowed({NOUSE_GPU_TYPE: "A100,"}, A100, V1_11)  # the list branch was right
    assert not allowed({NOUSE_GPU_TYPE: "A100"}, A100, Version(1, 12, 0))
    assert not allowed({NOUSE_GPU_TYPE: "A100"}, A100, None)


# --- volcano.sh/vgpu-use-gpuuuid and vgpu-nouse-gpuuuid (gpuUUIDFilter, v1.16.0-alpha.0+) ----


@pytest.mark.parametrize(
    ("annotations", "uuid", "want"),
    [
        ({}, "GPU-0", True),  # "no constraint"
        ({USE_GPU_UUID: "  "}, "GPU-0", True),  # "empty allowlist is ignored"
        ({USE_GPU_UUID: ", ,"}, "GPU-0", True),  # "separator-only allowlist is ignored"
        ({USE_GPU_UUID: "GPU-0, GPU-1"}, "GPU-1", True),  # "allowlist exact match"
        ({USE_GPU_UUID: "GPU-0,, GPU-1,"}, "GPU-1", True),  # "allowlist ignores empty entries"
        ({USE_GPU_UUID: "GPU-10"}, "GPU-1", False),  # "allowlist rejects partial match"
        ({USE_GPU_UUID: "GPU-0,"}, "", False),  # "allowlist rejects empty device UUID"
        ({NOUSE_GPU_UUID: "GPU-0, GPU-1"}, "GPU-1", False),  # "denylist rejects match"
        ({NOUSE_GPU_UUID: "GPU-0,"}, "", False),  # "denylist ... rejects empty device UUID"
        ({USE_GPU_UUID: "GPU-1", NOUSE_GPU_UUID: "GPU-1"}, "GPU-1", False),  # "denylist wins"
    ],
)
def test_gpu_uuid_annotations_as_the_scheduler_tests_them(
    annotations: dict[str, str], uuid: str, want: bool
) -> None:
    f = read(annotations, V1_16_ALPHA_0)
    assert (f is None or f.allows(GpuFacts(uuid, A100))) is want


def test_gpu_uuid_annotations_are_read_from_v1_16_only() -> None:
    """Absent at volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/type.go; an
    unknown version is not taken to read them."""
    annotations = {USE_GPU_UUID: "GPU-other"}
    assert read(annotations, V1_15_1) is None
    assert read(annotations, None) is None
    assert read(annotations, Version.parse("v1.16.0-alpha.0")) is not None


def test_a_gpu_whose_uuid_is_not_known_is_not_excluded() -> None:
    f = read({USE_GPU_UUID: "GPU-other"}, V1_16_ALPHA_0)
    assert f is not None
    assert f.uuid_allowed(None) is None and f.allows(GpuFacts(None, A100))


# --- the never-fit warning ---------------------------------------------------------------


def uuids(s: ClusterSnapshot, node: str) -> list[str]:
    [n] = [n for n in s.nodes if n["metadata"]["name"] == node]
    return [g.uuid for g in parse_register(n["metadata"]["annotations"][REGISTER_ANNOTATION])]


def pending(limits: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return pod("team-a", "job-0", limits=limits, annotations=annotations, phase="Pending")


def on(version: str) -> ClusterSnapshot:
    return replace(healthy(), deployments=[deployment(version)])


def test_a_gpu_type_that_no_gpu_has_is_named_with_the_gpus_that_would_fit() -> None:
    ctx = fit_context(on("v1.15.1"))
    [cause] = causes(pending({NUMBER: "1", MEMORY: "20000"}, {USE_GPU_TYPE: "H100"}), ctx)
    assert cause.id == "gpu-filter" and cause.reason == "GPUsExcludedByPodAnnotations"
    rtx = sorted(uuids(on("v1.15.1"), "gpu-a"))
    [a100] = uuids(on("v1.15.1"), "gpu-b")
    assert cause.message == (
        "the pod's annotation nvidia.com/use-gputype: 'H100' excludes every GPU that could hold "
        f"it: the GPUs that would are {A100} {a100}; {RTX} {rtx[0]}; {RTX} {rtx[1]}; a GPU "
        "type item matches, ignoring case, as a part of the registered type NVIDIA-<NVML name>. "
        "Fix: add a part of one of those types to nvidia.com/use-gputype, or remove the annotation"
    )


def test_a_gpu_type_that_leaves_only_gpus_too_small_is_named() -> None:
    ctx = fit_context(on("v1.15.1"))
    # 30000 MiB: only the A100 (40 GB, a 7g.40gb instance) holds it; the pod allows the RTX only.
    [cause] = causes(pending({NUMBER: "1", MEMORY: "30000"}, {USE_GPU_TYPE: "RTX"}), ctx)
    assert cause.id == "gpu-filter"
    assert f"the GPUs that would are {A100} GPU-" in cause.message
    assert "RTX 4090 GPU-" not in cause.message  # the RTX 4090 are too small to hold it
    # without the annotation it fits the A100 in mig mode; with RTX allowed a small ask fits
    assert causes(pending({NUMBER: "1", MEMORY: "30000"}, {}), ctx) == []
    assert causes(pending({NUMBER: "1", MEMORY: "20000"}, {USE_GPU_TYPE: "RTX"}), ctx) == []


def test_a_gpu_type_that_leaves_too_few_gpus_on_one_node() -> None:
    ctx = fit_context(on("v1.15.1"))
    # in hami-core mode 2 vGPUs take gpu-a's two RTX 4090 (one vGPU per GPU of a container);
    # excluding 4090 leaves none of them
    asked = pending({NUMBER: "2"}, {MODE: "hami-core", NOUSE_GPU_TYPE: "4090"})
    assert [c.id for c in causes(asked, ctx)] == ["gpu-filter"]
    kept = pending({NUMBER: "2"}, {MODE: "hami-core", NOUSE_GPU_TYPE: "A100"})
    assert causes(kept, ctx) == []


def test_gpu_uuids_from_the_plugins_registration_on_v1_16() -> None:
    s = on("v1.16.0-alpha.1")
    ctx = fit_context(s)
    [a100] = uuids(s, "gpu-b")
    ask = {NUMBER: "1", MEMORY: "30000"}  # only the A100 holds it
    [cause] = causes(pending(ask, {NOUSE_GPU_UUID: a100}), ctx)
    assert cause.id == "gpu-filter"
    assert f"volcano.sh/vgpu-nouse-gpuuuid: '{a100}'" in cause.message
    assert "compared exactly with the registered ones (Volcano v1.16.0)" in cause.message
    assert "take those UUIDs out of volcano.sh/vgpu-nouse-gpuuuid" in cause.message
    assert causes(pending(ask, {USE_GPU_UUID: a100}), ctx) == []
    [cause] = causes(pending(ask, {USE_GPU_UUID: "GPU-typo"}), ctx)
    assert cause.id == "gpu-filter"
    # Volcano v1.15.1 does not read the annotation: the same pod fits
    assert causes(pending(ask, {NOUSE_GPU_UUID: a100}), fit_context(on("v1.15.1"))) == []


def test_a_node_whose_gpus_are_known_only_by_labels_counts_as_one_that_fits() -> None:
    """No register records and no inventory: no GPU list, so no UUID or type is certain."""
    s = on("v1.16.0-alpha.1")
    bare = []
    for node in s.nodes:
        kept = {
            k: v for k, v in node["metadata"]["annotations"].items() if k != REGISTER_ANNOTATION
        }
        bare.append({**node, "metadata": {**node["metadata"], "annotations": kept}})
    ctx = fit_context(replace(s, nodes=bare))
    assert causes(pending({NUMBER: "1"}, {USE_GPU_UUID: "GPU-typo"}), ctx) == []


def test_a_pod_that_fits_nowhere_anyway_gets_the_other_cause_only() -> None:
    ctx = fit_context(on("v1.15.1"))
    found = causes(pending({NUMBER: "1", MEMORY: "99999"}, {USE_GPU_TYPE: "H100"}), ctx)
    assert [c.id for c in found] == ["vgpu-memory-too-large"]


def test_mig_mode_pods_are_narrowed_by_the_mig_nodes_gpus() -> None:
    ctx = fit_context(on("v1.15.1"))
    asked = pending({NUMBER: "1", MEMORY: "1000"}, {MODE: "mig", USE_GPU_TYPE: "4090"})
    [cause] = causes(asked, ctx)
    assert cause.id == "gpu-filter" and f"would are {A100} " in cause.message


def test_gpu_uuids_from_the_agents_inventory_where_the_plugin_has_not_registered() -> None:
    """The agent lists NVML's UUIDs, the ones the plugin registers
    (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/plugin/register.go: `dev.ID`)."""
    s = on("v1.16.0-alpha.1")
    gpus = [
        GpuInfo(
            index=i,
            uuid=f"GPU-inv-{i}",
            name="NVIDIA GeForce RTX 4090",
            bus_id=f"00000000:0{i + 1}:00.0",
            memory_mib=24564,
            mig_capable=False,
        )
        for i in range(2)
    ]
    inventory = Inventory(gpus=gpus).to_annotation()
    nodes = []
    for node in s.nodes:
        kept = {
            k: v for k, v in node["metadata"]["annotations"].items() if k != REGISTER_ANNOTATION
        }
        if node["metadata"]["name"] == "gpu-a":
            kept[contract.ANN_INVENTORY] = inventory
        nodes.append({**node, "metadata": {**node["metadata"], "annotations": kept}})
    ctx = fit_context(replace(s, nodes=nodes))
    hami = {MODE: "hami-core"}
    [cause] = causes(pending({NUMBER: "1"}, {**hami, USE_GPU_UUID: "GPU-typo"}), ctx)
    assert f"{RTX} GPU-inv-0; {RTX} GPU-inv-1;" in cause.message
    assert causes(pending({NUMBER: "1"}, {**hami, USE_GPU_UUID: "GPU-inv-1"}), ctx) == []
    two = pending({NUMBER: "2"}, {**hami, NOUSE_GPU_UUID: "GPU-inv-1"})
    assert [c.id for c in causes(two, ctx)] == ["gpu-filter"]  # one GPU left, two asked

"""Which kubelet allocations hold a GPU or the instances a plan destroys (agent.allocations):
device IDs as NVIDIA's and HAMi's device plugins register them."""

from __future__ import annotations

import pytest

from tests.kit.migkit import gpu
from vgpu_operator.agent.allocations import Touch, gpu_backed, holders, resolve, touched
from vgpu_operator.agent.parse_actions import ListedGpu, ListedMig
from vgpu_operator.agent.podresources_wire import Allocation
from vgpu_operator.core.mig.partition import Step, StepKind

A100 = "A100-SXM4-80GB"
G0 = gpu(A100, 0, instances=[("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)]).model_copy(
    update={"uuid": "GPU-2fa5cf01-9520-1bc1-995b-cc0c6d9bca7c"}
)
G1 = gpu(A100, 1).model_copy(update={"uuid": "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4"})
GI_3G, GI_2G, GI_1G = (gi.id for gi in G0.instances)
MIG_3G, MIG_2G, MIG_1G = (f"MIG-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(3))
LISTED = [
    ListedGpu(
        0,
        "NVIDIA A100-SXM4-80GB",
        G0.uuid,
        (
            ListedMig("3g.40gb", 0, MIG_3G),
            ListedMig("2g.20gb", 1, MIG_2G),
            ListedMig("1g.10gb", 2, MIG_1G),
        ),
    ),
    ListedGpu(1, "NVIDIA A100-SXM4-80GB", G1.uuid),
]
GPUS = {G0.uuid: G0}


def alloc(resource: str, *ids: str, pod: str = "p", dra: bool = False) -> Allocation:
    return Allocation("ns", pod, "main", resource, ids, dra=dra)


def test_nvidia_device_ids() -> None:
    # NVIDIA/k8s-device-plugin@v0.18.2:internal/rm/devices.go: the ID is the NVML UUID, a
    # replica of a shared resource `<uuid>::<n>` (NewAnnotatedID)
    assert resolve(G0.uuid, LISTED, GPUS).gpu == G0.uuid
    assert resolve(G0.uuid.lower(), LISTED, GPUS).gpu == G0.uuid
    assert resolve(f"{G1.uuid}::3", LISTED, GPUS).gpu == G1.uuid
    mig = resolve(MIG_2G, LISTED, GPUS)
    assert (mig.gpu, mig.gis) == (G0.uuid, frozenset({GI_2G}))
    assert resolve(f"{MIG_1G}::0", LISTED, GPUS).gis == frozenset({GI_1G})
    # pre-R470 MIG UUIDs carry the GPU instance
    legacy = resolve(f"MIG-{G0.uuid}/{GI_3G}/0", LISTED, GPUS)
    assert (legacy.gpu, legacy.gis) == (G0.uuid, frozenset({GI_3G}))


def test_ids_that_cannot_be_mapped() -> None:
    for device in (
        f"{G0.uuid}-3",  # HAMi: a slot the kubelet picked, not the GPU the pod got
        f"{G0.uuid}-memory-17",
        f"{G0.uuid}-core-99",
        "GPU-ffffffff-0000-0000-0000-000000000000",  # not this node's
        "MIG-GPU-ffffffff-0000-0000-0000-000000000000/1/0",
        "0",  # an index
        "",
    ):
        assert resolve(device, LISTED, GPUS).gpu is None, device
    assert "HAMi" in resolve(f"{G0.uuid}-3", LISTED, GPUS).why


def test_a_mig_device_of_an_ambiguous_profile_is_every_instance_of_it() -> None:
    two = gpu(A100, 0, instances=[("3g.40gb", 0), ("3g.40gb", 4)])
    listed = [ListedGpu(0, "x", two.uuid, (ListedMig("3g.40gb", 0, MIG_3G),))]
    assert resolve(MIG_3G, listed, {two.uuid: two}).gis == frozenset(g.id for g in two.instances)
    # a profile no instance has (read between two listings): the whole GPU
    odd = [ListedGpu(0, "x", two.uuid, (ListedMig("7g.80gb", 0, MIG_3G),))]
    assert resolve(MIG_3G, odd, {two.uuid: two}).gis is None


def test_touched() -> None:
    assert touched([Step(StepKind.CREATE_GI, 0, profile_id=9)]) is None
    assert touched([Step(StepKind.DESTROY_CI, 0, gi=2), Step(StepKind.DESTROY_GI, 0, gi=2)]) == (
        Touch(False, frozenset({2}))
    )
    assert touched([Step(StepKind.SET_MODE, 0, enable=False)]) == Touch(True, frozenset())
    assert touched([Step(StepKind.RESET, 0)]) == Touch(True, frozenset())


def test_holders_of_the_instances_destroyed() -> None:
    allocs = [
        alloc("nvidia.com/mig-2g.20gb", MIG_2G, pod="two"),
        alloc("nvidia.com/mig-1g.10gb", MIG_1G, pod="one"),
        alloc("nvidia.com/gpu", G1.uuid, pod="other-gpu"),
        alloc("rdma/hca_shared_devices_a", "mlx5_0", pod="nic"),  # not a GPU: ignored
    ]
    destroy_1g = Touch(False, frozenset({GI_1G}))
    assert [h.allocation.pod for h in holders(allocs, G0, destroy_1g, LISTED)] == ["one"]
    whole = Touch(True, frozenset())
    assert [h.allocation.pod for h in holders(allocs, G0, whole, LISTED)] == ["two", "one"]
    assert [h.allocation.pod for h in holders(allocs, G1, whole, LISTED)] == ["other-gpu"]
    destroy_3g = Touch(False, frozenset({GI_3G}))
    assert holders(allocs, G0, destroy_3g, LISTED) == []


def test_unmappable_gpu_allocations_hold_every_gpu() -> None:
    touch = Touch(False, frozenset({GI_3G}))
    for a in (
        alloc("volcano.sh/vgpu-number", f"{G1.uuid}-0"),
        alloc("nvidia.com/gpumem", f"{G1.uuid}-memory-3"),
        alloc("example.com/renamed-gpu", "slot-7"),
        alloc("gpu.nvidia.com", "node-0/gpu-1", dra=True),
    ):
        (h,) = holders([a], G0, touch, LISTED)
        assert h.why and a.pod_ref in str(h), a
    # a GPU UUID of this node counts under any resource name; other unmappable IDs only under
    # one a GPU may back
    assert holders([alloc("example.com/thing", G0.uuid)], G0, touch, LISTED)
    assert not holders([alloc("example.com/thing", "slot-7")], G0, touch, LISTED)


@pytest.mark.parametrize(
    ("resource", "backed"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/gpu.shared", True),
        ("nvidia.com/mig-3g.40gb", True),
        ("nvidia.com/gpumem", True),
        ("volcano.sh/vgpu-number", True),
        ("volcano.sh/vgpu-memory", True),
        ("hami.io/vgpu", True),
        ("example.com/my-gpu", True),
        ("gpu.nvidia.com", True),
        ("rdma/hca_shared_devices_a", False),
        ("intel.com/sriov_netdevice", False),
        ("huawei.com/Ascend910", True),  # one definition of a GPU consumer: NPUs count too
    ],
)
def test_gpu_backed(resource: str, backed: bool) -> None:
    assert gpu_backed(resource) is backed

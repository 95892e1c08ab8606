"""The GPUs the fake nvidia-smi can be: every row of models.gpu_catalog, and doubles of GPUs that
models.gpu_catalog_unconfirmed holds, as far as their cited listings go.

A double lists only the profiles its row's cited `nvidia-smi mig -lgip` shows whole: ID,
instances, GiB and both engine lines (SM DEC ENC / CE JPEG OFA) as printed there; the rows no
cited listing shows (the 3g, 4g and 7g profiles) are left out, not made up. So the fake's H100 NVL
and GH200 144G list what a real driver lists at least, and the operator learns no more from them
than from the real listing: it plans from the driver's listing only and refuses static layouts on
these GPUs (core.mig.layout). What the fake needs beyond a listing and no cited source shows for
these GPUs is the double's own assumption, named at each double and used nowhere in the operator:
the `-lgipp` placements (those of the H100 80GB's profiles of the same shape: the same GH100
die with 7 compute and 8 memory slices) and `memory.total`.
"""

from __future__ import annotations

from typing import Final

from vgpu_operator.models import gpu_catalog
from vgpu_operator.models import gpu_catalog_unconfirmed as uc
from vgpu_operator.models.gpu_catalog import GpuModel, MigProfile


def _listed(
    row: uc.UnconfirmedGpu,
    shapes: dict[str, tuple[int, tuple[int, ...], tuple[int, int, int, int, int, int]]],
) -> tuple[MigProfile, ...]:
    """The rows of `row`'s cited listing the double lists: `shapes` gives, per profile name, the
    memory slices and placements (the double's assumption) and the engines printed in the
    listing (SM, DEC, ENC, CE, JPEG, OFA); ID, count and GiB are the listing's own."""
    out: list[MigProfile] = []
    for r in row.listed:
        if r.name not in shapes or any(p.name == r.name for p in out):
            continue
        size, placements, engines = shapes[r.name]
        sm, dec, enc, ce, jpeg, ofa = engines
        assert sm == r.sm, (row.key, r.name)  # the engines are the same listing's
        out.append(
            MigProfile(
                id=r.id,
                name=r.name,
                slices=int(r.name.split("g.", 1)[0]),
                size=size,
                memory_gib=r.memory_gib,
                max_count=r.total,
                placements=placements,
                sm=sm,
                dec=dec,
                enc=enc,
                ce=ce,
                jpeg=jpeg,
                ofa=ofa,
                ci_profile=gpu_catalog.HOPPER_1G_CI if r.id == 15 else -1,
                unconfirmed="a double's row: placements assumed as on the H100 80GB",
            )
        )
    return tuple(out)


_1G = (1, (0, 1, 2, 3, 4, 5, 6))  # the H100 80GB's 1g placements (models.gpu_catalog)
_1G_X2 = (2, (0, 2, 4, 6))
_2G = (2, (0, 2, 4))

# https://github.com/NVIDIA/gpu-operator/pull/900: the public copy ends inside the 2g.24gb row
# (its engine line is cut), so 2g.24gb is left out too.
H100_NVL: Final = GpuModel(
    key=uc.H100_NVL.key,
    nvml_name=uc.H100_NVL.nvml_name,
    arch="hopper",
    # the double's assumption: CUDA reports 95330 MiB (fastfetch-cli/fastfetch#1658, 99961274368
    # bytes); NVML's memory.total taken 500 MiB above it, as on the H100 80GB
    memory_mib=95830,
    compute_slices=7,
    memory_slices=8,
    pci_device_id=uc.H100_NVL.pci_device_ids[0],
    unconfirmed=uc.H100_NVL.unconfirmed,
    profiles=_listed(
        uc.H100_NVL,
        {
            "1g.12gb": (*_1G, (16, 1, 0, 1, 1, 0)),
            "1g.12gb+me": (*_1G, (16, 1, 0, 1, 1, 1)),
            "1g.24gb": (*_1G_X2, (26, 1, 0, 1, 1, 0)),
        },
    ),
)

# https://github.com/NVIDIA/mig-parted/pull/139: the listing as far as its public copy goes.
GH200_144G: Final = GpuModel(
    key=uc.GH200_144G.key,
    nvml_name=uc.GH200_144G.nvml_name,
    arch="hopper",
    memory_mib=146831,  # the double's assumption (a public --query-gpu capture, not cited)
    compute_slices=7,
    memory_slices=8,
    pci_device_id=uc.GH200_144G.pci_device_ids[0],
    unconfirmed=uc.GH200_144G.unconfirmed,
    profiles=_listed(
        uc.GH200_144G,
        {
            "1g.18gb": (*_1G, (16, 1, 0, 1, 1, 0)),
            "1g.18gb+me": (*_1G, (16, 1, 0, 1, 1, 1)),
            "1g.36gb": (*_1G_X2, (26, 1, 0, 1, 1, 0)),
            "2g.36gb": (*_2G, (32, 2, 0, 2, 2, 0)),
        },
    ),
)

FAKE_MODELS: Final[dict[str, GpuModel]] = gpu_catalog.GPU_MODELS | {
    m.key: m for m in (H100_NVL, GH200_144G)
}


def fake_model_for_name(nvml_name: str) -> GpuModel | None:
    """The fake's model whose NVML name is exactly `nvml_name`, if any."""
    return next((m for m in FAKE_MODELS.values() if m.nvml_name == nvml_name), None)

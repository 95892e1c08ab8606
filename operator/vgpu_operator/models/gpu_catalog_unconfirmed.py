"""GPU models users ask for whose MIG geometry no cited listing confirms in full.

Each row holds what public sources show, each figure with its source: the NVML name where a
capture shows it, the PCI device IDs, the GPU-instance profiles and their counts (NVIDIA's MIG user
guide, https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html, or
mig-parted's configs), and the rows of real `nvidia-smi mig -lgip` listings. `unconfirmed` says
what no source shows. No figure here is estimated: a profile no listing shows has no memory.

Such a row is not a models.gpu_catalog row on purpose, so nothing treats it as hardware: a static
MIG layout on these GPUs (or on any GPU without a models.gpu_catalog row) is refused for the node
(core.nodes.node_hardware, `static_refusal`: what would confirm the model), as nothing could check
it, and the node agent's planner refuses it the same way (core.mig.layout,
`static_refusal_for_gpu`: no step, not even MIG mode, and the node says why); dynamic MIG is served
where the agent's own listing of the driver confirms the profiles. The agent never fills in
profiles from a row here (agent.observe); knownMigGeometries gets an entry for
such a GPU from an operator-config entry or an agent's report of the driver's listing
(`fromInventory`, after core.volcano.geometry's sanity and shadowing checks, with the memory of
that report, core.volcano.mig_memory), never from a built-in entry that matches it (another GPU's
figures: the H200's for the H200 NVL). The names here are known names an agent's report may not
shadow (core.volcano.geometry.known_names). A row moves to models.gpu_catalog once cited listings
show the memory of every profile and the placements.
"""

from __future__ import annotations

import re
from typing import Final

from vgpu_operator.models import gpu_catalog
from vgpu_operator.models.gpu_catalog_unconfirmed_blackwell import (
    B200,
    GB200,
    RTX_PRO_6000_MAX_Q,
    RTX_PRO_6000_SERVER,
    RTX_PRO_6000_WORKSTATION,
)
from vgpu_operator.models.unconfirmed_gpu import (
    HAMI_CHART,
    MIG_GUIDE_TABLES,
    MIG_PARTED_CONFIG,
    KnownProfile,
    ListedProfile,
    UnconfirmedGpu,
    listing_rows,
)

__all__ = [
    "A800_40GB",
    "A800_80GB_PCIE",
    "A800_SXM4_80GB",
    "B200",
    "GB200",
    "GH200_144G",
    "H20",
    "H100_NVL",
    "H200_NVL",
    "H800",
    "HAMI_CHART",
    "MIG_GUIDE_TABLES",
    "MIG_PARTED_CONFIG",
    "RTX_PRO_6000_MAX_Q",
    "RTX_PRO_6000_SERVER",
    "RTX_PRO_6000_WORKSTATION",
    "UNCONFIRMED_GPUS",
    "KnownProfile",
    "ListedProfile",
    "UnconfirmedGpu",
    "product_label",
    "row_for_product",
    "static_refusal",
    "static_refusal_for_gpu",
    "unconfirmed_names",
]

# --- H100 NVL and GH200 144G: listings whose public copies stop after the 2g profile ----------

_NVL_LISTING = "https://github.com/NVIDIA/gpu-operator/pull/900 (H100 NVL)"
# NVIDIA's MIG user guide gives no GiB figure to take instead: its tables give each profile's
# fraction of memory (MIG_GUIDE_TABLES), and `-lgip`'s figure is below the name's GB.
_FRACTIONS_ONLY = "NVIDIA's MIG user guide tables give fractions of memory, not GiB"
H100_NVL: Final = UnconfirmedGpu(
    key="H100 NVL",
    nvml_name="NVIDIA H100 NVL",
    name_seen="https://github.com/akash-network/provider-configs/pull/91 "
    "(`nvidia-smi --query-gpu=name,pci.device_id`: NVIDIA H100 NVL, 0x232110DE)",
    pci_device_ids=("0x232110DE",),
    pci_source="the capture in name_seen; "
    f"{MIG_PARTED_CONFIG}: `# H100 NVL, H800 NVL` over 0x232110DE 0x233A10DE",
    profiles=(
        KnownProfile("1g.12gb", 7),
        KnownProfile("1g.12gb+me", 1),
        KnownProfile("1g.24gb", 4),
        KnownProfile("2g.24gb", 3),
        KnownProfile("3g.47gb", 2),
        KnownProfile("4g.47gb", 1),
        KnownProfile("7g.94gb", 1),
    ),
    profiles_source=f"{MIG_PARTED_CONFIG} (the all-* configs under `# H100 NVL, H800 NVL, GH200` "
    "and `# H100 NVL, H800 NVL`)",
    listed=listing_rows(
        _NVL_LISTING,
        ("1g.12gb", 19, 7, 10.75, 16),
        ("1g.12gb+me", 20, 1, 10.75, 16),
        ("1g.24gb", 15, 4, 21.62, 26),
        ("2g.24gb", 14, 3, 21.62, 32),
    ),
    unconfirmed="the public copy of the listing stops at 2g.24gb: no cited listing row shows the "
    "memory of 3g.47gb, 4g.47gb or 7g.94gb (https://github.com/NVIDIA/mig-parted/pull/101 quotes "
    f"46.38 GiB for 3g.47gb in a sum, not as a listing row), nor `-lgipp` placements; "
    f"{_FRACTIONS_ONLY}",
)

_GH200_LISTING = "https://github.com/NVIDIA/mig-parted/pull/139 (GH200 144G HBM3e)"
GH200_144G: Final = UnconfirmedGpu(
    key="GH200 144G HBM3e",
    nvml_name="NVIDIA GH200 144G HBM3e",
    name_seen="",
    pci_device_ids=("0x234810DE",),
    pci_source=f"{MIG_PARTED_CONFIG} (`# GH200 144G HBM3e`); {_GH200_LISTING}",
    profiles=(
        KnownProfile("1g.18gb", 7),
        KnownProfile("1g.18gb+me", 1),
        KnownProfile("1g.36gb", 4),
        KnownProfile("2g.36gb", 3),
        KnownProfile("3g.72gb", None),
    ),
    profiles_source=f"the listing of {_GH200_LISTING} (1g.18gb, 1g.18gb+me, 1g.36gb, 2g.36gb); "
    f"{MIG_PARTED_CONFIG} (all-balanced under `# GH200 144G HBM3e`: 1g.18gb x2, 2g.36gb, "
    "3g.72gb)",
    listed=listing_rows(
        _GH200_LISTING,
        ("1g.18gb", 19, 7, 17.50, 16),
        ("1g.18gb+me", 20, 1, 17.50, 16),
        ("1g.36gb", 15, 4, 35.25, 26),
        ("2g.36gb", 14, 3, 35.25, 32),
    ),
    unconfirmed="the public listing stops at 2g.36gb: no cited listing shows the memory of "
    "3g.72gb or how many it allows, no source names a 4g or 7g profile, nor placements; "
    f"{_FRACTIONS_ONLY}; no capture shows the NVML name",
)

# --- Hopper and Ampere export and NVL parts ----------------------------------------------------

_NO_LISTING = "no cited `nvidia-smi mig -lgip` listing of this GPU: no memory figure, no placements"


def _named(*names: str) -> tuple[KnownProfile, ...]:
    return tuple(KnownProfile(n, None) for n in names)


H20: Final = UnconfirmedGpu(
    key="H20",
    nvml_name="NVIDIA H20",
    name_seen="",
    pci_device_ids=(),
    pci_source=f"{MIG_PARTED_CONFIG}: the all-balanced filter for `H100-96GB, PG506-96GB, GH200, "
    "H20` holds 0x234210DE 0x233D10DE 0x20B610DE 0x232910DE without saying which is the H20's",
    profiles=_named("1g.12gb", "2g.24gb", "3g.48gb", "7g.96gb"),
    profiles_source=f"{MIG_PARTED_CONFIG} (all-balanced for that filter: 1g.12gb x2, 2g.24gb, "
    f"3g.48gb); {HAMI_CHART} (`H20`: 1g.12gb, 2g.24gb, 3g.48gb, 7g.96gb); the MIG user guide has "
    "no H20 table",
    listed=(),
    unconfirmed=f"{_NO_LISTING}; no capture shows the NVML name. A knownMigGeometries model "
    "string for it matches the H200 too (any substring of `NVIDIA-NVIDIA H20` is one of "
    "`NVIDIA-NVIDIA H200`; HAMi's chart's `H20` does), so core.volcano.geometry refuses an "
    "agent's H20 report as shadowing",
)

H200_NVL: Final = UnconfirmedGpu(
    key="H200 NVL",
    nvml_name="NVIDIA H200 NVL",
    name_seen="",
    pci_device_ids=("0x233B10DE",),
    pci_source=f"{MIG_PARTED_CONFIG}: `# H200 141GB, H200 NVL` over 0x233510DE 0x233B10DE; "
    "models.gpu_catalog's H200 row holds 0x233510DE",
    profiles=_named("1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"),
    profiles_source=f"{MIG_PARTED_CONFIG} (all-balanced for that filter: 1g.18gb, 2g.35gb, "
    f"3g.71gb; its all-1g.35gb is filtered to 0x233510DE only); {HAMI_CHART} (`H200 NVL`: "
    "1g.18gb, 2g.35gb, 3g.71gb, 7g.141gb)",
    listed=(),
    unconfirmed=f"{_NO_LISTING}; no capture shows the NVML name",
)

# mig-parted's `H100-80GB, H800-80GB, A100-80GB, A800-80GB` filter holds 0x233010DE 0x233110DE
# 0x232210DE 0x20B210DE 0x20B510DE 0x20F310DE 0x20F510DE 0x232410DE and its all-* configs under
# that comment give the A100/H100 80GB profile names and counts; the `A100-40GB, A800-40GB` one
# holds 0x20B010DE 0x20B110DE 0x20F110DE 0x20F610DE. The IDs models.gpu_catalog's H100 and A100
# rows do not hold are the H800's and A800's (which of two is which SKU, no source says).
_80GB = (
    KnownProfile("1g.10gb", 7),
    KnownProfile("1g.10gb+me", 1),
    KnownProfile("1g.20gb", 4),
    KnownProfile("2g.20gb", 3),
    KnownProfile("3g.40gb", 2),
    KnownProfile("4g.40gb", 1),
    KnownProfile("7g.80gb", 1),
)
_80GB_SOURCE = (
    f"{MIG_PARTED_CONFIG} (the all-* configs under `H100-80GB, H800-80GB, A100-80GB, A800-80GB`)"
)
H800: Final = UnconfirmedGpu(
    key="H800",
    nvml_name="NVIDIA H800",
    name_seen="",
    pci_device_ids=("0x232210DE", "0x232410DE"),
    pci_source=f"{MIG_PARTED_CONFIG}: the GH100 IDs of the 80GB filter the H100 rows do not hold",
    profiles=_80GB,
    profiles_source=_80GB_SOURCE,
    listed=(),
    unconfirmed=f"{_NO_LISTING} (the H100's figures are another GPU's); no capture shows the "
    "NVML name",
)
A800_80GB_PCIE: Final = UnconfirmedGpu(
    key="A800 80GB PCIe",
    nvml_name="NVIDIA A800 80GB PCIe",
    name_seen="https://github.com/Project-HAMi/HAMi/issues/1903 (nvidia-smi, driver 580.119.02, "
    "81920MiB)",
    pci_device_ids=("0x20F310DE", "0x20F510DE"),
    pci_source=f"{MIG_PARTED_CONFIG}: the GA100 IDs of the 80GB filter the A100 rows do not hold",
    profiles=_80GB,
    profiles_source=_80GB_SOURCE,
    listed=(),
    unconfirmed=_NO_LISTING,
)
A800_SXM4_80GB: Final = A800_80GB_PCIE._replace(
    key="A800-SXM4-80GB",
    nvml_name="NVIDIA A800-SXM4-80GB",
    name_seen="",
    unconfirmed=f"{_NO_LISTING}; the NVML name is the A100-SXM4-80GB's form, not seen",
)
A800_40GB: Final = UnconfirmedGpu(
    key="A800-40GB",
    nvml_name="",
    name_seen="",
    pci_device_ids=(),
    pci_source=f"{MIG_PARTED_CONFIG}: 0x20B110DE or 0x20F610DE of the `A100-40GB, A800-40GB` "
    "filter (the A100 rows hold 0x20B010DE and 0x20F110DE); which, no source says",
    profiles=(
        KnownProfile("1g.5gb", 7),
        KnownProfile("1g.5gb+me", 1),
        KnownProfile("2g.10gb", 3),
        KnownProfile("3g.20gb", 2),
        KnownProfile("4g.20gb", 1),
        KnownProfile("7g.40gb", 1),
    ),
    profiles_source=f"{MIG_PARTED_CONFIG} (the all-* configs under `A100-40GB, A800-40GB`)",
    listed=(),
    unconfirmed=f"{_NO_LISTING}; no source names it as NVML does",
)

UNCONFIRMED_GPUS: Final[dict[str, UnconfirmedGpu]] = {
    g.key: g
    for g in (
        H100_NVL,
        GH200_144G,
        B200,
        GB200,
        RTX_PRO_6000_SERVER,
        RTX_PRO_6000_WORKSTATION,
        RTX_PRO_6000_MAX_Q,
        H20,
        H200_NVL,
        H800,
        A800_80GB_PCIE,
        A800_SXM4_80GB,
        A800_40GB,
    )
}


def unconfirmed_names() -> set[str]:
    """The NVML names of the rows here (those no source gives are left out)."""
    return {g.nvml_name for g in UNCONFIRMED_GPUS.values() if g.nvml_name}


def product_label(nvml_name: str) -> str:
    """GPU Feature Discovery's `nvidia.com/gpu.product` for a GPU NVML names `nvml_name`: the
    name with spaces as dashes."""
    return nvml_name.replace(" ", "-")


def row_for_product(product: str) -> UnconfirmedGpu | None:
    """The row of a GPU as GPU Feature Discovery's `nvidia.com/gpu.product` names it (NVML's
    name, spaces as dashes; a `-MIG-...` or `-SHARED` suffix dropped); None: none here."""
    base = re.sub(r"-(MIG-.*|SHARED)$", "", product)
    for g in UNCONFIRMED_GPUS.values():
        if g.nvml_name and product_label(g.nvml_name) == base:
            return g
    return None


def static_refusal(product: str | None) -> str:
    """Why a static MIG layout is refused on a node whose GPU GFD names `product` (None: no
    label) when models.gpu_catalog has no row of it, and what would confirm one."""
    row = row_for_product(product) if product else None
    what = (
        "has no nvidia.com/gpu.product label (its GPU model is not known)"
        if product is None
        else f"has {product}, whose catalog row is not confirmed ({row.unconfirmed})"
        if row is not None
        else f"has {product}, a GPU model the catalog does not know"
    )
    return (
        f"{what}: a static MIG layout is refused on a GPU without a confirmed catalog row. A "
        "cited `nvidia-smi mig -lgip`/`-lgipp` listing or NVIDIA's MIG user guide table "
        f"({MIG_GUIDE_TABLES}) showing every profile's memory and placements confirms one (a "
        "row of models/gpu_catalog.py)"
    )


def static_refusal_fix(field: str = "spec.mig.partitioning", dynamic: str = "dynamic") -> str:
    """The fix of that refusal, the same from the controller and the node agent (a `dra` pool
    names its own field and value)."""
    return (
        f"use {field}: {dynamic} (served where the node agent's own listing confirms the "
        "profiles), or narrow spec.nodeSelector by nvidia.com/gpu.product to GPUs the catalog "
        "confirms"
    )


def static_refusal_for_gpu(nvml_name: str) -> str | None:
    """The node agent's side of the same refusal: None when models.gpu_catalog has a confirmed
    MIG row for the GPU NVML names `nvml_name`, else `static_refusal` of its product label (the
    text the controller gives for the node, core.nodes.node_hardware). The agent's planner
    (core.mig.layout) asks this before it plans a static layout, so a layout released before the
    controller refused it, or by hand, is never applied there either."""
    model = gpu_catalog.model_for_name(nvml_name)
    if model is not None and model.mig_capable:
        return None
    return static_refusal(product_label(nvml_name))

"""GPU models users ask for whose MIG geometry no cited listing confirms in full.

Each row holds what public sources show, each figure with its source: the NVML name where a
capture shows it, the PCI device IDs, the GPU-instance profiles and their counts (NVIDIA's MIG user
guide, https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html, or
mig-parted's configs), and the rows of real `nvidia-smi mig -lgip` listings. `unconfirmed` says
what no source shows. No figure here is estimated: a profile no listing shows has no memory.

Such a row is not a models.gpu_catalog row on purpose, so nothing treats it as hardware: a static
MIG layout on these GPUs (or on any GPU without a models.gpu_catalog row) is refused for the node
(core.nodes.validate, `static_refusal`: what would confirm the model), as nothing could check it;
the node agent's planner finds no catalog model either (core.mig.layout; it would turn MIG on
first and plan from the driver's listing, core.mig.partition's two phases); the agent never
fills in profiles from a row here (agent.observe); knownMigGeometries gets an entry for
such a GPU from an operator-config entry or an agent's report of the driver's listing
(`fromInventory`, after core.volcano.geometry's sanity and shadowing checks, with the memory of
that report, core.volcano.mig_memory), never from a built-in entry that matches it (another GPU's
figures: the H200's for the H200 NVL). The names here are known names an agent's report may not
shadow (core.volcano.geometry.known_names). A row moves to models.gpu_catalog once cited listings
show the memory of every profile and the placements.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

MIG_PARTED_CONFIG: Final = "NVIDIA/mig-parted@v0.15.0:deployments/systemd/config-default.yaml"
# HAMi's own scheduler chart names some of these models in its migProfileAllowlist (its model
# strings match as substrings too).
HAMI_CHART: Final = (
    "Project-HAMi/HAMi@v2.10.0:charts/hami/templates/scheduler/device-configmap.yaml"
)
MIG_GUIDE_TABLES: Final = (
    "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html"
)


class ListedProfile(NamedTuple):
    """One row of a real `nvidia-smi mig -lgip` listing, as printed there."""

    name: str
    id: int  # the nvidia-smi profile ID
    total: int  # the "Total" of "Free/Total"
    memory_gib: float  # the "Memory GiB" column
    sm: int
    source: str


class KnownProfile(NamedTuple):
    """A GPU-instance profile a cited source names for the model; `max_count` None: no source
    gives the most instances of it."""

    name: str
    max_count: int | None


class UnconfirmedGpu(NamedTuple):
    key: str  # short model name
    nvml_name: str  # the name NVML reports, "" when no source names it at all
    name_seen: str  # the capture that shows `nvml_name` exactly; "" : the name is not confirmed
    pci_device_ids: tuple[str, ...]  # mig-parted's device-filter form, 0xDDDDVVVV
    pci_source: str
    profiles: tuple[KnownProfile, ...]
    profiles_source: str
    listed: tuple[ListedProfile, ...]
    unconfirmed: str  # why this is not a models.gpu_catalog row

    def lowest_gib(self, profile: str) -> float | None:
        """The lowest `-lgip` figure any cited listing shows for `profile` (None: none shows it)."""
        return min((r.memory_gib for r in self.listed if r.name == profile), default=None)

    @property
    def unlisted(self) -> tuple[str, ...]:
        """The profiles no cited listing shows a memory figure for."""
        seen = {r.name for r in self.listed}
        return tuple(p.name for p in self.profiles if p.name not in seen)


def _rows(source: str, *rows: tuple[str, int, int, float, int]) -> tuple[ListedProfile, ...]:
    return tuple(ListedProfile(n, i, t, g, sm, source) for n, i, t, g, sm in rows)


# --- B200 and GB200 --------------------------------------------------------------------------

_B200_A = "https://github.com/NVIDIA/mig-parted/pull/166 (the same in NVIDIA/gpu-operator#1242)"
_B200_B = "https://github.com/NVIDIA/mig-parted/pull/187 (the same in NVIDIA/gpu-operator#1351)"
B200: Final = UnconfirmedGpu(
    key="B200",
    nvml_name="NVIDIA B200",
    name_seen="",
    pci_device_ids=("0x290110DE",),
    pci_source=f"{MIG_PARTED_CONFIG} (`# B200`); NVIDIA/mig-parted@v0.15.0:CHANGELOG.md",
    profiles=(
        KnownProfile("1g.23gb", 7),
        KnownProfile("1g.23gb+me", 1),
        KnownProfile("1g.45gb", 4),
        KnownProfile("2g.45gb", 3),
        KnownProfile("3g.90gb", 2),
        KnownProfile("4g.90gb", 1),
        KnownProfile("7g.180gb", 1),
    ),
    profiles_source=f"{MIG_GUIDE_TABLES} (B200 180 GB)",
    listed=_rows(
        _B200_A,
        ("1g.23gb", 19, 7, 22.00, 18),
        ("1g.23gb+me", 20, 1, 22.00, 18),
        ("1g.45gb", 15, 4, 44.25, 30),
        ("2g.45gb", 14, 3, 44.25, 36),
    )
    + _rows(
        _B200_B,
        ("1g.23gb", 19, 7, 20.50, 18),
        ("1g.23gb+me", 20, 1, 20.50, 18),
        ("1g.45gb", 15, 4, 44.25, 30),
        ("2g.45gb", 14, 3, 44.25, 36),
    ),
    unconfirmed="the public listings stop after 2g.45gb: no cited listing shows the memory of "
    "3g.90gb, 4g.90gb or 7g.180gb, nor `-lgipp` placements; no capture shows the NVML name",
)

_GB200_PROD = "https://github.com/NVIDIA/mig-parted/issues/227 (a production GB200)"
# An earlier GB200 board listed `1g.24gb` (20.00 GiB) where production boards list 1g.23gb
# (https://github.com/NVIDIA/gpu-operator/pull/1303; the names changed in
# https://github.com/NVIDIA/mig-parted/pull/228): only the rows of names production boards list.
_GB200_EARLY = "https://github.com/NVIDIA/gpu-operator/pull/1303 (an earlier GB200 board)"
GB200: Final = UnconfirmedGpu(
    key="GB200",
    nvml_name="NVIDIA GB200",
    name_seen="",
    pci_device_ids=("0x294110DE",),
    pci_source=f"{MIG_PARTED_CONFIG} (`# GB200 HGX`); NVIDIA/mig-parted@v0.15.0:CHANGELOG.md",
    profiles=(
        KnownProfile("1g.23gb", 7),
        KnownProfile("1g.23gb+me", 1),
        KnownProfile("1g.47gb", 4),
        KnownProfile("2g.47gb", 3),
        KnownProfile("3g.93gb", 2),
        KnownProfile("4g.93gb", 1),
        KnownProfile("7g.186gb", 1),
    ),
    profiles_source=f"{MIG_PARTED_CONFIG} (the all-* configs under `# GB200 HGX` and "
    "`# GB200, B200`; the MIG user guide has no GB200 table)",
    listed=_rows(
        _GB200_PROD,
        ("1g.23gb", 19, 7, 22.00, 18),
        ("1g.23gb+me", 20, 1, 22.00, 18),
        ("1g.47gb", 15, 4, 45.50, 32),
        ("2g.47gb", 14, 3, 45.50, 38),
    )
    + _rows(_GB200_EARLY, ("1g.47gb", 15, 4, 45.50, 32), ("2g.47gb", 14, 3, 45.50, 38)),
    unconfirmed="no cited listing shows the memory of 3g.93gb, 4g.93gb or 7g.186gb, nor "
    "placements; no capture shows the NVML name",
)

# --- RTX PRO 6000 Blackwell: one MIG table for three editions ---------------------------------

# https://github.com/bigstack-oss/cubecos/issues/312 (about the Server Edition; nvidia-smi cuts the
# name to "NVIDIA RTX PRO 6000 Blac...", 97887MiB) lists GPU 1 and GPU 2; the GKE device plugin's
# listing (GoogleCloudPlatform/container-engine-accelerators#564) shows 23.62 for the 1g rows.
_RTX_BIGSTACK = "https://github.com/bigstack-oss/cubecos/issues/312"
_RTX_GKE = "https://github.com/GoogleCloudPlatform/container-engine-accelerators/pull/564"
_RTX_PROFILES = (
    KnownProfile("1g.24gb", 4),
    KnownProfile("1g.24gb+me", 1),
    KnownProfile("1g.24gb+gfx", 4),
    KnownProfile("1g.24gb+me.all", 1),
    KnownProfile("1g.24gb-me", 4),
    KnownProfile("2g.48gb", 2),
    KnownProfile("2g.48gb+gfx", 2),
    KnownProfile("2g.48gb+me.all", 1),
    KnownProfile("2g.48gb-me", 2),
    KnownProfile("4g.96gb", 1),
    KnownProfile("4g.96gb+gfx", 1),
)
_RTX_LISTED = _rows(
    _RTX_BIGSTACK,
    ("1g.24gb", 14, 4, 23.12, 46),
    ("1g.24gb+me", 21, 1, 23.12, 46),
    ("1g.24gb+gfx", 47, 4, 23.12, 46),
    ("1g.24gb+me.all", 65, 1, 23.12, 46),
    ("1g.24gb-me", 67, 4, 23.12, 46),
    ("2g.48gb", 5, 2, 46.50, 94),
    ("2g.48gb+gfx", 35, 2, 46.50, 94),
    ("2g.48gb+me.all", 64, 1, 46.50, 94),
    ("2g.48gb-me", 66, 2, 46.50, 94),
) + _rows(
    _RTX_GKE,
    ("1g.24gb", 14, 4, 23.62, 46),
    ("1g.24gb+me", 21, 1, 23.62, 46),
    ("1g.24gb+gfx", 47, 4, 23.62, 46),
)
_RTX_TABLE = (
    f"{MIG_GUIDE_TABLES} (one table for the Workstation, Max-Q Workstation and Server Editions)"
)
_RTX_WHY = (
    "no cited listing shows the memory of 4g.96gb or 4g.96gb+gfx, nor placements (4 compute "
    "and 4 memory slices by the MIG user guide's fractions)"
)
RTX_PRO_6000_SERVER: Final = UnconfirmedGpu(
    key="RTX PRO 6000 Blackwell Server Edition",
    nvml_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
    name_seen="",
    pci_device_ids=("0x2BB510DE",),
    pci_source=f"{MIG_PARTED_CONFIG} (`# RTX PRO 6000 Blackwell`); the Server Edition's "
    "`RTX-PRO-6000 0x2bb5` in https://github.com/NVIDIA/gpu-admin-tools/issues/17",
    profiles=_RTX_PROFILES,
    profiles_source=_RTX_TABLE,
    listed=_RTX_LISTED,
    unconfirmed=f"{_RTX_WHY}; the listings' nvidia-smi cuts the NVML name (HAMi's chart matches "
    f"it by `RTX PRO 6000 Blackwell Server Edition`, {HAMI_CHART}: no capture)",
)
RTX_PRO_6000_WORKSTATION: Final = RTX_PRO_6000_SERVER._replace(
    key="RTX PRO 6000 Blackwell Workstation Edition",
    nvml_name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    pci_device_ids=(),
    pci_source="",
    listed=(),
    unconfirmed=f"{_RTX_WHY}; no listing of this edition is cited (the table says it has the "
    "same profiles); neither its NVML name nor its PCI device ID is seen",
)
RTX_PRO_6000_MAX_Q: Final = RTX_PRO_6000_WORKSTATION._replace(
    key="RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    nvml_name="NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    unconfirmed=f"{_RTX_WHY}; no listing of this edition is cited; GFD's product label "
    "`NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition` "
    "(https://github.com/NVIDIA/gpu-operator/issues/2249) is the NVML name with spaces as '-', "
    "so which '-' were spaces is not shown",
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


def row_for_product(product: str) -> UnconfirmedGpu | None:
    """The row of a GPU as GPU Feature Discovery's `nvidia.com/gpu.product` names it (NVML's
    name, spaces as dashes; a `-MIG-...` or `-SHARED` suffix dropped); None: none here."""
    base = re.sub(r"-(MIG-.*|SHARED)$", "", product)
    for g in UNCONFIRMED_GPUS.values():
        if g.nvml_name and g.nvml_name.replace(" ", "-") == base:
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

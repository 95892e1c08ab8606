"""The Blackwell rows of models.gpu_catalog_unconfirmed (B200, GB200, RTX PRO 6000 Blackwell):
real `nvidia-smi mig -lgip` listings whose public copies stop before the 3g or 4g profiles."""

from __future__ import annotations

from typing import Final

from vgpu_operator.models.unconfirmed_gpu import (
    HAMI_CHART,
    MIG_GUIDE_TABLES,
    MIG_PARTED_CONFIG,
    KnownProfile,
    UnconfirmedGpu,
    listing_rows,
)

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
    listed=listing_rows(
        _B200_A,
        ("1g.23gb", 19, 7, 22.00, 18),
        ("1g.23gb+me", 20, 1, 22.00, 18),
        ("1g.45gb", 15, 4, 44.25, 30),
        ("2g.45gb", 14, 3, 44.25, 36),
    )
    + listing_rows(
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
    listed=listing_rows(
        _GB200_PROD,
        ("1g.23gb", 19, 7, 22.00, 18),
        ("1g.23gb+me", 20, 1, 22.00, 18),
        ("1g.47gb", 15, 4, 45.50, 32),
        ("2g.47gb", 14, 3, 45.50, 38),
    )
    + listing_rows(_GB200_EARLY, ("1g.47gb", 15, 4, 45.50, 32), ("2g.47gb", 14, 3, 45.50, 38)),
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
_RTX_LISTED = listing_rows(
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
) + listing_rows(
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

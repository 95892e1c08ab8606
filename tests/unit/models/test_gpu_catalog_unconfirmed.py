"""The rows of models.gpu_catalog_unconfirmed, one test per GPU: each figure against the real
`nvidia-smi mig -lgip` listings it cites (copied into tests/data/nvidia-smi/transcripts/, sources in
tests.kit.smi_samples.SOURCES), the memory an instance surely has as core.volcano.mig_memory
converts the lowest listed figure, and, for each row, what no source shows (why it is unconfirmed).
"""

from __future__ import annotations

import pytest

from tests.kit.smi_samples import SOURCES, TRANSCRIPTS, transcript
from vgpu_operator.agent.parse import parse_lgip
from vgpu_operator.core.volcano.mig_memory import hardware_memory, instance_memory_mib
from vgpu_operator.models import gpu_catalog
from vgpu_operator.models import gpu_catalog_unconfirmed as uc
from vgpu_operator.models.config import ConfigError, load_config

Row = tuple[str, int, int, float, int]


def listed(gpu: uc.UnconfirmedGpu, source: str) -> set[Row]:
    """The rows `gpu` takes from the listing whose source contains `source`."""
    return {(r.name, r.id, r.total, r.memory_gib, r.sm) for r in gpu.listed if source in r.source}


def parsed(*names: str, only: uc.UnconfirmedGpu | None = None) -> set[Row]:
    """The rows of transcripts `names` as the agent parses them (of `only`'s profiles)."""
    rows = {
        (r.name, r.id, r.total, r.memory_gib, r.sm)
        for n in names
        for r in parse_lgip(transcript(n))
    }
    keep = {p.name for p in only.profiles} if only is not None else None
    return {r for r in rows if keep is None or r[0] in keep}


def surely(gpu: uc.UnconfirmedGpu) -> dict[str, int]:
    """MiB an instance of each listed profile surely has: floor((GiB - 0.005) x 1024) of the
    lowest listed figure (core.volcano.mig_memory.instance_memory_mib)."""
    out: dict[str, int] = {}
    for p in gpu.profiles:
        low = gpu.lowest_gib(p.name)
        mib = instance_memory_mib([] if low is None else [low])
        if mib is not None:
            out[p.name] = mib
    return out


def test_every_transcript_has_its_source() -> None:
    assert {p.name for p in TRANSCRIPTS.iterdir()} == set(SOURCES)


@pytest.mark.parametrize("gpu", list(uc.UNCONFIRMED_GPUS.values()), ids=list(uc.UNCONFIRMED_GPUS))
def test_no_unconfirmed_row_is_a_catalog_row(gpu: uc.UnconfirmedGpu) -> None:
    """Nothing plans, checks or renders from these rows: not the catalog lookups (static layouts,
    the agent's fallback table, knownMigGeometries) nor the memory ceiling."""
    assert gpu.unconfirmed
    assert gpu.key not in gpu_catalog.GPU_MODELS
    if gpu.nvml_name:
        assert gpu_catalog.model_for_name(gpu.nvml_name) is None
        assert gpu.nvml_name not in hardware_memory()
    for p in gpu.profiles:  # a profile's count, where a listing shows it, agrees with the table
        assert all(r.total == p.max_count for r in gpu.listed if r.name == p.name), p
    assert {r.name for r in gpu.listed} <= {p.name for p in gpu.profiles}


def test_h100_nvl() -> None:
    """gpu-operator#900: the H100 NVL's listing, whose public copy stops inside the 2g.24gb row;
    the 3g.47gb's 46.38 GiB is quoted in mig-parted#101 as part of a sum, not as a listing row.
    The NVML name and device ID are seen in akash-network/provider-configs#91."""
    nvl = uc.H100_NVL
    assert listed(nvl, "gpu-operator/pull/900") == parsed("lgip_h100_nvl_excerpt.txt")
    assert surely(nvl) == {
        "1g.12gb": 11002,  # floor((10.75 - 0.005) x 1024)
        "1g.12gb+me": 11002,
        "1g.24gb": 22133,
        "2g.24gb": 22133,
    }
    # UNCONFIRMED: no cited listing row shows these, so no figure is given for them
    assert nvl.unlisted == ("3g.47gb", "4g.47gb", "7g.94gb")
    assert "mig-parted/pull/101" in nvl.unconfirmed and "fractions of memory" in nvl.unconfirmed
    assert "provider-configs/pull/91" in nvl.name_seen
    assert nvl.pci_device_ids == ("0x232110DE",)
    # mig-parted's all-* configs give every count (NVIDIA/mig-parted@v0.15.0)
    assert all(p.max_count is not None for p in nvl.profiles)


def test_gh200_144g() -> None:
    """mig-parted#139: the GH200 144G HBM3e's listing, as far as its public copy goes (2g.36gb);
    mig-parted's all-balanced names 3g.72gb; nothing names a 4g or 7g profile."""
    gh200 = uc.GH200_144G
    assert listed(gh200, "mig-parted/pull/139") == parsed("lgip_gh200_144g_excerpt.txt")
    assert surely(gh200) == {
        "1g.18gb": 17914,  # floor((17.50 - 0.005) x 1024)
        "1g.18gb+me": 17914,
        "1g.36gb": 36090,
        "2g.36gb": 36090,
    }
    assert gh200.unlisted == ("3g.72gb",)  # UNCONFIRMED: no listing shows it, nor its count
    assert gh200.profiles[-1] == uc.KnownProfile("3g.72gb", None)
    assert gh200.name_seen == "" and gh200.pci_device_ids == ("0x234810DE",)


def test_b200() -> None:
    """mig-parted#166 (gpu-operator#1242) and mig-parted#187 (gpu-operator#1351): the B200's
    listings on two drivers, 1g.23gb 22.00 and 20.50 GiB; both stop after 2g.45gb."""
    b200 = uc.B200
    assert listed(b200, "mig-parted/pull/166") == parsed("lgip_b200_excerpt.txt")
    assert listed(b200, "mig-parted/pull/187") == parsed("lgip_b200_second_excerpt.txt")
    assert surely(b200) == {
        "1g.23gb": 20986,
        "1g.23gb+me": 20986,
        "1g.45gb": 45306,
        "2g.45gb": 45306,
    }
    # UNCONFIRMED: no cited listing shows these, so no figure is given for them
    assert b200.unlisted == ("3g.90gb", "4g.90gb", "7g.180gb")
    assert "3g.90gb" in b200.unconfirmed and b200.name_seen == ""
    assert b200.pci_device_ids == ("0x290110DE",)


def test_gb200() -> None:
    """mig-parted#227 (a production GB200, 1g.23gb 22.00 GiB); gpu-operator#1303 (an earlier
    board whose 1g profile was 1g.24gb: not a GB200 profile now, its 1g.47gb/2g.47gb agree)."""
    gb200 = uc.GB200
    assert listed(gb200, "issues/227") == parsed("lgip_gb200_excerpt.txt")
    early = parsed("lgip_gb200_early_excerpt.txt")
    assert {r[0] for r in early} - {p.name for p in gb200.profiles} == {"1g.24gb", "1g.24gb+me"}
    assert listed(gb200, "pull/1303") == parsed("lgip_gb200_early_excerpt.txt", only=gb200)
    assert surely(gb200) == {
        "1g.23gb": 22522,
        "1g.23gb+me": 22522,
        "1g.47gb": 46586,
        "2g.47gb": 46586,
    }
    assert gb200.unlisted == ("3g.93gb", "4g.93gb", "7g.186gb")  # UNCONFIRMED: no listing
    assert gb200.name_seen == ""


def test_rtx_pro_6000_blackwell_server_edition() -> None:
    """bigstack-oss/cubecos#312 (GPU 1 and GPU 2 of one node: 1g 23.12, 2g 46.50 GiB) and the GKE
    device plugin's listing (container-engine-accelerators#564: 1g 23.62 GiB); 4 compute slices."""
    rtx = uc.RTX_PRO_6000_SERVER
    both = parsed("lgip_rtx_pro_6000_gpu1_excerpt.txt", "lgip_rtx_pro_6000_gpu2_excerpt.txt")
    assert listed(rtx, "cubecos/issues/312") == both
    assert listed(rtx, "pull/564") == parsed("lgip_rtx_pro_6000_gcp_excerpt.txt")
    mib = surely(rtx)
    assert {mib[n] for n in mib if n.startswith("1g.")} == {23669}  # 23.12, not 23.62
    assert {mib[n] for n in mib if n.startswith("2g.")} == {47610}
    assert rtx.unlisted == ("4g.96gb", "4g.96gb+gfx")  # UNCONFIRMED: no listing shows them
    assert rtx.name_seen == "" and "cuts the NVML name" in rtx.unconfirmed


@pytest.mark.parametrize("gpu", [uc.RTX_PRO_6000_WORKSTATION, uc.RTX_PRO_6000_MAX_Q])
def test_rtx_pro_6000_blackwell_workstation_editions(gpu: uc.UnconfirmedGpu) -> None:
    """The MIG user guide gives one table for the three editions; no listing of these two is
    cited (UNCONFIRMED), nor their PCI device IDs."""
    assert gpu.profiles == uc.RTX_PRO_6000_SERVER.profiles and gpu.listed == ()
    assert gpu.unlisted == tuple(p.name for p in gpu.profiles)
    assert gpu.pci_device_ids == () and gpu.name_seen == ""


@pytest.mark.parametrize(
    ("gpu", "profiles"),
    [
        (uc.H20, {"1g.12gb", "2g.24gb", "3g.48gb", "7g.96gb"}),
        (uc.H200_NVL, {"1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"}),
        (uc.H800, {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}),
        (
            uc.A800_SXM4_80GB,
            {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
        ),
        (
            uc.A800_80GB_PCIE,
            {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
        ),
        (uc.A800_40GB, {"1g.5gb", "1g.5gb+me", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}),
    ],
    ids=["H20", "H200 NVL", "H800", "A800-SXM4-80GB", "A800 80GB PCIe", "A800-40GB"],
)
def test_gpus_no_listing_shows(gpu: uc.UnconfirmedGpu, profiles: set[str]) -> None:
    """UNCONFIRMED: no `nvidia-smi mig -lgip` of these GPUs is cited, so no memory figure at
    all; the profile names are those mig-parted applies to their device IDs
    (NVIDIA/mig-parted@v0.15.0:deployments/systemd/config-default.yaml)."""
    assert {p.name for p in gpu.profiles} == profiles
    assert gpu.listed == () and gpu.unlisted == tuple(p.name for p in gpu.profiles)
    assert "no cited `nvidia-smi mig -lgip` listing" in gpu.unconfirmed
    assert uc.MIG_PARTED_CONFIG in gpu.profiles_source


def test_names_and_where_they_were_seen() -> None:
    # nvidia-smi in Project-HAMi/HAMi#1903 prints "NVIDIA A800 80GB PCIe" (81920MiB)
    assert uc.A800_80GB_PCIE.nvml_name == "NVIDIA A800 80GB PCIe"
    assert "HAMi/issues/1903" in uc.A800_80GB_PCIE.name_seen
    unseen = {g.key for g in uc.UNCONFIRMED_GPUS.values() if not g.name_seen}
    assert unseen == set(uc.UNCONFIRMED_GPUS) - {"A800 80GB PCIe", "H100 NVL"}
    assert uc.A800_40GB.nvml_name == ""  # no source names it; it matches nothing
    assert "" not in uc.unconfirmed_names()
    # the H20's name is a prefix of the H200's: a model string cannot tell them apart
    assert "substring" in uc.H20.unconfirmed


def test_an_operator_config_entry_for_h20_is_checked_against_the_gpus_it_matches() -> None:
    """HAMi's chart writes the model string `H20`; it is a substring of the H200's device type
    (and the GH200's): the entry would serve every H200, so it is held to the H200's profiles."""
    text = (
        'migGeometries:\n  catalog:\n  - models: ["H20"]\n    allowedGeometries:\n'
        "    - group: g1\n      geometries: [{name: 1g.12gb, memory: 11008, count: 7}]\n"
    )
    with pytest.raises(ConfigError, match=r"NVIDIA H200 has no MIG profile 1g\.12gb"):
        load_config(text)


def test_the_h800_left_the_catalog() -> None:
    """The H800 row was the H100's figures under another name; no H800 listing is cited."""
    assert "H800" not in gpu_catalog.GPU_MODELS and "H800" in uc.UNCONFIRMED_GPUS
    assert set(uc.H800.pci_device_ids).isdisjoint(
        m.pci_device_id for m in gpu_catalog.GPU_MODELS.values()
    )

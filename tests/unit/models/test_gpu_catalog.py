"""The MIG profile table (models.gpu_catalog) against real `nvidia-smi mig -lgip`/`-lgipp` listings
(cited at each test), NVIDIA's MIG user guide
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html) and
mig-parted's named configs (NVIDIA/mig-parted@v0.15.0:deployments/systemd/config-default.yaml)."""

from __future__ import annotations

import pytest

from vgpu_operator.models.gpu_catalog import (
    CI_PROFILE_BY_SLICES,
    GPU_MODELS,
    MIG_MODELS,
    gi_heap_id,
    model_for_name,
)


def ids(model: str) -> dict[str, int]:
    return {p.name: p.id for p in MIG_MODELS[model].profiles}


def test_required_models_are_present() -> None:
    assert set(MIG_MODELS) == {
        "A30",
        "A100-SXM4-40GB",
        "A100-PCIE-40GB",
        "A100-SXM4-80GB",
        "A100 80GB PCIe",
        "H100 80GB HBM3",
        "H100 PCIe",
        "H200",
    }
    assert not GPU_MODELS["RTX 4090"].mig_capable


@pytest.mark.parametrize(
    ("name", "key"),
    [  # NVML names as nvidia-smi prints them (sources in models.gpu_catalog)
        ("NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
    ],
)
def test_pcie_skus_are_known(name: str, key: str) -> None:
    model = model_for_name(name)
    assert model is not None and model.key == key and model.mig_capable


def test_skus_share_the_geometry_mig_parted_gives_them() -> None:
    same = [("A100-PCIE-40GB", "A100-SXM4-40GB"), ("A100 80GB PCIe", "A100-SXM4-80GB")]
    same += [("H100 PCIe", "H100 80GB HBM3")]
    for sku, base in same:
        assert MIG_MODELS[sku].profiles == MIG_MODELS[base].profiles


def test_values_from_real_listings() -> None:
    from tests.kit.smi_samples import transcript
    from vgpu_operator.agent.parse import parse_lgip

    for name, key in (
        ("lgip_h200_gpu2_excerpt.txt", "H200"),  # NVIDIA/mig-parted#120
        ("lgip_a100_pcie_40gb_r510.txt", "A100-PCIE-40GB"),  # yokatayama/e-learning
    ):
        model = MIG_MODELS[key]
        for row in parse_lgip(transcript(name)):
            p = model.profile(row.id)
            assert p is not None and p.name == row.name, (key, row)
            assert (p.max_count, p.sm, p.dec, p.enc) == (row.total, row.sm, row.dec, row.enc)
            if key != "A100-PCIE-40GB":  # driver 510 printed other GiB (fakesmi_render)
                assert p.memory_gib == row.memory_gib, (key, row)


def test_a100_80gb_corrections() -> None:
    a100 = MIG_MODELS["A100-SXM4-80GB"]
    # GA100's decoders per 2g/3g/4g instance in a real listing: 1/2/2 (models.gpu_catalog)
    assert [a100.profile(n).dec for n in ("2g.20gb", "3g.40gb", "4g.40gb")] == [1, 2, 2]  # type: ignore[union-attr]
    assert a100.profile("1g.20gb").since_driver == 525  # type: ignore[union-attr]


def test_architecture_by_name() -> None:
    from vgpu_operator.models.gpu_catalog import arch_for_name

    assert arch_for_name("NVIDIA A800-SXM4-80GB") == "ampere"  # not in the catalog
    assert arch_for_name("NVIDIA A30") == "ampere"
    assert arch_for_name("NVIDIA B200") == "hopper"  # Hopper and later: no reset needed
    assert arch_for_name("NVIDIA H100 NVL") == "hopper"  # models.gpu_catalog_unconfirmed


@pytest.mark.parametrize(
    ("model", "expected"),
    # `mig -lgip` IDs: A100-40GB in the MIG user guide and tests/data/nvidia-smi/transcripts/
    # lgip_a100_pcie_40gb_r510.txt; A100-80GB's 19/20/14/9 in NVIDIA/mig-parted#97 (15/5/0 as on
    # the other 7-slice GPUs); H100 80GB HBM3 in https://jbarrow.ai/field_notes/nvidia-mig/; H200
    # in NVIDIA/mig-parted#120 (transcripts/lgip_h200_gpu2_excerpt.txt); A30 in
    # Summer-Lo/Docker_configuration@fd975fcf097f:000-MIG/README.md (2g.12gb+me: no listing)
    [
        ("A100-SXM4-40GB", {"1g.5gb": 19, "1g.5gb+me": 20, "1g.10gb": 15, "2g.10gb": 14,
                            "3g.20gb": 9, "4g.20gb": 5, "7g.40gb": 0}),
        ("A100-SXM4-80GB", {"1g.10gb": 19, "1g.10gb+me": 20, "1g.20gb": 15, "2g.20gb": 14,
                            "3g.40gb": 9, "4g.40gb": 5, "7g.80gb": 0}),
        ("H100 80GB HBM3", {"1g.10gb": 19, "1g.10gb+me": 20, "1g.20gb": 15, "2g.20gb": 14,
                            "3g.40gb": 9, "4g.40gb": 5, "7g.80gb": 0}),
        ("H200", {"1g.18gb": 19, "1g.18gb+me": 20, "1g.35gb": 15, "2g.35gb": 14,
                  "3g.71gb": 9, "4g.71gb": 5, "7g.141gb": 0}),
        ("A30", {"1g.6gb": 14, "1g.6gb+me": 21, "2g.12gb": 5, "2g.12gb+me": 6, "4g.24gb": 0}),
    ],
)  # fmt: skip
def test_profile_ids_per_model(model: str, expected: dict[str, int]) -> None:
    assert ids(model) == expected


def test_unconfirmed_entries_are_marked() -> None:
    h200 = MIG_MODELS["H200"]
    for name in ("1g.35gb", "3g.71gb", "4g.71gb"):  # confirmed by NVIDIA/mig-parted#120
        p = h200.profile(name)
        assert p is not None and "UNCONFIRMED" not in p.unconfirmed
    h100_pcie = MIG_MODELS["H100 PCIe"]
    assert "UNCONFIRMED" in h100_pcie.unconfirmed  # SM counts are the SXM part's
    a30 = MIG_MODELS["A30"].profile("2g.12gb+me")
    assert a30 is not None and "UNCONFIRMED" in a30.unconfirmed  # no listing shows its ID


def test_reference_memory_and_sm_values() -> None:
    h100 = MIG_MODELS["H100 80GB HBM3"]
    got = {p.name: (p.memory_gib, p.sm) for p in h100.profiles if "+" not in p.name}
    assert got == {  # an H100's `mig -lgip`, https://jbarrow.ai/field_notes/nvidia-mig/
        "1g.10gb": (9.75, 16),
        "1g.20gb": (19.62, 26),
        "2g.20gb": (19.62, 32),
        "3g.40gb": (39.50, 60),
        "4g.40gb": (39.50, 64),
        "7g.80gb": (79.25, 132),
    }
    assert h100.memory_mib == 81559 and MIG_MODELS["A100-SXM4-40GB"].memory_mib == 40537
    # knownMigGeometries MiB for A100-80GB in the plugin's manifest
    # (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:volcano-vgpu-device-plugin.yml)
    a100 = MIG_MODELS["A100-SXM4-80GB"]
    mib = {n: a100.profile(n).memory_mib for n in ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")}  # type: ignore[union-attr]
    assert mib == {"1g.10gb": 9728, "2g.20gb": 19968, "3g.40gb": 40192, "7g.80gb": 80896}


@pytest.mark.parametrize("key", sorted(MIG_MODELS))
def test_geometry_is_consistent(key: str) -> None:
    m = MIG_MODELS[key]
    assert len({p.id for p in m.profiles}) == len(m.profiles)
    for p in m.profiles:
        assert p.name.startswith(f"{p.slices}g.")
        assert all(s >= 0 and s + p.size <= m.memory_slices for s in p.placements)
        assert p.max_count <= len(p.placements)
        hopper_1g = m.arch == "hopper" and p.id == 15
        assert p.ci_profile_id == (7 if hopper_1g else CI_PROFILE_BY_SLICES[p.slices])
    full = max(m.profiles, key=lambda p: p.slices)
    assert (full.slices, full.size) == (m.compute_slices, m.memory_slices)


def test_placements_match_lgipp() -> None:
    a100 = MIG_MODELS["A100-SXM4-40GB"]
    got = {p.id: (p.placements, p.size) for p in a100.profiles}
    assert got[15] == ((0, 2, 4, 6), 2) and got[9] == ((0, 4), 4) and got[0] == ((0,), 8)
    a30 = MIG_MODELS["A30"]
    assert {p.id: (p.placements, p.size) for p in a30.profiles if p.id != 6} == {
        14: ((0, 1, 2, 3), 1),
        21: ((0, 1, 2, 3), 1),
        5: ((0, 2), 2),
        0: ((0,), 4),
    }


@pytest.mark.parametrize("name", ["NVIDIA H100 NVL", "NVIDIA GH200 144G HBM3e"])
def test_gpus_whose_listings_stop_after_2g_are_not_catalog_rows(name: str) -> None:
    """UNCONFIRMED: the public copies of their `mig -lgip` listings (NVIDIA/gpu-operator#900,
    NVIDIA/mig-parted#139) stop after the 2g profile, and NVIDIA's MIG user guide tables give
    fractions of memory, not GiB: their rows are models.gpu_catalog_unconfirmed's
    (tests/unit/models/test_gpu_catalog_unconfirmed.py)."""
    from vgpu_operator.models import gpu_catalog_unconfirmed as uc

    assert model_for_name(name) is None
    assert name in uc.unconfirmed_names()


def test_model_lookup_is_exact() -> None:
    h200 = model_for_name("NVIDIA H200")
    assert h200 is not None and h200.key == "H200"
    assert model_for_name("NVIDIA H200 NVL") is None  # another geometry, not a substring match
    assert model_for_name("A30") is MIG_MODELS["A30"]
    assert MIG_MODELS["A30"].profile("MIG 1g.6gb") is MIG_MODELS["A30"].profile(14)


def test_mode_change_needs_reset_only_before_hopper() -> None:
    assert MIG_MODELS["A100-SXM4-80GB"].mode_change_needs_reset
    assert not MIG_MODELS["H100 80GB HBM3"].mode_change_needs_reset


def test_gpu_instance_ids_follow_the_observed_tree() -> None:
    # seven 1g on A100 got 13,11,12,7,8,9,10 in the MIG user guide's listings (the fake places
    # them at 6,4,5,0,1,2,3)
    assert [gi_heap_id(8, 1, s) for s in (6, 4, 5, 0, 1, 2, 3)] == [13, 11, 12, 7, 8, 9, 10]
    assert gi_heap_id(8, 8, 0) == 0 and gi_heap_id(8, 4, 4) == 2 and gi_heap_id(4, 2, 2) == 2

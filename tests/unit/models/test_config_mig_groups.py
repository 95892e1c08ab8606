"""A migGeometries group must fit one GPU as a whole: memory slices and placements, not only
compute slices (models.mig_placement, the operator's own placement check). The device plugin
creates the whole group on one GPU (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:
pkg/plugin/server.go `GenerateMigTemplate`) and nvidia-mig-parted fails on one that cannot exist
(NVIDIA/mig-parted@v0.15.0:pkg/mig/config/config.go)."""

from __future__ import annotations

import pytest

from vgpu_operator.core.mig.place import feasible, geometry_of_model
from vgpu_operator.models import gpu_catalog
from vgpu_operator.models.config import ConfigError, load_config
from vgpu_operator.models.mig_placement import misfit


def catalog(geometries: str, models: str = '["H100 80GB HBM3"]') -> str:
    return (
        "migGeometries:\n  catalog:\n"
        f"  - models: {models}\n"
        f"    allowedGeometries:\n    - group: mixed\n      geometries: {geometries}\n"
    )


H100_9_MEMORY_SLICES = (
    "[{name: 3g.40gb, memory: 40186, count: 2}, {name: 1g.10gb, memory: 9845, count: 1}]"
)


def test_seven_compute_slices_on_nine_memory_slices_are_refused() -> None:
    assert not feasible(
        geometry_of_model(gpu_catalog.H100_80GB), {"3g.40gb": 2, "1g.10gb": 1}
    )  # the planner agrees
    with pytest.raises(ConfigError) as err:
        load_config(catalog(H100_9_MEMORY_SLICES))
    assert str(err.value).splitlines()[1] == (
        "  - migGeometries.catalog[0].allowedGeometries[0].geometries: the group cannot exist: "
        "3g.40gb x2 + 1g.10gb needs 9 of the 8 memory slices of NVIDIA H100 80GB HBM3 (memory "
        "slices each: 3g.40gb 4, 1g.10gb 1); the device plugin's nvidia-mig-parted apply fails, "
        "which stops the plugin. Fix: use fewer or smaller instances (a group is one whole-GPU "
        "layout; see nvidia-smi mig -lgip/-lgipp on a NVIDIA H100 80GB HBM3)"
    )


def test_the_same_shape_on_an_a100_40gb_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs 9 of the 8 memory slices of NVIDIA A100"):
        load_config(
            catalog(
                "[{name: 3g.20gb, memory: 19962, count: 2}, "
                "{name: 1g.5gb, memory: 4858, count: 1}]",
                '["A100-SXM4-40GB"]',
            )
        )


def test_a_group_that_fits_is_accepted() -> None:
    ok = load_config(
        catalog(
            "[{name: 3g.40gb, memory: 40186, count: 1}, {name: 2g.20gb, memory: 19962, count: 1},"
            " {name: 1g.10gb, memory: 9845, count: 2}]"
        )
    )
    assert ok.mig_geometries.catalog[0].allowed_geometries[0].geometries[0].name == "3g.40gb"
    load_config(catalog("[{name: 1g.20gb, memory: 19962, count: 4}]"))  # double-memory 1g


def test_a_profile_the_gpu_does_not_have_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"NVIDIA H100 80GB HBM3 has no MIG profile 1g\.5gb"):
        load_config(catalog("[{name: 1g.5gb, memory: 4858, count: 7}]"))


def test_more_instances_of_a_profile_than_the_gpu_allows_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"allows no 1g\.20gb x5 \(at most 4\)"):
        load_config(catalog("[{name: 1g.20gb, memory: 19962, count: 5}]"))


def test_misfit_names_the_slices_that_run_out() -> None:
    assert misfit(gpu_catalog.A100_80GB, {"4g.40gb": 1, "3g.40gb": 1}) is None  # 4g@0, 3g@4
    why = misfit(gpu_catalog.A30, {"2g.12gb": 1, "1g.6gb": 3})
    assert why == "2g.12gb + 1g.6gb x3 needs 5 of the 4 compute slices of NVIDIA A30"


def test_an_entry_for_a_model_no_catalog_knows_keeps_the_compute_slice_check() -> None:
    load_config(catalog(H100_9_MEMORY_SLICES, '["B200"]'))

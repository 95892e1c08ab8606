"""The operator config's MIG geometry catalog (migGeometries.catalog) is validated on load: a
group name the scheduler cannot encode, or a group beyond the GPU's compute slices, is refused
with the field's path."""

from __future__ import annotations

import pytest

from vgpu_operator.models.config import ConfigError, load_config


def catalog(group: str, geometries: str, models: str = '["A100-SXM4-80GB"]') -> str:
    return (
        "migGeometries:\n  catalog:\n"
        f"  - models: {models}\n"
        f"    allowedGeometries:\n    - group: {group}\n      geometries: {geometries}\n"
    )


@pytest.mark.parametrize("group", ["all-1g", '"g,2"', '"g:1"', '"g;1"', '"g[1]"', '"a b"'])
def test_a_group_name_the_scheduler_cannot_encode_is_refused(group: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(catalog(group, "[{name: 1g.10gb, memory: 9728, count: 7}]"))
    assert "migGeometries.catalog[0].allowedGeometries[0].group" in str(err.value)


def test_a_group_beyond_the_gpus_compute_slices_is_refused() -> None:
    # 7g + 1g (8 slices) on an A100, 2g x 3 on an A30 (4 slices)
    with pytest.raises(ConfigError) as err:
        load_config(
            catalog(
                "g1",
                "[{name: 7g.80gb, memory: 80896, count: 1}, "
                "{name: 1g.10gb, memory: 9728, count: 1}]",
            )
        )
    assert "allowedGeometries[0].geometries: the group needs 8 compute slices" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(catalog("g1", "[{name: 2g.12gb, memory: 12288, count: 3}]", '["A30"]'))
    assert "needs 6 compute slices" in str(err.value) and "NVIDIA A30 has 4" in str(err.value)
    ok = load_config(
        catalog(
            "group_2.b",
            "[{name: 2g.20gb, memory: 19968, count: 3}, {name: 1g.10gb, memory: 9728, count: 1}]",
        )
    )
    assert ok.mig_geometries.catalog[0].allowed_geometries[0].group == "group_2.b"

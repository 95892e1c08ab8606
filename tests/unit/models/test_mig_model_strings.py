"""knownMigGeometries model strings are matched twice, differently: the scheduler tests a string as
a substring of the registered type `NVIDIA-<NVML name>` (`extractGeometryFromType`,
volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/utils.go, unchanged from v1.12.0
to v1.16.0-alpha.1), the plugin as a substring of the NVML name alone (`containsModel` over
`GetIndexAndTypeFromUUID`, Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/plugin/server.go
and pkg/util/util.go; pkg/plugin/vgpu/plugin.go and pkg/plugin/vgpu/util/util.go in v1.10.0 and
v1.11.0). A string that matches in one and not the other is refused in the operator config."""

from __future__ import annotations

import pytest

from tests.kit.volcano_fixtures import text
from vgpu_operator.core.volcano.geometry import BUILTIN_GEOMETRIES
from vgpu_operator.models import gpu_catalog, gpu_catalog_unconfirmed
from vgpu_operator.models.config import ConfigError, load_config
from vgpu_operator.models.volcano import device_type, parse_device_config, prefix_only_match

NAMES = sorted(
    {g.nvml_name for g in gpu_catalog.GPU_MODELS.values()}
    | gpu_catalog_unconfirmed.unconfirmed_names()
)


def scheduler_matches(model: str, nvml_name: str) -> bool:
    return model in device_type(nvml_name)  # strings.Contains(t, migDevType)


def plugin_matches(model: str, nvml_name: str) -> bool:
    return model in nvml_name  # strings.Contains(target, model), target = NVML GetName()


def test_no_nvml_name_has_the_registered_prefix() -> None:
    """The premise of refusing any string with `NVIDIA-`: the catalogs' NVML names (captured
    listings) read `NVIDIA <model>` with a space."""
    assert NAMES and not [n for n in NAMES if "NVIDIA-" in n]


@pytest.mark.parametrize(
    "model",
    [
        "NVIDIA-A100-SXM4-40GB",  # GPU Feature Discovery's nvidia.com/gpu.product label
        "NVIDIA-NVIDIA H100 80GB HBM3",  # the register record's type
        "NVIDIA-H100",
    ],
)
def test_a_string_with_the_registered_prefix_matches_in_the_scheduler_only(model: str) -> None:
    why = prefix_only_match(model, NAMES)
    assert why is not None and "contains 'NVIDIA-'" in why
    assert not any(plugin_matches(model, n) for n in NAMES)


def test_a_string_spanning_the_prefix_of_an_older_drivers_name() -> None:
    """Older drivers name the GPU without `NVIDIA ` (`A100-SXM4-40GB`): the scheduler's type is
    then `NVIDIA-A100-SXM4-40GB`, which `-A100` and `A-A100` match and the name does not."""
    for model in ("-A100", "A-A100"):
        assert scheduler_matches(model, "A100-SXM4-40GB")
        assert not plugin_matches(model, "A100-SXM4-40GB")
        why = prefix_only_match(model, ["NVIDIA A100-SXM4-40GB"])
        assert why == (
            "it matches 'NVIDIA-A100-SXM4-40GB', the type the scheduler compares, only through "
            "its 'NVIDIA-', and not 'A100-SXM4-40GB', the NVML name the plugin compares"
        )


def shipped_model_strings() -> list[str]:
    """The plugin manifest's and the operator's built-in model strings."""
    manifest = parse_device_config(text("manifest_device_config.yaml")).nvidia
    assert manifest is not None
    entries = [*manifest.geometries(), *BUILTIN_GEOMETRIES]
    return sorted({m for e in entries for m in e.models})


def test_shipped_model_strings_match_alike_in_scheduler_and_plugin() -> None:
    """Every string the plugin manifest (v1.12.0) and the operator's built-ins carry passes, and
    for each of the catalog's names (and its older form) it matches in both or in neither."""
    strings = shipped_model_strings()
    assert "A100-SXM4-40GB" in strings and "A30" in strings
    for model in strings:
        assert prefix_only_match(model, NAMES) is None, model
        for name in NAMES:
            for form in (name, name.removeprefix("NVIDIA ")):
                assert scheduler_matches(model, form) == plugin_matches(model, form)


def catalog(models: str) -> str:
    return (
        "migGeometries:\n  catalog:\n"
        f"  - models: {models}\n"
        "    allowedGeometries:\n    - group: full\n"
        "      geometries: [{name: 7g.40gb, memory: 40192, count: 1}]\n"
    )


def test_the_operator_config_refuses_a_string_the_plugin_cannot_match() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(catalog('["A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"]'))
    assert str(err.value).splitlines()[1] == (
        "  - migGeometries.catalog[0].models[1]: 'NVIDIA-A100-SXM4-40GB' matches in the "
        "scheduler and not in the device plugin: it contains 'NVIDIA-', which is in the type the "
        "scheduler compares (NVIDIA-<NVML name>) and never in the NVML name the plugin compares; "
        "the scheduler then picks a MIG instance the plugin finds no group for, and the container "
        "starts without it. Fix: write a part of the NVML name as nvidia-smi --query-gpu=name "
        "prints it, without 'NVIDIA-' (e.g. A100-SXM4-40GB or H100 80GB HBM3)"
    )
    load_config(catalog('["A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"]'))  # a space: both match


def test_an_unknown_models_group_is_checked_by_compute_slices_and_says_so() -> None:
    """No catalog row: which memory slices a profile takes is not known here
    (models.config_mig), so only the seven compute slices of every MIG GPU bound the group."""
    eight = (
        'migGeometries:\n  catalog:\n  - models: ["B200"]\n    allowedGeometries:\n'
        "    - group: big\n      geometries: [{name: 4g.90gb, memory: 92160, count: 2}]\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(eight)
    assert (
        "the group needs 8 compute slices (the <G> of <G>g.<GB>gb times the count), but its "
        "models match no GPU of the catalog (so only compute slices can be checked here), and "
        "no MIG GPU has more than 7"
    ) in str(err.value)

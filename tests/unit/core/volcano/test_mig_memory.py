"""MIG memory in knownMigGeometries never above the instance (core.volcano.mig_memory): the
plugin manifest's A100-40GB and A30 figures, corrected in enforce mode, reported otherwise."""

from __future__ import annotations

import math

import pytest
import yaml

from tests.kit.volcano_fixtures import configmap, edit, findings, healthy, text
from vgpu_operator.core.volcano.geometry import (
    BUILTIN_GEOMETRIES,
    ReportedGpuModel,
    ReportedProfile,
)
from vgpu_operator.core.volcano.mig_memory import (
    hardware_memory,
    instance_memory_mib,
    lgip_mib,
    may_correct,
    memory_corrections,
    provably_above,
)
from vgpu_operator.core.volcano.render import render_device_config
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.volcano import NvidiaConfig

KEY = "device-config.yaml"


@pytest.mark.parametrize(
    ("gib", "mib"),
    [
        (4.75, 4858),  # A100-40GB 1g.5gb (MIG user guide -lgip); round() would say 4864
        (5.81, 5944),  # A30 1g.6gb
        (23.44, 23997),  # A30 4g.24gb (23.50 in other listings)
        (39.25, 40186),  # A100-40GB 7g.40gb on R525+ (39.50 on R510)
        (0.13, 128),  # (0.125 x 1024) is whole: no float rounding may take one off
    ],
)
def test_lgip_figures_are_taken_at_their_lower_bound(gib: float, mib: int) -> None:
    assert lgip_mib(gib) == mib == math.floor(round((gib - 0.005) * 1024, 6))


def test_the_lowest_figure_wins_and_exact_figures_count_as_they_are() -> None:
    assert instance_memory_mib([39.50, 39.25]) == 40186
    assert instance_memory_mib([4.75], [4860]) == 4858
    assert instance_memory_mib([4.75], [4800]) == 4800
    assert instance_memory_mib([]) is None


def test_the_hardware_table_of_the_catalog() -> None:
    hw = hardware_memory()
    assert hw["NVIDIA A100-SXM4-40GB"]["1g.5gb"] == 4858
    assert hw["NVIDIA A100-SXM4-40GB"]["7g.40gb"] == 40186
    assert hw["NVIDIA A30"]["1g.6gb"] == 5944
    assert hw["NVIDIA A30"]["4g.24gb"] == 23997
    # H100 80GB HBM3: a listing on driver 525 shows 39.25 GiB for 3g.40gb (the catalog: 39.50)
    assert hw["NVIDIA H100 80GB HBM3"]["3g.40gb"] == 40186


def test_an_inventory_lowers_but_a_report_that_fails_the_sanity_check_does_not() -> None:
    low = ReportedGpuModel("NVIDIA A30", (ReportedProfile("1g.6gb", 5888, 4),), 24576)
    assert hardware_memory([low])["NVIDIA A30"]["1g.6gb"] == lgip_mib(5.75)
    exact = ReportedGpuModel("NVIDIA A30", (ReportedProfile("1g.6gb", 5900, 4, exact=True),))
    assert hardware_memory([exact])["NVIDIA A30"]["1g.6gb"] == 5900
    forged = ReportedGpuModel("NVIDIA A30", (ReportedProfile("1g.6gb", 10, 4),), 24576)
    assert hardware_memory([forged])["NVIDIA A30"]["1g.6gb"] == 5944


def manifest_geometries() -> NvidiaConfig:
    return NvidiaConfig.model_validate(
        yaml.safe_load(text("manifest_device_config.yaml"))["nvidia"]
    )


def test_the_plugin_manifest_promises_more_than_the_instances_have() -> None:
    fixes = {
        (c.model, c.profile): (c.memory, c.hardware)
        for c in memory_corrections(manifest_geometries().geometries(), hardware_memory())
    }
    assert fixes[("NVIDIA A100-SXM4-40GB", "1g.5gb")] == (5120, 4858)
    assert fixes[("NVIDIA A100-SXM4-40GB", "7g.40gb")] == (40960, 40186)
    assert fixes[("NVIDIA A30", "1g.6gb")] == (6144, 5944)
    assert fixes[("NVIDIA A30", "4g.24gb")] == (24576, 23997)


def test_enforce_writes_the_corrected_figures_in_place() -> None:
    cm = configmap(
        "kube-system", "volcano-vgpu-device-config", {KEY: text("manifest_device_config.yaml")}
    )
    # a node has an A100-40GB: its figures are lowered now, and every other model's with them
    out = render_device_config(cm, OperatorConfig(), "t", mig_models=["NVIDIA A100-SXM4-40GB"])
    assert out.changed
    assert any("1g.5gb (group1) 5120 MiB > 4858 MiB" in n for n in out.notes)
    assert any("NVIDIA A30 1g.6gb (group1) 6144 MiB > 5944 MiB" in n for n in out.notes)
    nvidia = NvidiaConfig.model_validate(yaml.safe_load(out.data[KEY])["nvidia"])
    assert [
        c for c in memory_corrections(nvidia.geometries(), hardware_memory()) if provably_above(c)
    ] == []


def test_models_no_node_has_cost_no_write_of_their_own() -> None:
    """Lowering the figures of GPUs the cluster does not have would restart the scheduler and
    the plugin for nothing: they ride along with the next write."""
    cm = configmap(
        "kube-system", "volcano-vgpu-device-config", {KEY: text("manifest_device_config.yaml")}
    )
    out = render_device_config(cm, OperatorConfig(), "t")
    assert not out.changed and out.notes == ()
    # the next write for another reason (a split count) takes them along
    cfg = OperatorConfig.model_validate({"deviceDefaults": {"deviceSplitCount": 4}})
    out = render_device_config(cm, cfg, "t")
    assert out.changed
    nvidia = NvidiaConfig.model_validate(yaml.safe_load(out.data[KEY])["nvidia"])
    assert [
        c for c in memory_corrections(nvidia.geometries(), hardware_memory()) if provably_above(c)
    ] == []


def test_an_appended_entry_is_written_at_the_hardware_figure() -> None:
    out = render_device_config(None, OperatorConfig(), "t", mig_models=["NVIDIA H100 80GB HBM3"])
    [entry] = yaml.safe_load(out.data[KEY])["nvidia"]["knownMigGeometries"]
    memory = {t["name"]: t["memory"] for g in entry["allowedGeometries"] for t in g["geometries"]}
    assert memory == {"1g.10gb": 9845, "2g.20gb": 19962, "3g.40gb": 40186, "7g.80gb": 81146}


def test_report_mode_names_model_profile_and_both_figures() -> None:
    def put_manifest(c: dict[str, object]) -> None:
        c["data"] = {KEY: text("manifest_device_config.yaml")}

    snap = edit(healthy(), "configmaps", "volcano-vgpu-device-config", put_manifest)
    got = findings(snap, "mig-memory-above-hardware")
    first = next(f for f in got if "1g.5gb of NVIDIA A100-SXM4-40GB" in f.message)
    assert first.severity == "error" and first.fixable_by_operator
    # no node has an A30: said (info: no pod can get one), lowered with the next write
    a30 = next(f for f in got if "of NVIDIA A30" in f.message)
    assert a30.severity == "info"
    assert first.message == (
        "knownMigGeometries gives 1g.5gb of NVIDIA A100-SXM4-40GB (group1) 5120 MiB, but the "
        "instance has 4858 MiB (the lowest nvidia-smi mig -lgip or inventory figure): a pod "
        "asking 4859-5120 MiB gets it and runs out of memory"
    )
    assert findings(healthy(), "mig-memory-above-hardware") == []


def test_an_unknown_name_cannot_lower_another_models_entry() -> None:
    # an inventory naming its GPU "NVIDIA H100 80GB HBM3 x" (no catalog knows it; the H100
    # entry's "H100 80GB HBM3" serves it by substring) with sane but lower figures lowers
    # nothing; the H100's own name still does, and a model's own entry takes its own figures
    h100 = next(e for e in BUILTIN_GEOMETRIES if "H100 80GB HBM3" in e.models)
    low = (ReportedProfile("1g.10gb", 8300, 7),)
    forged = ReportedGpuModel("NVIDIA H100 80GB HBM3 x", low, 81559)
    assert not may_correct(h100, forged.nvml_name)
    assert memory_corrections([h100], hardware_memory([forged])) == memory_corrections(
        [h100], hardware_memory()
    )
    real = ReportedGpuModel("NVIDIA H100 80GB HBM3", low, 81559)
    assert any(c.hardware < 9000 for c in memory_corrections([h100], hardware_memory([real])))
    own = h100.model_copy(update={"models": ["NVIDIA X100"]})
    x100 = ReportedGpuModel("NVIDIA X100", low, 81559)
    assert may_correct(own, "NVIDIA X100")
    assert any(c.model == "NVIDIA X100" for c in memory_corrections([own], hardware_memory([x100])))

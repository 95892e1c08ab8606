"""An inventory can add nothing to another model's geometry (core.volcano.geometry `shadowed`):
the components match knownMigGeometries model strings as substrings, first entry first, so an
agent naming its GPU `H1` (the review's geo02) would take every `NVIDIA H100 80GB HBM3`, and `B`
(geo01) every "...GB" name, for good (the list is append-only). Such a name is refused, the
catalog's entry covers the real model, and `mig-geometry-reports` names the node and the field."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.kit import hostile
from tests.kit.volcano_fixtures import MIG_NODE, findings, gpu_node, healthy, replace
from vgpu_operator import contract
from vgpu_operator.core.mig.partition import profile_info
from vgpu_operator.core.volcano.geometry import (
    BUILTIN_GEOMETRIES,
    build_known_geometries,
    catalog_report,
    known_names,
    report_problem,
    shadowed,
)
from vgpu_operator.core.volcano.writes import plan_writes
from vgpu_operator.models import gpu_catalog
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.volcano import first_match, parse_device_config

H100 = "NVIDIA H100 80GB HBM3"
CATALOG = list(BUILTIN_GEOMETRIES)


def report_named(name: str) -> Any:
    """A report that passes every sanity check (the H100's own profiles), under `name`."""
    report = catalog_report(gpu_catalog.H100_80GB)
    named = type(report)(name, report.profiles, report.memory_mib)
    assert report_problem(named) is None
    return named


def builtin_h100() -> Any:
    return next(e for e in BUILTIN_GEOMETRIES if "H100 80GB HBM3" in e.models)


def test_the_review_names_are_the_ones_tested() -> None:
    assert hostile.SHADOWING_GPU_NAMES == ["B", "H1"]


def test_geo02_a_gpu_named_h1_does_not_shadow_the_h100() -> None:
    plan = build_known_geometries([], ["H1", H100], CATALOG, [report_named("H1")])
    assert H100 in plan.shadowing["H1"]  # and the other H100s, by every name they go by
    assert plan.uncovered == ["H1"]
    assert [e.models for e in plan.appended] == [builtin_h100().models]
    assert first_match(plan.entries, H100) == builtin_h100()


def test_geo01_a_gpu_named_b_shadows_every_gb_name_and_is_refused() -> None:
    plan = build_known_geometries([], ["B", "NVIDIA A100-SXM4-80GB"], CATALOG, [report_named("B")])
    assert "B" in plan.uncovered and "B" in plan.shadowing
    hits = plan.shadowing["B"]
    assert "NVIDIA A100-SXM4-80GB" in hits and H100 in hits
    assert not any(m == "B" for e in plan.entries for m in e.models)


def test_the_review_orders_are_all_refused() -> None:
    # whether the shadowing report comes before or after the real model, alone or with others
    for required in (["H1", H100], [H100, "H1"], ["H1"]):
        plan = build_known_geometries([], required, CATALOG, [report_named("H1")])
        assert not any("H1" in e.models for e in plan.entries)


@pytest.mark.parametrize(
    ("name", "shadows"),
    [
        ("NVIDIA H100", [H100, "NVIDIA H100 NVL", "NVIDIA H100 PCIe"]),
        ("NVIDIA ", None),  # part of every name
        ("", None),
        ("A100", None),
        ("NVIDIA-", None),  # the device type's own prefix
    ],
)
def test_names_inside_other_names_are_refused(name: str, shadows: list[str] | None) -> None:
    hits = shadowed(name, known_names(CATALOG))
    assert hits
    if shadows is not None:
        assert set(shadows) <= set(hits)


def test_a_new_model_that_shadows_nothing_is_still_taken_from_its_report() -> None:
    plan = build_known_geometries(
        [],
        ["NVIDIA X100", "NVIDIA X1"],
        CATALOG,
        [report_named("NVIDIA X100"), report_named("NVIDIA X1")],
    )
    # X1 is part of X100's name: refused; X100 covered from its report
    assert plan.shadowing == {"NVIDIA X1": ["NVIDIA X100"]}
    assert [e.models for e in plan.appended] == [["NVIDIA X100"]]


def mig_node(name: str, gpu_name: str) -> dict[str, Any]:
    node = gpu_node(name, "H100-80GB-HBM3", 1, released=MIG_NODE)
    node["metadata"]["annotations"][contract.ANN_INVENTORY] = hostile.forged_inventory(gpu_name)
    return node


def test_one_nodes_inventory_cannot_change_the_h100_geometry_cluster_wide() -> None:
    base = healthy()
    snap = replace(base, nodes=[*base.nodes, mig_node("forged", "H1"), mig_node("real", H100)])
    assert {"H1", H100} <= set(snap.mig_gpu_names)
    plan = plan_writes(snap, datetime(2026, 3, 1, tzinfo=UTC))
    [write] = [w for w in plan.configmaps if w.name == "volcano-vgpu-device-config"]
    nvidia = parse_device_config(write.body["data"]["device-config.yaml"]).nvidia
    assert nvidia is not None
    entries = nvidia.geometries()
    assert not any("H1" in e.models for e in entries)
    h100 = first_match(entries, H100)
    assert h100 is not None and "H100 80GB HBM3" in h100.models
    # the rule names the node, the annotation and the field, and what it would have shadowed
    [finding] = [f for f in findings(snap, "mig-geometry-reports") if f.objects[0].name == "forged"]
    assert finding.severity == "warning"
    assert f"{contract.ANN_INVENTORY}, gpus[].name" in finding.message
    assert "'H1'" in finding.message and H100 in finding.message
    assert not [f for f in findings(snap, "mig-geometry-reports") if f.objects[0].name == "real"]


def test_a_model_no_catalog_knows_is_said_when_its_report_is_used() -> None:
    base = healthy()
    snap = replace(base, nodes=[*base.nodes, mig_node("new", "NVIDIA X100")])
    [finding] = findings(snap, "mig-geometry-reports")
    assert finding.severity == "info" and finding.objects[0].name == "new"
    assert "no catalog knows" in finding.message and "'NVIDIA X100'" in finding.message


def test_a_name_another_models_entry_serves_is_said_and_lowers_nothing() -> None:
    # sane figures under a name the A100-40GB entry serves by substring, 1g.5gb lower than the
    # instance really has: before, the A100-40GB entry was lowered to them for the whole cluster
    node = mig_node("odd", "NVIDIA A100-SXM4-40GB x")
    model = gpu_catalog.GPU_MODELS["A100-SXM4-40GB"]
    profiles = [
        profile_info(p).model_copy(update={"memory_mib": 4400} if p.name == "1g.5gb" else {})
        for p in model.profiles
    ]
    inv = Inventory.from_annotation(node["metadata"]["annotations"][contract.ANN_INVENTORY])
    assert inv is not None
    gpu = inv.gpus[0].model_copy(update={"profiles": profiles, "memory_mib": model.memory_mib})
    node["metadata"]["annotations"][contract.ANN_INVENTORY] = Inventory(gpus=[gpu]).to_annotation()
    base = healthy()
    snap = replace(base, nodes=[*base.nodes, node])
    got = [f for f in findings(snap, "mig-geometry-reports") if f.objects[0].name == "odd"]
    assert [f.severity for f in got] == ["info"]
    assert "A100-SXM4-40GB" in got[0].message and "no inventory of another name" in got[0].message
    assert not [f for f in findings(snap, "mig-memory-above-hardware") if " x " in f.message]

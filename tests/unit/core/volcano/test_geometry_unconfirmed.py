"""A GPU models.gpu_catalog_unconfirmed holds (no cited listing confirms its instances' memory)
gets dynamic MIG only from its agent's own listing and never a layout from the table: no built-in
knownMigGeometries entry (another GPU's figures), no catalog-made entry, no static layout (the
agent's planner refuses it as the controller does), no fallback profiles in the agent's
inventory."""

from __future__ import annotations

from tests.kit.migkit import dynamic, node, static
from tests.kit.smi_samples import transcript
from vgpu_operator import contract
from vgpu_operator.agent.parse import parse_lgip
from vgpu_operator.core.mig.layout import UNCONFIRMED
from vgpu_operator.core.mig.partition import StepKind, plan_node
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.validate import gpu_model
from vgpu_operator.core.volcano.geometry import (
    BUILTIN_GEOMETRIES,
    ReportedGpuModel,
    ReportedProfile,
    build_known_geometries,
    catalog_report,
    known_names,
    report_problem,
    shadowed,
)
from vgpu_operator.core.volcano.mig_memory import hardware_memory
from vgpu_operator.models import gpu_catalog
from vgpu_operator.models import gpu_catalog_unconfirmed as uc
from vgpu_operator.models.inventory import GpuInfo
from vgpu_operator.models.volcano import MigGeometryEntry, first_match

CATALOG = list(BUILTIN_GEOMETRIES)
B200 = uc.B200.nvml_name


def agent_report(name: str, listing: str) -> ReportedGpuModel:
    """What an agent reports from the driver's `-lgip` (`round(GiB x 1024)` MiB per profile)."""
    rows = parse_lgip(transcript(listing))
    profiles = tuple(ReportedProfile(r.name, round(r.memory_gib * 1024), r.total) for r in rows)
    report = ReportedGpuModel(name, profiles)
    assert report_problem(report) is None
    return report


def test_no_entry_is_made_from_the_table_or_a_built_in() -> None:
    # the built-in "NVIDIA H200" entry matches the H200 NVL's device type: it is the H200's
    # figures, not taken for the H200 NVL
    h200 = next(e for e in BUILTIN_GEOMETRIES if "NVIDIA H200" in e.models)
    assert h200.matches("NVIDIA-NVIDIA H200 NVL")
    names = sorted(uc.unconfirmed_names())
    plan = build_known_geometries([], names, CATALOG)
    assert plan.appended == [] and plan.uncovered == names


def test_the_agents_listing_serves_dynamic_mig() -> None:
    """The B200's listing (NVIDIA/mig-parted#187) as its agent reports it: the entry is made
    from it (one group per memory size, the profile with more compute slices of equal ones), and
    the ceiling core.volcano.mig_memory holds its templates to is that listing's."""
    report = agent_report(B200, "lgip_b200_second_excerpt.txt")
    plan = build_known_geometries([], [B200], CATALOG, [report])
    (entry,) = plan.appended
    assert entry.models == [B200] and first_match(plan.entries, B200) == entry
    memory = {t.name: t.memory for g in entry.allowed_geometries for t in g.geometries}
    assert memory == {"1g.23gb": 20992, "2g.45gb": 45312}  # round(GiB x 1024), as reported
    assert hardware_memory([report])[B200]["1g.23gb"] == 20986  # floor((20.50 - 0.005) x 1024)


def test_an_operator_config_entry_still_serves_it() -> None:
    mine = MigGeometryEntry.model_validate(
        {
            "models": [B200],
            "allowedGeometries": [
                {"group": "g1", "geometries": [{"name": "1g.23gb", "memory": 20986, "count": 7}]}
            ],
        }
    )
    plan = build_known_geometries([], [B200], [mine, *CATALOG])
    assert [e.models for e in plan.appended] == [[B200]]


def test_an_h20_report_would_take_the_h200s_geometry_and_is_refused() -> None:
    """Any model string for the H20 is a substring of `NVIDIA-NVIDIA H200`: the components would
    give every H200 the H20's entry (first match)."""
    h100 = catalog_report(gpu_catalog.H100_80GB)  # a report that passes the sanity checks
    report = ReportedGpuModel(uc.H20.nvml_name, h100.profiles, h100.memory_mib)
    plan = build_known_geometries([], [uc.H20.nvml_name], CATALOG, [report])
    assert "NVIDIA H200" in plan.shadowing[uc.H20.nvml_name]
    assert plan.appended == []


def test_no_report_may_shadow_an_unconfirmed_name() -> None:
    # an agent naming its GPU "NVIDIA B20" would take every B200, on a cluster with none yet
    assert shadowed("NVIDIA B20", known_names(CATALOG)) == [B200]


def test_a_static_layout_is_refused_by_the_planner_as_by_the_controller() -> None:
    """MIG off, the driver lists no profiles yet: the agent's planner refuses the layout with the
    controller's words for the node (models.gpu_catalog_unconfirmed.static_refusal) and plans no
    step, not even MIG mode (one released before the controller refused it, or by hand); GFD's
    product label finds no catalog model either, which is the controller's refusal."""
    gpu = GpuInfo(
        index=0,
        uuid="GPU-0",
        name=B200,
        bus_id="00000000:01:00.0",
        memory_mib=0,  # not read here
        mig_capable=True,
        mig_current=False,
        mig_pending=False,
    )
    plan = plan_node(node(gpu), static({"profiles": {"3g.90gb": 2, "1g.23gb": 1}}), None)
    (error,) = plan.errors
    assert plan.gpus == () and plan.steps == ()
    assert (error.path, error.kind) == ("spec.mig.partitioning", UNCONFIRMED)
    assert uc.static_refusal("NVIDIA-B200") in error.message
    assert "partitioning: dynamic" in error.fix
    facts = NodeFacts(name="n", labels={contract.GFD_PRODUCT: "NVIDIA-B200"})
    assert gpu_model(facts) is None
    # dynamic MIG is not refused: MIG on, the instances are the device plugin's
    served = plan_node(node(gpu), dynamic(), None)
    assert [s.kind for s in served.steps] == [StepKind.SET_MODE] and not served.errors


def test_the_h200_nvl_takes_the_first_entry_that_matches_it() -> None:
    """`NVIDIA H200` is a substring of `NVIDIA-NVIDIA H200 NVL` and the components take the first
    match: with an H200 in the cluster, the H200's entry serves the H200 NVL too (the operator
    cannot order it otherwise); an H200 NVL entry made from its agent's report first keeps it."""
    nvl, h200 = uc.H200_NVL.nvml_name, gpu_catalog.H200.nvml_name
    both = build_known_geometries([], [h200, nvl], CATALOG)
    assert both.uncovered == [] and [e.models for e in both.appended] == [[h200]]
    h200_like = catalog_report(gpu_catalog.H200)  # a report that passes the sanity checks
    report = ReportedGpuModel(nvl, h200_like.profiles, h200_like.memory_mib)
    own = build_known_geometries([], [nvl], CATALOG, [report])
    later = build_known_geometries(own.entries, [h200, nvl], CATALOG, [report])
    nvl_entry, h200_entry = first_match(later.entries, nvl), first_match(later.entries, h200)
    assert nvl_entry is not None and nvl_entry.models == [nvl]
    assert h200_entry is not None and h200_entry.models == [h200]

"""knownMigGeometries: built-in model strings match real NVML names, the list only grows, and
every GPU model on a MIG node ends up covered."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.kit.volcano_fixtures import text
from vgpu_operator.core.volcano.geometry import (
    BUILTIN_GEOMETRIES,
    ReportedGpuModel,
    ReportedProfile,
    build_known_geometries,
    catalog_for,
    report_problem,
    reported_from_inventory,
    uncovered_models,
)
from vgpu_operator.models import gpu_catalog, gpu_catalog_unconfirmed
from vgpu_operator.models.config import load_config
from vgpu_operator.models.inventory import GpuInfo, Inventory, ProfileInfo
from vgpu_operator.models.volcano import (
    MigGeometryEntry,
    device_type,
    first_match,
    parse_device_config,
)

# NVML names as nvidia-smi prints them in public listings (e.g. "NVIDIA H100 80GB HBM3" in
# NVIDIA/cloud-native-docs@52dcb7b8d956:gpu-operator/manifests/output/mig-mixed-nvidia-smi.txt).
REAL = {
    "NVIDIA A30": "A30",
    "NVIDIA A100-SXM4-40GB": "A100-SXM4-40GB",
    "NVIDIA A100-PCIE-40GB": "A100-SXM4-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA A100 80GB PCIe": "A100-SXM4-80GB",
    "NVIDIA H100 80GB HBM3": "H100 80GB HBM3",
    "NVIDIA H100 PCIe": "H100 80GB HBM3",
    "NVIDIA H200": "NVIDIA H200",
    "NVIDIA H200 NVL": "NVIDIA H200",
}
# Real GPUs with other MIG geometries (or none): no built-in entry may claim them.
OTHERS = [
    "NVIDIA H100 NVL",
    "NVIDIA GH200 480GB",
    "NVIDIA GeForce RTX 4090",
    "NVIDIA A800-SXM4-80GB",
    "NVIDIA H20",
    "NVIDIA B200",
]


def manifest() -> list[MigGeometryEntry]:
    cfg = parse_device_config(text("manifest_device_config.yaml"))
    assert cfg.nvidia is not None
    return cfg.nvidia.geometries()


@pytest.mark.parametrize(("nvml", "first_model"), sorted(REAL.items()))
def test_builtins_cover_each_real_nvml_name_with_the_right_entry(
    nvml: str, first_model: str
) -> None:
    entry = first_match(list(BUILTIN_GEOMETRIES), nvml)
    assert entry is not None and entry.models[0] == first_model


@pytest.mark.parametrize("nvml", OTHERS)
def test_builtins_do_not_claim_other_gpus(nvml: str) -> None:
    assert first_match(list(BUILTIN_GEOMETRIES), nvml) is None


def test_every_builtin_model_string_is_a_substring_of_a_real_nvml_name() -> None:
    for entry in BUILTIN_GEOMETRIES:
        for model in entry.models:
            assert any(model in name for name in REAL), model


def test_builtin_values_are_the_current_plugin_manifest_ones_where_it_has_them() -> None:
    shipped = {e.models[0]: e for e in manifest()}
    for entry in BUILTIN_GEOMETRIES[:3]:
        ours = entry.allowed_geometries
        theirs = shipped[entry.models[0]].allowed_geometries
        assert [g.model_dump() for g in ours] == [g.model_dump() for g in theirs]
    h100 = BUILTIN_GEOMETRIES[3]
    assert [(t.name, t.memory, t.count) for g in h100.allowed_geometries for t in g.geometries] == [
        ("1g.10gb", 9984, 7),
        ("2g.20gb", 20091, 3),
        ("1g.10gb", 9984, 1),
        ("3g.40gb", 40448, 2),
        ("7g.80gb", 81152, 1),
    ]


def test_an_uncovered_model_is_appended_and_nothing_else_moves() -> None:
    existing = manifest()
    plan = build_known_geometries(
        existing, ["NVIDIA H100 80GB HBM3", "NVIDIA A30"], list(BUILTIN_GEOMETRIES)
    )
    assert plan.entries[: len(existing)] == existing
    assert [e.models for e in plan.appended] == [["H100 80GB HBM3", "H100 PCIe"]]
    assert plan.appended_models == ["NVIDIA H100 80GB HBM3"]
    assert plan.uncovered == []
    assert not build_known_geometries(
        plan.entries, ["NVIDIA H100 PCIe"], list(BUILTIN_GEOMETRIES)
    ).changed


def test_an_existing_entry_is_never_changed_even_when_the_catalog_differs() -> None:
    # A user's A100-80GB entry with other groups: it stays exactly as it is.
    mine = MigGeometryEntry.model_validate(
        {
            "models": ["A100-SXM4-80GB"],
            "allowedGeometries": [
                {"group": "mine", "geometries": [{"name": "3g.40gb", "memory": 40192, "count": 2}]}
            ],
        }
    )
    plan = build_known_geometries([mine], ["NVIDIA A100-SXM4-80GB"], list(BUILTIN_GEOMETRIES))
    assert plan.entries == [mine] and not plan.changed


B200_PROFILES = (
    ReportedProfile("1g.23gb", 23552, 7),
    ReportedProfile("1g.23gb+me", 23552, 1),
    ReportedProfile("1c.3g.90gb", 92160, 2),  # not a GPU-instance profile: not used
    ReportedProfile("7g.180gb", 184320, 1),
)


def test_an_inventory_never_changes_what_the_catalog_says() -> None:
    # were the first inventory for a catalog model to set its memory values, one forged
    # annotation could put 1g.10gb = 999,999 MiB into the cluster-wide list
    forged = ReportedGpuModel(
        "NVIDIA H100 80GB HBM3",
        (ReportedProfile("1g.10gb", 999_999, 7), ReportedProfile("2g.20gb", 20096, 3)),
    )
    nvl = ReportedGpuModel("NVIDIA H100 NVL", (ReportedProfile("1g.12gb", 1, 7),))
    plan = build_known_geometries(
        [], ["NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL"], list(BUILTIN_GEOMETRIES), [forged, nvl]
    )
    (h100,) = plan.appended
    assert h100 == next(e for e in BUILTIN_GEOMETRIES if "H100 80GB HBM3" in e.models)
    # the H100 NVL has no catalog row (models.gpu_catalog_unconfirmed): its insane report adds
    # nothing
    assert plan.uncovered == ["NVIDIA H100 NVL"]
    # a catalog model no entry matches (no built-ins given): its values, whatever the report says
    forged_h200 = ReportedGpuModel("NVIDIA H200", (ReportedProfile("1g.18gb", 999_999, 7),))
    (from_table,) = build_known_geometries([], ["NVIDIA H200"], [], [forged_h200]).appended
    memory = {p.name: p.memory_mib for p in gpu_catalog.H200.profiles}
    assert all(
        t.memory == memory[t.name] for g in from_table.allowed_geometries for t in g.geometries
    )


def test_a_sane_report_covers_a_model_no_catalog_knows() -> None:
    reported = [ReportedGpuModel("NVIDIA B200", B200_PROFILES, memory_mib=184320)]
    plan = build_known_geometries([], ["NVIDIA B200"], list(BUILTIN_GEOMETRIES), reported)
    [b200] = plan.appended
    assert b200.models == ["NVIDIA B200"]
    assert [
        (g.group, [(t.name, t.memory, t.count) for t in g.geometries])
        for g in b200.allowed_geometries
    ] == [("group1", [("1g.23gb", 23552, 7)]), ("group2", [("7g.180gb", 184320, 1)])]
    off = build_known_geometries(
        [], ["NVIDIA B200"], list(BUILTIN_GEOMETRIES), reported, from_inventory=False
    )
    assert off.uncovered == ["NVIDIA B200"]


@pytest.mark.parametrize(
    ("profiles", "memory", "problem"),
    [
        ((ReportedProfile("1g.23gb", 999_999, 7),), 0, "not about 23 GiB"),
        ((ReportedProfile("1g.23gb", 23552, 7),), 20000, "more memory"),
        ((ReportedProfile("2g.45gb", 46080, 7),), 0, "does not fit one GPU"),
        ((ReportedProfile("1c.2g.45gb", 46080, 7),), 0, "no GPU-instance profile"),
        ((), 0, "no GPU-instance profile"),
    ],
)
def test_an_insane_report_adds_nothing(
    profiles: tuple[ReportedProfile, ...], memory: int, problem: str
) -> None:
    reported = ReportedGpuModel("NVIDIA B200", profiles, memory_mib=memory)
    assert problem in (report_problem(reported) or "")
    plan = build_known_geometries([], ["NVIDIA B200"], [], [reported])
    assert plan.uncovered == ["NVIDIA B200"] and not plan.changed


def test_the_operator_catalog_comes_before_the_builtins() -> None:
    cfg = load_config(
        "migGeometries: {catalog: [{models: [H100 80GB HBM3], allowedGeometries: [{group: only7g,"
        " geometries: [{name: 7g.80gb, memory: 81152, count: 1}]}]}]}"
    )
    plan = build_known_geometries([], ["NVIDIA H100 80GB HBM3"], catalog_for(cfg))
    assert [g.group for g in plan.appended[0].allowed_geometries] == ["only7g"]
    no_builtins = load_config("migGeometries: {builtins: false}")
    assert build_known_geometries(
        [], ["NVIDIA A30"], catalog_for(no_builtins), builtins=False
    ).uncovered == ["NVIDIA A30"]


def test_reported_models_come_from_the_agent_inventory() -> None:
    inv = Inventory(
        gpus=[
            GpuInfo(
                index=i,
                uuid=f"GPU-{i}",
                name="NVIDIA H100 NVL",
                bus_id=f"0:{i}",
                memory_mib=95830,
                mig_capable=True,
                profiles=[
                    ProfileInfo(id=19, name="1g.12gb", slices=1, memory_mib=11264, count=7, size=1)
                ],
                profiles_source="driver",
            )
            for i in range(2)
        ]
        + [
            GpuInfo(
                index=2,
                uuid="GPU-2",
                name="NVIDIA GeForce RTX 4090",
                bus_id="0:2",
                memory_mib=24564,
                mig_capable=False,
            )
        ]
    )
    nvl = ReportedGpuModel("NVIDIA H100 NVL", (ReportedProfile("1g.12gb", 11264, 7),), 95830)
    assert reported_from_inventory(inv) == [nvl]
    # GPUs of one model that disagree, or profiles from the agent's table: not trusted
    odd = inv.gpus[1].model_copy(update={"profiles": []})
    [mixed] = reported_from_inventory(inv.model_copy(update={"gpus": [inv.gpus[0], odd]}))
    assert mixed.problem == "its GPUs list different profiles on the same node"
    table = inv.gpus[0].model_copy(update={"profiles_source": "catalog"})
    [guessed] = reported_from_inventory(Inventory(gpus=[table]))
    assert guessed.problem is not None and "not the driver" in guessed.problem


NAMES = st.sampled_from(sorted(REAL) + OTHERS)


@given(
    prefix=st.lists(st.sampled_from(range(len(BUILTIN_GEOMETRIES))), unique=True, max_size=5),
    required=st.lists(NAMES, max_size=8),
)
def test_building_only_appends_and_covers_all_it_can(
    prefix: list[int], required: list[str]
) -> None:
    existing = [BUILTIN_GEOMETRIES[i] for i in prefix]
    before = [e.model_dump() for e in existing]
    plan = build_known_geometries(existing, required, list(BUILTIN_GEOMETRIES))
    # existing entries: same order, same groups, untouched
    assert [e.model_dump() for e in plan.entries[: len(existing)]] == before
    assert [e.model_dump() for e in existing] == before
    # every real, MIG-capable model is covered afterwards; the others are reported uncovered, and
    # so is a GPU of models.gpu_catalog_unconfirmed no earlier entry matches (a built-in matching
    # it is another GPU's figures: the H200's for the H200 NVL)
    assert uncovered_models(plan.entries, required) == sorted(set(plan.uncovered))
    known = {n for n in required if (m := gpu_catalog.model_for_name(n)) and m.mig_capable}
    unconfirmed = gpu_catalog_unconfirmed.unconfirmed_names()
    unmatched = {n for n in required if n in unconfirmed and first_match(plan.entries, n) is None}
    assert set(plan.uncovered) == {n for n in required if n not in REAL and n not in known} | (
        unmatched
    )
    confirmed = [device_type(n) for n in required if n not in unconfirmed]
    assert all(any(e.matches(t) for t in confirmed) for e in plan.appended)
    # building again from the result changes nothing (stable)
    again = build_known_geometries(plan.entries, required, list(BUILTIN_GEOMETRIES))
    assert not again.changed


def test_synthesized_geometries_keep_one_profile_per_memory_size() -> None:
    # one group per profile would put 2g.20gb behind 1g.20gb and 4g.40gb behind 3g.40gb, where
    # the scheduler's first fit never chooses them
    reported = ReportedGpuModel(
        "NVIDIA H100 X",
        (
            ReportedProfile("1g.10gb", 9984, 7),
            ReportedProfile("1g.20gb", 20091, 4),
            ReportedProfile("2g.20gb", 20091, 3),
            ReportedProfile("3g.40gb", 40448, 2),
            ReportedProfile("4g.40gb", 40448, 1),
            ReportedProfile("7g.80gb", 81152, 1),
            ReportedProfile("1g.10gb+me", 9984, 1),
        ),
    )
    plan = build_known_geometries([], ["NVIDIA H100 X"], [], [reported])
    [entry] = plan.appended
    groups = [[(t.name, t.memory, t.count) for t in g.geometries] for g in entry.allowed_geometries]
    assert groups == [
        [("1g.10gb", 9984, 7)],
        [("2g.20gb", 20091, 3)],
        [("4g.40gb", 40448, 1)],
        [("7g.80gb", 81152, 1)],
    ]
    memories = [g.geometries[0].memory for g in entry.allowed_geometries]
    assert len(set(memories)) == len(memories)  # first fit can reach every group

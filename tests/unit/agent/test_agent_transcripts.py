"""Parsing, planning and verification on real nvidia-smi transcripts (tests/data/nvidia-smi/
transcripts/, each file's source in smi_samples.SOURCES), and the agent against the fake
nvidia-smi in the states those transcripts show."""

from __future__ import annotations

from collections.abc import Callable

from tests.kit.migkit import gpu, node, static
from tests.kit.smi_samples import FakeNode, transcript
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.agent.apply import Reason, reconcile_gpus
from vgpu_operator.agent.parse import SmiErrorKind, classify, parse_lcip, parse_lgip
from vgpu_operator.agent.parse_actions import parse_created, parse_list, parse_reset
from vgpu_operator.core.mig.partition import StepKind, plan_node
from vgpu_operator.core.mig.verify import verify
from vgpu_operator.models.inventory import ComputeInstance, GpuInstance

Make = Callable[..., FakeNode]
H100 = "H100 80GB HBM3"
FOUR_1G20 = {"1g.20gb": 4}
MUTATING = {"-mig", "-r", "-cgi", "-cci", "-dci", "-dgi"}


def mutating(fake: FakeNode, since: int = 0) -> list[list[str]]:
    return [e["argv"] for e in fake.log()[since:] if MUTATING & set(e["argv"])]  # type: ignore[arg-type]


def h100_as_in_the_transcript() -> GpuInstance:
    """GPU instance 5 of transcripts/h100_cgi15_C.txt with the compute instance `-C` made."""
    (gi,), (ci,) = parse_created(transcript("h100_cgi15_C.txt"))
    assert (gi.profile_id, ci.profile_id, ci.profile) == (15, 7, "1g.20gb")
    made = ComputeInstance(
        id=ci.ci or 0, profile_id=ci.profile_id, name=ci.profile, start=0, size=1
    )
    return GpuInstance(id=gi.gi, profile_id=15, name=gi.profile, start=4, size=2, cis=[made])


def four_like_the_transcript() -> list[GpuInstance]:
    one = h100_as_in_the_transcript()
    return [one.model_copy(update={"id": 3 + s // 2, "start": s}) for s in (0, 2, 4, 6)]


# --- parsing ------------------------------------------------------------------------------------


def test_parse_the_h100_cgi_15_transcript() -> None:
    # transcripts/h100_cgi15_C.txt
    text = transcript("h100_cgi15_C.txt")
    (gi,), (ci,) = parse_created(text)
    assert (gi.gpu, gi.gi, gi.profile, gi.profile_id) == (3, 5, "1g.20gb", 15)
    assert (ci.gpu, ci.gi, ci.ci, ci.profile, ci.profile_id) == (3, 5, 0, "1g.20gb", 7)
    listed = "\n".join(line for line in text.splitlines() if line.startswith(("GPU", "  MIG")))
    (g3,) = parse_list(listed)
    assert (g3.index, g3.name, len(g3.migs)) == (3, "NVIDIA H100 80GB HBM3", 4)


def test_parse_the_a100_cci_transcript() -> None:
    # transcripts/a100_cgi19_cci.txt: 1g.5gb compute instances are profile 0 on Ampere
    gis, cis = parse_created(transcript("a100_cgi19_cci.txt"))
    assert [g.gi for g in gis] == [9, 7, 8, 11, 12, 13, 14]
    assert {(c.profile, c.profile_id, c.ci) for c in cis} == {("1g.5gb", 0, 0)}


def test_parse_lcip_transcript() -> None:
    # transcripts/lcip_a100_pcie_40gb_r510.txt: the default profile of each GI is marked `*`
    rows = parse_lcip(transcript("lcip_a100_pcie_40gb_r510.txt"))
    got = [(r.gi, r.name, r.id, r.default, r.free, r.total) for r in rows]
    assert got == [
        (9, "1g.5gb", 0, True, 0, 1),
        (3, "1c.2g.10gb", 0, False, 0, 2),
        (3, "2g.10gb", 1, True, 0, 1),
    ]


def test_parse_lgip_excerpts_of_newer_gpus() -> None:
    # transcripts/lgip_{h200_gpu2,h100_nvl,gh200_144g}_excerpt.txt
    h200 = {
        (r.gpu, r.name): (r.id, r.memory_gib)
        for r in parse_lgip(transcript("lgip_h200_gpu2_excerpt.txt"))
    }
    assert h200[(2, "3g.71gb")] == (9, 69.50) and h200[(2, "7g.141gb")] == (0, 139.75)
    assert h200[(3, "1g.35gb")] == (15, 32.25)  # the excerpt ends in this row: kept
    nvl = [
        (r.name, r.id, r.memory_gib) for r in parse_lgip(transcript("lgip_h100_nvl_excerpt.txt"))
    ]
    assert nvl[2] == ("1g.24gb", 15, 21.62)
    gh = [(r.name, r.id, r.sm) for r in parse_lgip(transcript("lgip_gh200_144g_excerpt.txt"))]
    assert gh == [
        ("1g.18gb", 19, 16),
        ("1g.18gb+me", 20, 16),
        ("1g.36gb", 15, 26),
        ("2g.36gb", 14, 32),
    ]


def test_older_in_use_wordings_of_a_refused_reset() -> None:
    # transcripts/reset_in_use_r450.txt (NVIDIA/gpu-operator#118), reset_unable_old.txt
    for name, bus in (
        ("reset_in_use_r450.txt", "00000000:C1:00.0"),
        ("reset_unable_old.txt", "00000000:18:00.0"),
    ):
        text = transcript(name)
        assert classify(text) == SmiErrorKind.IN_USE
        (result,) = parse_reset(text)
        assert (result.bus_id, result.ok) == (bus, False)


# --- verification and planning ------------------------------------------------------------------


def test_a_compute_instance_of_profile_7_spanning_its_gpu_instance_verifies() -> None:
    # transcripts/h100_cgi15_C.txt: four 1g.20gb, each with the CI `-C` made (profile 7)
    inv = node(gpu(H100).model_copy(update={"instances": four_like_the_transcript()}))
    assert verify(inv, static({"profiles": FOUR_1G20}), None) == []
    # a resync plans nothing: no instance is destroyed and made again (new MIG UUIDs)
    assert (
        plan_node(inv, static({"profiles": FOUR_1G20}), static({"profiles": FOUR_1G20})).steps == ()
    )


def test_a_partial_compute_instance_is_not_full() -> None:
    # `-cci 0,0,0 -gi 1` makes three `1c.3g.20gb` CIs in one GPU instance (the MIG user guide,
    # https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html)
    one = gpu("A100-SXM4-40GB", instances=[("3g.20gb", 0)])
    partial = ComputeInstance(id=0, profile_id=0, name="1c.3g.20gb", start=0, size=1)
    gi = one.instances[0].model_copy(update={"cis": [partial]})
    inv = node(one.model_copy(update={"instances": [gi]}))
    (d,) = verify(inv, static({"profiles": {"3g.20gb": 1}}), None)
    assert d.what == f"compute instances of GPU instance {gi.id}" and d.observed == "1c.3g.20gb"
    kinds = [s.kind for s in plan_node(inv, static({"profiles": {"3g.20gb": 1}}), None).steps]
    assert kinds == [StepKind.DESTROY_CI, StepKind.DESTROY_GI, StepKind.CREATE_GI]


# --- the agent against the fake in the transcript's state ---------------------------------------


async def test_h100_four_1g20gb_succeeds_and_a_resync_changes_nothing(fake_node: Make) -> None:
    fake = fake_node(H100, 1)
    desired = static({"profiles": FOUR_1G20})
    out = await reconcile_gpus(fake.driver, desired, None)
    assert (out.state, out.reason) == ("success", Reason.APPLIED), out.message
    cis = [ci["profile_id"] for gi in fake.load()["gpus"][0]["gis"] for ci in gi["cis"]]
    assert cis == [7, 7, 7, 7]  # as in transcripts/h100_cgi15_C.txt
    before = len(fake.log())
    again = await reconcile_gpus(fake.driver, desired, desired)
    assert (again.state, again.reason) == ("success", Reason.UNCHANGED), again.message
    assert mutating(fake, before) == []


async def test_a_kept_gpu_instance_gets_the_default_compute_instance_lcip_lists(
    fake_node: Make,
) -> None:
    # a GPU instance left without its compute instance (an interrupted `-cgi 15` without -C)
    fake = fake_node(H100, 1, mig=True)
    with fs.edit(fake.state) as s:
        s["gpus"][0]["gis"].append(fs.GiState(id=3, profile_id=15, start=0, size=2, cis=[]))
    out = await reconcile_gpus(fake.driver, static({"profiles": {"1g.20gb": 1}}), None)
    assert (out.state, out.reason) == ("success", Reason.APPLIED), out.message
    assert mutating(fake) == [["mig", "-i", "0", "-gi", "3", "-cci", "7"]]
    assert fake.calls("-lcip") == 1

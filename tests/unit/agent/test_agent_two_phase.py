"""Two-phase planning for drivers that list no MIG profiles while MIG is off: mig-parted
pkg/mig/discovery/discovery.go says "older drivers (e.g., 535) ... don't support querying MIG
profiles when MIG mode is disabled". The mode goes on first; the profiles are read again and the
instances planned from the driver's own listing."""

from __future__ import annotations

from collections.abc import Callable

from tests.kit.migkit import node, static
from tests.kit.smi_samples import FakeNode
from vgpu_operator.agent.apply import Reason, observe, reconcile_gpus
from vgpu_operator.core.mig.partition import StepKind, plan_node
from vgpu_operator.models.inventory import GpuInfo

Make = Callable[..., FakeNode]
MIXED = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def hidden(name: str, *, known: bool) -> GpuInfo:
    """A MIG-capable GPU with MIG off whose driver lists no profiles (catalog ones if known)."""
    from vgpu_operator.core.mig.partition import synthetic_gpu
    from vgpu_operator.models.gpu_catalog import MIG_MODELS

    g = synthetic_gpu(MIG_MODELS["A100 80GB PCIe"], 0)
    if known:
        return g  # observe() fills in the catalog's profiles, marked "catalog"
    return g.model_copy(
        update={"name": name, "model": None, "profiles": [], "profiles_source": "none"}
    )


def test_an_unconfirmed_mig_gpu_with_mig_off_gets_no_static_layout_not_even_its_mode() -> None:
    # an NVML name the catalog does not confirm (A800 80GB PCIe, models.gpu_catalog_unconfirmed),
    # on a driver that hides profiles: the layout is refused up front, as the controller refuses
    # the node; dynamic MIG still gets its mode (tests/unit/agent/test_agent_unconfirmed.py)
    inv = node(hidden("NVIDIA A800 80GB PCIe", known=False))
    plan = plan_node(inv, static({"profiles": MIXED}), None)
    (error,) = plan.errors
    assert plan.steps == () and "NVIDIA-A800-80GB-PCIe, whose catalog row is not confirmed" in (
        error.message
    )


def test_the_driver_listing_not_the_catalog_places_the_instances() -> None:
    # A known model too: with MIG off only the mode is planned; the catalog's profiles are not
    # used for placements (a driver-515 A100 80GB PCIe has no profile 15, the catalog has)
    inv = node(hidden("NVIDIA A100 80GB PCIe", known=True))
    (gp,) = plan_node(inv, static({"profiles": MIXED}), None).gpus
    assert [s.kind for s in gp.steps] == [StepKind.SET_MODE] and gp.deferred
    # an impossible layout is still refused up front from the catalog: nothing is touched
    bad = plan_node(inv, static({"profiles": {"3g.40gb": 2, "1g.20gb": 1}}), None)
    assert bad.errors and "memory slices" in str(bad.errors[0])


async def test_a100_80gb_pcie_on_driver_535_gets_mig_on_then_its_instances(
    fake_node: Make,
) -> None:
    fake = fake_node("A100 80GB PCIe", 2, driver_version="535.161.08")
    assert [g.profiles_source for g in (await observe(fake.driver)).gpus] == ["catalog"] * 2
    before = len(fake.log())
    out = await reconcile_gpus(fake.driver, static({"profiles": MIXED}), None)
    assert (out.state, out.reason) == ("success", Reason.APPLIED), out.message
    for g in fake.load()["gpus"]:
        assert g["mig_current"] and sorted(gi["profile_id"] for gi in g["gis"]) == [9, 14, 19, 19]
    calls = [(e["argv"], e["rc"]) for e in fake.log()[before:] if "hang" not in e]
    lgip = [rc for argv, rc in calls if "-lgip" in argv]  # type: ignore[operator]
    assert lgip == [6, 0]  # hidden while MIG is off, listed once it is on
    order = [i for i, (argv, _) in enumerate(calls) if {"-mig", "-lgip", "-cgi"} & set(argv)]  # type: ignore[arg-type]
    kinds = [next(f for f in ("-mig", "-lgip", "-cgi") if f in calls[i][0]) for i in order]  # type: ignore[operator]
    assert kinds == ["-lgip", "-mig", "-mig", "-lgip"] + ["-cgi"] * 8
    assert out.inventory is not None
    assert [g.profiles_source for g in out.inventory.gpus] == ["driver", "driver"]


async def test_on_driver_515_the_listing_refuses_a_profile_the_catalog_has(
    fake_node: Make,
) -> None:
    # driver 515 lists no 1g.20gb (profile 15) on an A100 80GB: MIG goes on, then the layout
    # fails against the driver's own listing, with the profiles it does have
    fake = fake_node("A100 80GB PCIe", 1, driver_version="515.65.01")
    out = await reconcile_gpus(fake.driver, static({"profiles": {"1g.20gb": 4}}), None)
    assert (out.state, out.reason) == ("failed", Reason.INVALID)
    assert "has no MIG profile 1g.20gb" in out.message and "1g.10gb" in out.message
    assert fake.load()["gpus"][0]["mig_current"] is True
    assert fake.count("created_gi") == 0

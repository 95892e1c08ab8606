"""A static MIG layout on a GPU the catalog does not confirm (a row of
models.gpu_catalog_unconfirmed), released to the node before the controller refused it or written
there by hand: the agent refuses it as the controller does (the same text,
models.gpu_catalog_unconfirmed.static_refusal), says why on the node (the state label `failed`, a
Warning Event `UnconfirmedMigModel`, the inventory still reported) and runs no nvidia-smi command
that changes anything, not even MIG mode. Dynamic MIG on the same GPU is served.

The GPUs are the fake nvidia-smi's doubles of the H100 NVL and the GH200 144G
(vgpu_devcluster.fakesmi_models): they print the rows of their cited `mig -lgip` listings, in
nvidia-smi's format, and nothing else."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.kit.memapi import MemoryNodeApi
from tests.kit.migkit import DYN, static
from tests.kit.smi_samples import FakeNode, transcript
from vgpu_operator import contract
from vgpu_operator.agent.loop import Agent, AgentOptions
from vgpu_operator.agent.parse import parse_lgip
from vgpu_operator.models import gpu_catalog_unconfirmed as uc

Make = Callable[..., FakeNode]
MUTATING = {"-mig", "-r", "-cgi", "-cci", "-dci", "-dgi"}
# (the fake's model, its cited listing in tests/data/nvidia-smi/transcripts, a layout that fits
# the profiles the listing shows)
DOUBLES = [
    ("H100 NVL", "lgip_h100_nvl_excerpt.txt", {"1g.12gb": 7}),  # NVIDIA/gpu-operator#900
    ("GH200 144G HBM3e", "lgip_gh200_144g_excerpt.txt", {"2g.36gb": 3}),  # NVIDIA/mig-parted#139
]


def columns(row: object) -> tuple[object, ...]:
    return tuple(getattr(row, f) for f in ("name", "id", "total", "memory_gib", "sm", "dec", "enc"))


@pytest.mark.parametrize(("model", "listing", "layout"), DOUBLES, ids=[d[0] for d in DOUBLES])
async def test_the_doubles_print_their_cited_listings_rows(
    fake_node: Make, model: str, listing: str, layout: dict[str, int]
) -> None:
    fake = fake_node(model, 1, mig=True)
    printed = {columns(r) for r in await fake.driver.list_profiles()}
    cited = {columns(r) for r in parse_lgip(transcript(listing))}
    assert printed and printed <= cited  # (the H100 NVL's 2g.24gb row is cut in the copy)
    assert {r[0] for r in printed} >= set(layout)


@pytest.mark.parametrize("mig", [False, True], ids=["mig-off", "mig-on"])
@pytest.mark.parametrize(("model", "listing", "layout"), DOUBLES, ids=[d[0] for d in DOUBLES])
async def test_a_released_static_layout_is_refused_and_nothing_changes(
    fake_node: Make, model: str, listing: str, layout: dict[str, int], mig: bool
) -> None:
    fake = fake_node(model, 2, mig=mig)
    api = MemoryNodeApi("n1", {contract.ANN_CONFIG: static({"profiles": layout}).to_annotation()})
    out = await Agent(api, fake.driver, AgentOptions()).act()
    assert out is not None and (out.state, out.reason) == ("failed", "unconfirmed mig model")
    row = uc.UNCONFIRMED_GPUS[model]
    assert f"GPUs 0-1 ({row.nvml_name}): this node" in out.message
    assert uc.static_refusal(uc.product_label(row.nvml_name)) in out.message
    assert "spec.mig.partitioning: dynamic" in out.message  # the fix
    assert [e for e in fake.log() if MUTATING & set(e["argv"])] == []  # type: ignore[arg-type]
    assert [g["mig_current"] for g in fake.load()["gpus"]] == [mig, mig]
    assert api.state == "failed"
    (event,) = api.events
    # the reason the controller gives for the node (core.nodes.node_hardware.UNCONFIRMED_MODEL)
    assert (event["type"], event["reason"]) == ("Warning", "UnconfirmedMigModel")
    assert row.unconfirmed in event["message"]
    assert api.annotation(contract.ANN_INVENTORY) is not None  # the hardware is still reported


@pytest.mark.parametrize(("model", "listing", "layout"), DOUBLES, ids=[d[0] for d in DOUBLES])
async def test_dynamic_mig_is_served(
    fake_node: Make, model: str, listing: str, layout: dict[str, int]
) -> None:
    fake = fake_node(model, 1, mig=False)
    api = MemoryNodeApi("n1", {contract.ANN_CONFIG: DYN})
    out = await Agent(api, fake.driver, AgentOptions()).act()
    assert out is not None and out.state == "success", out.message
    assert [g["mig_current"] for g in fake.load()["gpus"]] == [True]

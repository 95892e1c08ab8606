"""The catalog holds, per MIG profile, the lowest `nvidia-smi mig -lgip` figure of every cited
listing (`memory_gib` and `listed_gib`): core.volcano.mig_memory writes no more than that. Checked
against the real listings in tests/data/nvidia-smi (sources: tests/kit/smi_samples.py)."""

from __future__ import annotations

import re

import pytest

from tests.kit.smi_samples import sample, transcript
from vgpu_operator.models import gpu_catalog

ROW = re.compile(r"^\|\s+\d+\s+MIG (\S+)\s+\d+\s+\d+/\d+\s+([0-9.]+)\s", re.M)

LISTINGS = [
    (transcript, "lgip_a100_pcie_40gb_r510.txt", gpu_catalog.A100_PCIE_40GB),
    (sample, "lgip_legacy_a100_40gb_r510.txt", gpu_catalog.A100_40GB),
    (transcript, "lgip_h200_gpu2_excerpt.txt", gpu_catalog.H200),
]


@pytest.mark.parametrize(("read", "name", "model"), LISTINGS)
def test_no_listing_shows_less_than_the_catalogs_lowest_figure(
    read: object, name: str, model: gpu_catalog.GpuModel
) -> None:
    rows = ROW.findall(read(name))  # type: ignore[operator]
    assert rows, name
    for profile, gib in rows:
        p = model.profile(profile)
        assert p is not None, (name, profile)
        assert min((p.memory_gib, *p.listed_gib)) <= float(gib), (name, profile, gib)


def test_the_h100_figures_of_a_second_driver_are_kept() -> None:
    """https://cloud.google.com/compute/docs/gpus/create-gpu-vm-accelerator-optimized: an H100
    80GB HBM3 on driver 525.125.06 lists 9.62 / 19.50 / 39.25 GiB."""
    h100 = gpu_catalog.H100_80GB
    low = {p.name: min((p.memory_gib, *p.listed_gib)) for p in h100.profiles}
    assert low["1g.10gb"] == 9.62 and low["2g.20gb"] == 19.50 and low["3g.40gb"] == 39.25
    assert h100.profile("3g.40gb").memory_gib == 39.50  # type: ignore[union-attr]  # the fake's

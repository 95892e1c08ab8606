"""The fake nvidia-smi against real nvidia-smi output (tests/data/nvidia-smi/samples/, each
file's source in smi_samples.SAMPLE_SOURCES, most from NVIDIA's MIG user guide), character for
character.

Each test puts the fake into the state the sample was taken in (bus IDs, modes, instances), runs
the sample's command through the `nvidia-smi` wrapper as a subprocess, and compares the output
with the verbatim copy in samples/. The guide's `-lgi` listing (samples/lgi_legacy.txt) is seeded
directly: its GI IDs contradict the guide's ordering example ("Example 2: Creation of a 3-2-1-1
geometry") under any single placement policy (see fakesmi_mig), so the fake follows that example
and the guide's `-cgi` listings (samples/create_cgi_9_3g.txt) when it creates instances itself.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.kit.smi_samples import INLINE, FakeNode, make_node, sample
from vgpu_devcluster import fakesmi_state as fs


def smi(node: FakeNode, *args: str) -> tuple[str, int]:
    env = {**os.environ, fs.ENV_STATE: str(node.state)}
    proc = subprocess.run(
        [str(node.binary), *args], capture_output=True, text=True, env=env, timeout=60
    )
    return proc.stdout, proc.returncode


def set_gpu(node: FakeNode, **values: object) -> None:
    with fs.edit(node.state) as s:
        s["gpus"][0].update(values)  # type: ignore[typeddict-item]


def add_gi(node: FakeNode, gi: int, profile: int, start: int, size: int, cis: int = 1) -> None:
    with fs.edit(node.state) as s:
        s["gpus"][0]["gis"].append(
            fs.GiState(
                id=gi,
                profile_id=profile,
                start=start,
                size=size,
                cis=[
                    fs.CiState(id=c, profile_id=2, start=0, size=3, uuid=f"MIG-{c}")
                    for c in range(cis)
                ],
            )
        )


def test_enable_mig_on_hopper(tmp_path: Path) -> None:
    node = make_node(tmp_path, "H100 80GB HBM3", 1)
    set_gpu(node, bus_id="00000000:36:00.0")
    assert smi(node, "-i", "0", "-mig", "1") == (sample("mode_enable.txt"), 0)


def test_disable_mig_on_hopper(tmp_path: Path) -> None:
    node = make_node(tmp_path, "H100 80GB HBM3", 1, mig=True)
    set_gpu(node, bus_id="00000000:16:00.0")
    assert smi(node, "-i", "0", "-mig", "0") == (sample("mode_disable.txt"), 0)


def test_passthrough_pending_and_reset_not_supported(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-40GB", 1)
    set_gpu(node, bus_id="00000000:00:03.0", reset_supported=False)
    assert smi(node, "-i", "0", "-mig", "1") == (sample("mode_pending_passthrough.txt"), 0)
    out, rc = smi(node, "--gpu-reset")
    assert out == sample("reset_not_supported.txt")
    assert rc != 0


def test_pending_disable_in_use(tmp_path: Path) -> None:
    node = make_node(tmp_path, "H100 80GB HBM3", 1, mig=True)
    set_gpu(node, bus_id="00000000:C1:00.0")
    fs.add_process(node.state, 0, 1234)
    assert smi(node, "-i", "0", "-mig", "0") == (sample("mode_pending_in_use.txt"), 0)
    assert node.load()["gpus"][0]["mig_current"] is True


def test_reset_refused_while_in_use(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-80GB", 1)
    set_gpu(node, bus_id="00000000:01:00.0")
    fs.add_process(node.state, 0, 1234)
    out, rc = smi(node, "-i", "0", "-r")
    assert out == sample("reset_refused.txt")
    assert rc == 255  # mig-parted exits 255 from `nvidia-smi -r` (NVIDIA/mig-parted#181)


def test_reset_succeeds(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-80GB", 1)
    set_gpu(node, bus_id="00000000:C1:00.0", mig_pending=True)
    assert smi(node, "-i", "0", "-r") == (INLINE["reset_ok"] + "\n", 0)
    assert node.load()["gpus"][0]["mig_current"] is True


def test_query_bus_and_mode(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-40GB", 1, mig=True)
    set_gpu(node, bus_id="00000000:36:00.0")
    out = smi(node, "-i", "0", "--query-gpu=pci.bus_id,mig.mode.current", "--format=csv")
    assert out == (sample("query_bus_mode.txt"), 0)


def test_lgip_legacy_layout_of_driver_510(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-40GB", 1, mig=True, driver_version="510.47.03")
    smi(node, "mig", "-cgi", "0", "-C")  # a 7g instance: every Free count is 0 as in the sample
    out, rc = smi(node, "mig", "-lgip")
    assert rc == 0
    text = sample("lgip_legacy_a100_40gb_r510.txt")
    head, tail = text.split("...\n")
    assert out.startswith(head)  # every line up to the elision, character for character
    assert out.endswith(tail)


def test_lgipp(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-40GB", 1, mig=True)
    assert smi(node, "mig", "-lgipp") == (sample("lgipp_a100.txt"), 0)


def test_create_two_3g(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-40GB", 1, mig=True)
    assert smi(node, "mig", "-cgi", "9,3g.20gb", "-C") == (sample("create_cgi_9_3g.txt"), 0)


def test_create_in_the_wrong_order_is_insufficient(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-40GB", 1, mig=True)
    out, rc = smi(node, "mig", "-cgi", "19,19,14,9")
    assert out.endswith(sample("create_insufficient.txt"))
    assert rc == 23


def test_create_in_the_documented_order_succeeds(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-40GB", 1, mig=True)
    out, rc = smi(node, "mig", "-cgi", "9,19,14,19")  # the guide's Example 2: this order works
    assert rc == 0
    assert out.count("Successfully created GPU instance") == 4


def test_lgi_legacy_listing(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-40GB", 1, mig=True, driver_version="510.47.03")
    add_gi(node, 1, 9, 4, 4)
    add_gi(node, 2, 9, 0, 4)
    assert smi(node, "mig", "-lgi") == (sample("lgi_legacy.txt"), 0)


def test_lci_listing(tmp_path: Path) -> None:
    node = make_node(tmp_path, "H100 80GB HBM3", 1, mig=True)
    out, rc = smi(node, "mig", "-cgi", "19:0", "-C")
    assert rc == 0, out
    assert smi(node, "mig", "-lci") == (sample("lci.txt"), 0)


def test_destroy_ci_then_gi(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-40GB", 1, mig=True)
    smi(node, "mig", "-cgi", "9:0", "-C")  # GPU instance 1 with compute instance 0
    assert smi(node, "mig", "-dci") == (sample("destroy_ci.txt"), 0)
    assert smi(node, "mig", "-dgi") == (sample("destroy_gi.txt"), 0)
    assert node.count("destroyed_gi") == 1


def test_destroy_gi_with_its_ci_is_in_use(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-40GB", 1, mig=True)
    smi(node, "mig", "-cgi", "9:0", "-C")
    out, rc = smi(node, "mig", "-dgi")
    assert out == sample("destroy_in_use.txt")
    assert rc != 0
    assert len(node.load()["gpus"][0]["gis"]) == 1


def test_list_gpus(tmp_path: Path) -> None:
    node = make_node(tmp_path, "H100 80GB HBM3", 1, mig=True)
    set_gpu(node, uuid="GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4")
    uuids = [
        "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde",
        "MIG-56c30729-347f-5dd6-8da0-c3cc59e969e0",
        "MIG-9d14fb21-4ae1-546f-a636-011582899c39",
    ]
    for spec in ("9:0", "14:4", "19:6"):
        smi(node, "mig", "-cgi", spec, "-C")
    with fs.edit(node.state) as s:
        for gi, uuid in zip(sorted(s["gpus"][0]["gis"], key=lambda g: g["id"]), uuids, strict=True):
            gi["cis"][0]["uuid"] = uuid
    assert smi(node, "-L") == (sample("list_gpus_h100.txt"), 0)


def test_inline_samples(tmp_path: Path) -> None:
    node = make_node(tmp_path, "A100-SXM4-40GB", 1, mig=True)
    assert smi(node, "mig", "-lgi") == (INLINE["no_gi"] + "\n", 6)
    smi(node, "mig", "-cgi", "9:0")
    assert smi(node, "mig", "-lci") == (INLINE["no_ci"] + "\n", 6)
    out, rc = smi(node, "mig", "-cci", "0,0,0", "-gi", "1")
    assert (out, rc) == ((INLINE["cci"] + "\n") * 3, 0)


@pytest.mark.parametrize("command", [["mig", "-lgip"], ["mig", "-lgi"]])
def test_not_mig_capable(tmp_path: Path, command: list[str]) -> None:
    node = make_node(tmp_path, "RTX 4090", 1)
    out, rc = smi(node, *command)
    assert rc == 6
    assert out.strip() in (INLINE["no_mig"], "No MIG-enabled devices found.")

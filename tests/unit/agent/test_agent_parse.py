"""Parsers on every nvidia-smi output sample (files in tests/data/nvidia-smi/samples/, copied
verbatim from the sources in smi_samples.SAMPLE_SOURCES), plus the one-line samples
(smi_samples.INLINE) and the newer table layouts."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from tests.kit.smi_samples import (
    INLINE,
    INLINE_SOURCES,
    SAMPLE_SOURCES,
    SAMPLES,
    sample,
    transcript,
)
from vgpu_operator.agent.parse import (
    SmiErrorKind,
    classify,
    mig_mode,
    parse_compute_apps,
    parse_csv,
    parse_gpus,
    parse_lci,
    parse_lgi,
    parse_lgip,
    parse_lgipp,
)
from vgpu_operator.agent.parse_actions import (
    CreatedCi,
    CreatedGi,
    Destroyed,
    ModeChange,
    ResetResult,
    parse_created,
    parse_destroyed,
    parse_list,
    parse_mode_change,
    parse_reset,
)


def _pinned() -> dict[str, str]:
    """samples/SHA256SUMS (`sha256sum` format): the digest of each sample as copied."""
    lines = (SAMPLES / "SHA256SUMS").read_text().splitlines()
    return {name: digest for digest, name in (line.split("  ", 1) for line in lines)}


def test_every_sample_names_its_source_and_is_pinned() -> None:
    files = {p.name for p in SAMPLES.glob("*.txt")}
    assert files == set(SAMPLE_SOURCES) == set(_pinned())
    assert set(INLINE) == set(INLINE_SOURCES)


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.txt")), ids=lambda p: p.name)
def test_sample_files_are_unchanged_copies(path: Path) -> None:
    # a sample is its source's text, never edited to fit the fake nvidia-smi or a parser
    assert hashlib.sha256(path.read_bytes()).hexdigest() == _pinned()[path.name]


def test_legacy_lgip_sample_is_an_elided_copy_of_its_transcript() -> None:
    head, tail = sample("lgip_legacy_a100_40gb_r510.txt").split("...\n")
    full = transcript("lgip_a100_pcie_40gb_r510.txt")
    assert full.startswith(head) and full.endswith(tail) and len(full) > len(head) + len(tail)


def test_query_with_header() -> None:
    rows = parse_csv(sample("query_bus_mode.txt"))
    assert rows == [{"pci.bus_id": "00000000:36:00.0", "mig.mode.current": "Enabled"}]
    assert mig_mode(rows[0]["mig.mode.current"]) is True


def test_query_gpus_constructed_line_and_na() -> None:
    # a line shape constructed from the user guide's CSV conventions (`", "` separators, `MiB`
    # units; MIG_USER_GUIDE), not a captured sample, with the bus id our query adds;
    # [N/A] for GPUs that are not MIG-capable.
    text = (
        "0, GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4, NVIDIA H100 80GB HBM3, 00000000:36:00.0, "
        "81559 MiB, Enabled, Enabled\n"
        "1, GPU-1, NVIDIA GeForce RTX 4090, 00000000:37:00.0, 24564, [N/A], [N/A]\n"
    )
    h100, rtx = parse_gpus(text)
    assert (h100.index, h100.name, h100.memory_mib, h100.mig_current) == (
        0,
        "NVIDIA H100 80GB HBM3",
        81559,
        True,
    )
    assert h100.uuid == "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4"
    assert (rtx.memory_mib, rtx.mig_current, rtx.mig_pending) == (24564, None, None)


def test_lgip_legacy_layout_with_elided_rows() -> None:
    rows = parse_lgip(sample("lgip_legacy_a100_40gb_r510.txt"))
    assert [(r.id, r.name, r.free, r.total, r.memory_gib) for r in rows] == [
        (19, "1g.5gb", 0, 7, 4.75),
        (20, "1g.5gb+me", 0, 1, 4.75),
        (14, "2g.10gb", 0, 3, 9.75),
        (0, "7g.40gb", 0, 1, 39.50),
    ]
    me = rows[1]
    assert (me.sm, me.dec, me.enc, me.ce, me.jpeg, me.ofa, me.p2p) == (14, 1, 0, 1, 1, 1, False)
    assert rows[2].ce is None  # its CE/JPEG/OFA line is the elided "..."
    assert (rows[3].sm, rows[3].dec, rows[3].ce, rows[3].jpeg, rows[3].ofa) == (98, 5, 7, 1, 1)


def _wide(rows: list[str], separators: bool) -> str:
    """The 81-column layout of newer drivers (an H100's `mig -lgip` as printed in
    https://jbarrow.ai/field_notes/nvidia-mig/; some listings omit the separator rows), built from
    the legacy sample's rows by that widening of the Name column."""
    border = "+" + "-" * 79 + "+"
    head = [
        border,
        "| GPU instance profiles:".ljust(80) + "|",
        "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |",
        "|                                Free/Total   GiB              CE    JPEG  OFA  |",
        "|" + "=" * 79 + "|",
    ]
    body: list[str] = []
    for i in range(0, len(rows), 2):
        body += rows[i : i + 2] + ([border] if separators else [])
    return "\n".join(head + body + ([] if separators else [border]))


@pytest.mark.parametrize("separators", [True, False])
def test_lgip_wide_layout_with_and_without_separators(separators: bool) -> None:
    rows = [
        "|   0  MIG 1g.10gb         19     7/7        9.75       No     16     1     0   |",
        "|                                                               1     1     0   |",
        "|   0  MIG 7g.80gb          0     1/1        79.25      No     132    7     0   |",
        "|                                                               8     7     1   |",
    ]
    parsed = parse_lgip(_wide(rows, separators))
    assert [(p.id, p.name, p.free, p.sm, p.ce, p.jpeg) for p in parsed] == [
        (19, "1g.10gb", 7, 16, 1, 1),
        (0, "7g.80gb", 1, 132, 8, 7),
    ]


def test_lgipp_a100_sample() -> None:
    rows = parse_lgipp(sample("lgipp_a100.txt"))
    got = {r.profile_id: (r.starts, r.size) for r in rows}
    assert got == {
        19: ((0, 1, 2, 3, 4, 5, 6), 1),
        20: ((0, 1, 2, 3, 4, 5, 6), 1),
        15: ((0, 2, 4, 6), 2),
        14: ((0, 2, 4), 2),
        9: ((0, 4), 4),
        5: ((0,), 4),
        0: ((0,), 8),
    }
    assert {r.gpu for r in rows} == {0}


def test_lgipp_a30_listing() -> None:
    # an A30's `mig -lgipp`, Summer-Lo/Docker_configuration@fd975fcf097f:000-MIG/README.md
    text = "\n".join(
        [
            "GPU  0 Profile ID 14 Placements: {0,1,2,3}:1",
            "GPU  0 Profile ID 21 Placements: {0,1,2,3}:1",
            "GPU  0 Profile ID  5 Placements: {0,2}:2",
            "GPU  0 Profile ID  0 Placement : {0}:4",
        ]
    )
    assert [(r.profile_id, r.starts, r.size) for r in parse_lgipp(text)] == [
        (14, (0, 1, 2, 3), 1),
        (21, (0, 1, 2, 3), 1),
        (5, (0, 2), 2),
        (0, (0,), 4),
    ]


def test_lgi_legacy_sample() -> None:
    rows = parse_lgi(sample("lgi_legacy.txt"))
    assert [(r.gpu, r.name, r.profile_id, r.gi, r.start, r.size) for r in rows] == [
        (0, "3g.20gb", 9, 1, 4, 4),
        (0, "3g.20gb", 9, 2, 0, 4),
    ]


def test_lgi_wide_rows() -> None:
    text = (
        "|   0  MIG 2g.20gb           14        3          0:2     |\n"
        "|   0  MIG 3g.40gb            9        2          4:4     |\n"
    )
    assert [(r.profile_id, r.gi, r.start, r.size) for r in parse_lgi(text)] == [
        (14, 3, 0, 2),
        (9, 2, 4, 4),
    ]


def test_lci_sample_and_without_placement_column() -> None:
    (ci,) = parse_lci(sample("lci.txt"))
    assert (ci.gpu, ci.gi, ci.name, ci.profile_id, ci.ci, ci.start, ci.size) == (
        0,
        7,
        "1g.10gb",
        0,
        0,
        0,
        1,
    )
    (bare,) = parse_lci("|   0      1       MIG 1c.3g.20gb       0         0     |")
    assert (bare.name, bare.ci, bare.start, bare.size) == ("1c.3g.20gb", 0, None, None)


def test_empty_listings() -> None:
    assert parse_lgi(INLINE["no_gi"]) == []
    assert parse_lci(INLINE["no_ci"]) == []
    assert classify(INLINE["no_gi"]) == SmiErrorKind.NOT_FOUND
    assert classify(INLINE["no_mig"]) == SmiErrorKind.NOT_MIG_CAPABLE


def test_create_sample() -> None:
    gis, cis = parse_created(sample("create_cgi_9_3g.txt"))
    assert gis == [CreatedGi(0, 2, "3g.20gb", 9), CreatedGi(0, 1, "3g.20gb", 9)]
    assert cis == [CreatedCi(0, 2, 0, "3g.20gb", 2), CreatedCi(0, 1, 0, "3g.20gb", 2)]
    _, (extra,) = parse_created(INLINE["cci"])
    assert extra == CreatedCi(0, 1, None, "1c.3g.20gb", 0)


def test_create_failure_is_insufficient_resources() -> None:
    text = sample("create_insufficient.txt")
    assert parse_created(text) == ([], [])
    assert classify(text) == SmiErrorKind.INSUFFICIENT_RESOURCES


def test_destroy_samples() -> None:
    assert parse_destroyed(sample("destroy_ci.txt")) == [Destroyed(0, 1, 0)]
    assert parse_destroyed(sample("destroy_gi.txt")) == [Destroyed(0, 1, None)]
    refused = sample("destroy_in_use.txt")
    assert parse_destroyed(refused) == []
    assert classify(refused) == SmiErrorKind.IN_USE


def test_mode_change_samples() -> None:
    assert parse_mode_change(sample("mode_enable.txt")) == [
        ModeChange("00000000:36:00.0", enable=True, pending=False)
    ]
    assert parse_mode_change(sample("mode_disable.txt")) == [
        ModeChange("00000000:16:00.0", enable=False, pending=False)
    ]
    passthrough = sample("mode_pending_passthrough.txt")
    assert parse_mode_change(passthrough) == [
        ModeChange("00000000:00:03.0", enable=True, pending=True, reason="Not Supported")
    ]
    assert classify(passthrough) == SmiErrorKind.PENDING_REBOOT
    in_use = sample("mode_pending_in_use.txt")
    assert parse_mode_change(in_use) == [
        ModeChange(
            "00000000:C1:00.0", enable=False, pending=True, reason="In use by another client"
        )
    ]
    assert classify(in_use) == SmiErrorKind.IN_USE


def test_reset_samples() -> None:
    assert parse_reset(INLINE["reset_ok"]) == [ResetResult("00000000:C1:00.0", ok=True)]
    unsupported = sample("reset_not_supported.txt")
    assert parse_reset(unsupported) == [
        ResetResult("00000000:00:03.0", ok=False, reason="Not Supported")
    ]
    assert classify(unsupported) == SmiErrorKind.RESET_NOT_SUPPORTED
    refused = sample("reset_refused.txt")
    assert parse_reset(refused) == [
        ResetResult("00000000:01:00.0", ok=False, reason="In use by another client")
    ]
    assert classify(refused) == SmiErrorKind.IN_USE


def test_list_gpus_current_and_older_forms() -> None:
    (gpu,) = parse_list(sample("list_gpus_h100.txt"))
    assert (gpu.index, gpu.name, gpu.uuid) == (
        0,
        "NVIDIA H100 80GB HBM3",
        "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4",
    )
    assert [(m.profile, m.device) for m in gpu.migs] == [
        ("3g.40gb", 0),
        ("2g.20gb", 1),
        ("1g.10gb", 2),
    ]
    assert gpu.migs[2].uuid == "MIG-9d14fb21-4ae1-546f-a636-011582899c39"
    # older drivers' single spacing (MIG_USER_GUIDE), and the pre-R470 MIG-GPU-<parent>/<gi>/<ci>
    # form (accepted by NVIDIA/go-nvlib@3c161560521e:pkg/nvlib/device/identifier.go)
    old = (
        "GPU 0: A100-SXM4-40GB (UUID: GPU-2fa5cf01-9520-1bc1-995b-cc0c6d9bca7c)\n"
        "  MIG 3g.20gb Device 0: (UUID: MIG-GPU-2fa5cf01-9520-1bc1-995b-cc0c6d9bca7c/1/0)\n"
    )
    (legacy,) = parse_list(old)
    assert legacy.migs[0].uuid.endswith("/1/0")


def test_compute_apps() -> None:
    text = "00000000:07:00.0, GPU-abc, 4242, 1024, python train.py, lr=0.1\n"
    (proc,) = parse_compute_apps(text)
    assert (proc.bus_id, proc.pid, proc.used_memory_mib) == ("00000000:07:00.0", 4242, 1024)
    assert proc.name == "python train.py, lr=0.1"
    assert parse_compute_apps("") == []
    assert parse_compute_apps("No running processes found") == []
    with_header = "gpu_bus_id, gpu_uuid, pid, used_gpu_memory [MiB], process_name\n" + text
    assert parse_compute_apps(with_header)[0].pid == 4242


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Unable to destroy GPU instance ID  1 from GPU  0: In use by another client", "IN_USE"),
        ("Resetting GPU 00000000:00:03.0 is not supported.", "RESET_NOT_SUPPORTED"),
        ("Failed to create GPU instances: Insufficient Resources", "INSUFFICIENT_RESOURCES"),
        ("Unable to enable MIG Mode for GPU 00000000:01:00.0: Not Supported", "NOT_MIG_CAPABLE"),
        ("Unknown Error", "OTHER"),
    ],
)
def test_classify(text: str, kind: str) -> None:
    assert classify(text) == SmiErrorKind[kind]


def test_every_sample_file_is_parsed_by_some_test() -> None:
    used = set(re.findall(r'sample\("([^"]+)"\)', Path(__file__).read_text()))
    assert {p.name for p in SAMPLES.glob("*.txt")} <= used

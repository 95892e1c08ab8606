"""The audit log read while the apiserver writes it: an event seen half written (its size moves a
page at a time, vgpu_devcluster/auditlog.py) is neither an offset nor a line until it ends."""

from __future__ import annotations

import json
from pathlib import Path

from vgpu_devcluster import auditlog


def event(n: int, size: int = 0) -> bytes:
    return json.dumps({"n": n, "pad": "x" * size}).encode() + b"\n"


def test_a_half_written_event_is_read_once_it_ends(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    whole, half = event(1) + event(2), event(3)[:10]
    log.write_bytes(whole + half)
    lines, offset = auditlog.whole_lines(log)
    assert [json.loads(line)["n"] for line in lines] == [1, 2]
    assert offset == len(whole)
    assert auditlog.line_end(log) == len(whole)

    log.write_bytes(whole + event(3))  # the write ends
    lines, offset = auditlog.whole_lines(log, offset)
    assert [json.loads(line)["n"] for line in lines] == [3]
    assert offset == auditlog.line_end(log) == log.stat().st_size


def test_the_end_of_the_last_line_is_found_behind_an_event_longer_than_a_chunk(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.log"
    first = event(1)
    log.write_bytes(first + event(2, size=3 * (1 << 16))[:-1])  # 192 KiB, no newline yet
    assert auditlog.line_end(log) == len(first)
    log.write_bytes(event(2, size=3 * (1 << 16))[:-1])  # no whole line at all
    assert auditlog.line_end(log) == 0
    assert auditlog.whole_lines(log) == ([], 0)


def test_a_log_not_yet_written_has_nothing(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    assert auditlog.line_end(log) == 0
    assert auditlog.whole_lines(log, 0) == ([], 0)

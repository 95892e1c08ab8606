"""`--query-compute-apps` read line by line: the empty-list message counts only as the whole and
only line nvidia-smi prints in its place; a process named like it is a process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kit.smi_samples import InProcessSmi
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.agent.parse import NO_PROCESSES, ProcessListError, parse_compute_apps

ROW = "00000000:07:00.0, GPU-abc, 4242, 1024, "
HEADER = "gpu_bus_id, gpu_uuid, pid, used_gpu_memory [MiB], process_name\n"
QUERY = ("--query-compute-apps=gpu_bus_id,gpu_uuid,pid,used_memory,process_name",)


def test_the_message_alone_is_the_empty_list() -> None:
    assert parse_compute_apps(f"{NO_PROCESSES}\n") == []
    assert parse_compute_apps(f"  {NO_PROCESSES}  \n\n") == []
    assert parse_compute_apps(HEADER + NO_PROCESSES) == []
    assert parse_compute_apps("") == parse_compute_apps(HEADER) == []


@pytest.mark.parametrize("name", fs.HOSTILE_PROCESS_NAMES)
def test_a_process_named_like_the_message_is_a_process(name: str) -> None:
    (proc,) = parse_compute_apps(ROW + name + "\n")
    assert (proc.pid, proc.name) == (4242, name)
    second = "00000000:0F:00.0, GPU-def, 7, 10, python\n"
    assert [p.pid for p in parse_compute_apps(ROW + name + "\n" + second)] == [4242, 7]
    assert [p.pid for p in parse_compute_apps(HEADER + ROW + name)] == [4242]


def test_a_line_that_is_no_row_is_an_error_not_an_empty_list() -> None:
    for text in ("garbage", f"{NO_PROCESSES}\n{ROW}python", "x, y, z", f"{ROW[:-2]}"):
        with pytest.raises(ProcessListError):
            parse_compute_apps(text)


def test_the_fake_prints_the_message_only_in_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    smi = InProcessSmi(tmp_path, monkeypatch, capsys).init("A100-SXM4-80GB")
    fmt = "--format=csv,noheader,nounits"
    assert smi(*QUERY, fmt) == ("", 0)  # current drivers: nothing
    with fs.edit(smi.path) as s:
        s["no_processes_message"] = True
    assert smi(*QUERY, fmt) == (f"{NO_PROCESSES}\n", 0)
    fs.add_process(smi.path, 0, 4242, NO_PROCESSES)
    out, rc = smi(*QUERY, fmt)
    assert rc == 0 and out.endswith(f", 4242, 1024, {NO_PROCESSES}\n") and out.count("\n") == 1
    assert [p.name for p in parse_compute_apps(out)] == [NO_PROCESSES]

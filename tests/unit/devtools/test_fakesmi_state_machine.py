"""The fake nvidia-smi's state machine and knobs. Most calls go through `fakesmi.main` in process
(the same code the wrapper runs); one test runs `python -m` to show the module is executable."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kit.smi_samples import InProcessSmi
from vgpu_devcluster import fakesmi
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.agent.parse import (
    QUERY_GPU_FIELDS,
    parse_compute_apps,
    parse_gpus,
    parse_lgi,
    parse_lgip,
)


def test_ampere_mode_is_pending_until_a_reset_of_that_gpu(fake: InProcessSmi) -> None:
    fake.init("A100-SXM4-80GB", 2)
    fs.add_process(fake.path, 1, 11)  # a client holds GPU 1: its driver cannot reset it now
    out, rc = fake("-i", "1", "-mig", "1")
    assert rc == 0 and "pending enable state" in out and out.endswith("All done.\n")
    assert (fake.gpu(1)["mig_current"], fake.gpu(1)["mig_pending"]) == (False, True)
    assert fake.gpu(0)["mig_pending"] is False
    fs.clear_processes(fake.path)
    assert fake("-i", "1", "-r")[1] == 0
    assert (fake.gpu(1)["mig_current"], fake.gpu(1)["mig_pending"]) == (True, True)
    assert fs.count_effect(fake.path, "reset") == 1


def test_hopper_mode_changes_at_once(fake: InProcessSmi) -> None:
    fake.init("H200")
    assert fake("-i", "0", "-mig", "1")[0].startswith("Enabled MIG Mode for GPU")
    assert (fake.gpu()["mig_current"], fake.gpu()["mig_pending"]) == (True, True)


def test_mode_change_with_processes_goes_pending_in_use(fake: InProcessSmi) -> None:
    fake.init("H100 80GB HBM3")
    fs.add_process(fake.path, 0, 11)
    out, _ = fake("-i", "0", "-mig", "1")
    assert "In use by another client" in out
    assert fake.gpu()["mig_current"] is False
    assert fake("-i", "0", "-r")[1] == 255  # and the reset is refused while it runs


def test_not_mig_capable_gpu(fake: InProcessSmi) -> None:
    fake.init("RTX 4090")
    out, rc = fake("-i", "0", "-mig", "1")
    assert "Unable to enable MIG Mode for GPU 00000000:07:00.0: Not Supported" in out
    assert rc == 0  # "Treating as warning and moving on."
    (row,) = parse_gpus(fake(f"--query-gpu={','.join(QUERY_GPU_FIELDS)}", "--format=csv")[0])
    assert (row.mig_current, row.mig_pending, row.memory_mib) == (None, None, 24564)


def test_seven_1g_get_the_documented_instance_ids(fake: InProcessSmi) -> None:
    fake.init("A100-SXM4-40GB", mig=True)
    out, rc = fake("mig", "-cgi", ",".join(["19"] * 7))
    assert rc == 0
    ids = [int(line.split("ID")[1].split()[0]) for line in out.splitlines()]
    assert ids == [13, 11, 12, 7, 8, 9, 10]  # as in the MIG user guide (fakesmi_mig)
    starts = sorted(r.start for r in parse_lgi(fake("mig", "-lgi")[0]))
    assert starts == list(range(7))


def test_explicit_placements_and_overlap(fake: InProcessSmi) -> None:
    fake.init("A100-SXM4-80GB", mig=True)
    assert fake("mig", "-cgi", "9:0", "-C")[1] == 0
    out, rc = fake("mig", "-cgi", "5:0")
    assert rc == 23 and "Insufficient Resources" in out
    out, rc = fake("mig", "-cgi", "14:3")  # not a legal start for 2g
    assert rc == 23
    assert fake("mig", "-cgi", "14:4,19:6,19:7")[1] == 23  # 1g cannot start at 7
    assert {gi["start"] for gi in fake.gpu()["gis"]} == {0, 4, 6}


def test_free_counts_follow_the_instances(fake: InProcessSmi) -> None:
    fake.init("A100-SXM4-80GB", mig=True)
    fake("mig", "-cgi", "9:4", "-C")
    free = {r.name: (r.free, r.total) for r in parse_lgip(fake("mig", "-lgip")[0])}
    assert free == {
        "1g.10gb": (4, 7),
        "1g.10gb+me": (1, 1),
        "1g.20gb": (2, 4),
        "2g.20gb": (2, 3),
        "3g.40gb": (1, 2),
        "4g.40gb": (1, 1),
        "7g.80gb": (0, 1),
    }


def test_old_driver_lists_no_profiles_while_mig_is_off(fake: InProcessSmi) -> None:
    fake.init("A30", driver_version="535.104.05")
    assert fake("mig", "-lgip") == ("No MIG-enabled devices found.\n", 6)
    assert fake("mig", "-lgi")[1] == 6
    fake("-i", "0", "-mig", "1")
    fake("-i", "0", "-r")
    assert fake("mig", "-lgip")[1] == 0


def test_process_on_one_instance_blocks_only_that_instance(fake: InProcessSmi) -> None:
    fake.init("H100 80GB HBM3", mig=True)
    fake("mig", "-cgi", "9:0,9:4", "-C")
    fs.add_process(fake.path, 0, 77, gi=1)
    out, rc = fake("mig", "-dci")
    assert rc == 255
    assert "Unable to destroy compute instance ID  0 from GPU  0 GPU instance ID  1" in out
    assert "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  2" in out
    fields = "--query-compute-apps=gpu_bus_id,gpu_uuid,pid,used_memory,process_name"
    (proc,) = parse_compute_apps(fake(fields, "--format=csv,noheader,nounits")[0])
    assert (proc.pid, proc.used_memory_mib, proc.name) == (77, 1024, "python")


def test_injected_failures_are_consumed(fake: InProcessSmi) -> None:
    fake.init("H100 80GB HBM3", mig=True)
    fs.inject(fake.path, "-cgi", "insufficient_resources", times=2)
    assert fake("mig", "-cgi", "0")[1] == 23
    assert fake("mig", "-cgi", "0")[1] == 23
    assert fake("mig", "-cgi", "0")[1] == 0
    assert fs.load(fake.path)["inject"] == []
    fs.inject(fake.path, "-r", "reset_unsupported", times=-1)
    for _ in range(2):
        out, rc = fake("-i", "0", "-r")
        assert (out, rc) == ("Resetting GPU 00000000:07:00.0 is not supported.\n", 3)


def test_injected_mode_failures_leave_the_mode_pending(fake: InProcessSmi) -> None:
    fake.init("H100 80GB HBM3")
    fs.inject(fake.path, "-mig", "pending_reboot")
    out, rc = fake("-i", "0", "-mig", "1")
    assert rc == 0 and "Reboot the system or try nvidia-smi --gpu-reset" in out
    assert (fake.gpu()["mig_current"], fake.gpu()["mig_pending"]) == (False, True)


def test_hang_is_logged_then_the_call_proceeds(fake: InProcessSmi) -> None:
    fake.init("H100 80GB HBM3", mig=True)
    fs.hang_at(fake.path, "-cgi", skip=1, seconds=0.3)
    started = time.monotonic()
    fake("mig", "-cgi", "19:0")
    assert time.monotonic() - started < 0.3
    started = time.monotonic()
    assert fake("mig", "-cgi", "19:1")[1] == 0
    assert time.monotonic() - started >= 0.3
    log = fs.read_log(fake.path)
    assert [e.get("hang") for e in log] == [None, 0.3, None]
    assert fs.load(fake.path)["hang"] == []


def test_reboot_applies_pending_modes_and_drops_instances(fake: InProcessSmi) -> None:
    fake.init("A100-SXM4-40GB", 2, mig=True)
    fake("mig", "-cgi", "0", "-C")
    fake("-i", "1", "-mig", "0")
    fs.add_process(fake.path, 0, 5)
    fs.reboot(fake.path)
    g0, g1 = fake.gpu(0), fake.gpu(1)
    assert (g0["mig_current"], g0["gis"], g0["processes"]) == (True, [], [])
    assert (g1["mig_current"], g1["mig_pending"]) == (False, False)


def test_bad_arguments_and_missing_driver(
    fake: InProcessSmi, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.init("A30")
    assert fake("--bogus") == (fakesmi.USAGE + "\n", 2)
    assert fake("-i", "5", "-L")[1] == 6
    assert fake("--query-gpu=nope", "--format=csv")[1] == 2
    monkeypatch.delenv(fs.ENV_STATE)
    assert fake("-L") == (fakesmi.NO_DRIVER + "\n", 9)


def test_gpu_selection_by_bus_id_and_uuid(fake: InProcessSmi) -> None:
    fake.init("A30", 3)
    g2 = fake.gpu(2)
    for ident in (g2["bus_id"], g2["uuid"], "2"):
        out, _ = fake("-i", ident, "--query-gpu=index", "--format=csv,noheader")
        assert out == "2\n"


def test_module_is_executable(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    fs.init_state(state, "H200", 1)
    env = {**os.environ, fs.ENV_STATE: str(state)}
    proc = subprocess.run(
        [sys.executable, "-m", "vgpu_devcluster.fakesmi", "-L"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert proc.stdout.startswith("GPU 0: NVIDIA H200 (UUID: GPU-")

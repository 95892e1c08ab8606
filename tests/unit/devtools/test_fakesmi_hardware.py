"""The fake nvidia-smi against real hardware behaviour the agent must meet
(each test names its transcript; smi_samples.SOURCES says where each was seen):

- Hopper's `-C` makes compute-instance profile 7 in a 1g double-memory GPU instance;
- `mig -lcip` lists a GPU instance's compute-instance profiles, the default marked `*`;
- Ampere switches MIG mode at once when nothing holds the GPU (the driver resets it itself);
- a reset or reboot clears MIG mode on Hopper;
- drivers up to 535 list no profiles while MIG is off, also on the PCIe SKUs;
- a process in another PID namespace is invisible (or `[Not Found]`) to a caller outside the
  host's;
- a killed call whose child holds stdout open keeps the pipe open for real.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.kit.smi_samples import InProcessSmi, make_node, transcript
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.agent.parse import parse_compute_apps
from vgpu_operator.agent.parse_actions import parse_created, parse_list

APPS = ("--query-compute-apps=gpu_bus_id,gpu_uuid,pid,used_memory,process_name", "--format=csv")


def test_hopper_cgi_15_with_C_makes_compute_instance_profile_7(fake: InProcessSmi) -> None:
    # transcripts/h100_cgi15_C.txt: `mig -i 3 -cgi 15 -C` four times on GPU 3 of an H100 node
    real = transcript("h100_cgi15_C.txt")
    fake.init("H100 80GB HBM3", 4, mig=True)
    printed = "".join(fake("mig", "-i", "3", "-cgi", "15", "-C")[0] for _ in range(4))
    lines = [line for line in real.splitlines() if line.startswith("Successfully")]
    assert "\n".join(lines) in printed  # both lines, character for character (GI ID 5)
    _, cis = parse_created(printed)
    assert [c.profile_id for c in cis] == [7, 7, 7, 7]
    listed = [line for line in real.splitlines() if line.startswith(("GPU 3", "  MIG"))]
    (gpu3,) = [g for g in parse_list(fake("-L")[0]) if g.index == 3]
    (want,) = parse_list("\n".join(listed))
    assert gpu3.name == want.name and [m.profile for m in gpu3.migs] == ["1g.20gb"] * 4
    assert [m.device for m in gpu3.migs] == [m.device for m in want.migs]


def test_ampere_1g_compute_instances_are_profile_0(fake: InProcessSmi) -> None:
    # transcripts/a100_cgi19_cci.txt: seven 1g.5gb, then `-cci` per GPU instance: CI profile 0
    real = transcript("a100_cgi19_cci.txt")
    _, real_cis = parse_created(real)
    fake.init("A100-SXM4-40GB", mig=True)
    out, rc = fake("mig", "-cgi", ",".join(["19"] * 7), "-i", "0")
    assert rc == 0
    gis = ",".join(str(g.gi) for g in parse_created(out)[0])
    out, rc = fake("mig", "-i", "0", "-cci", "-gi", gis)
    assert rc == 0
    _, cis = parse_created(out)
    assert {(c.profile, c.profile_id) for c in cis} == {(c.profile, c.profile_id) for c in real_cis}
    assert len(cis) == 7


def test_lcip_lists_compute_instance_profiles_as_the_driver_does(fake: InProcessSmi) -> None:
    # transcripts/lcip_a100_pcie_40gb_r510.txt: a 1g.5gb GPU instance (ID 9) and a 2g.10gb one
    # (ID 3), each with its full compute instance, on an A100-PCIE-40GB with driver 510
    fake.init("A100-PCIE-40GB", mig=True, driver_version="510.47.03")
    for gi_id, profile, start, size, ci_profile in ((9, 19, 6, 1, 0), (3, 14, 0, 2, 1)):
        ci = fs.CiState(id=0, profile_id=ci_profile, start=0, size=size, uuid=f"MIG-{gi_id}")
        with fs.edit(fake.path) as s:
            s["gpus"][0]["gis"].append(
                fs.GiState(id=gi_id, profile_id=profile, start=start, size=size, cis=[ci])
            )
    assert fake("mig", "-lcip") == (transcript("lcip_a100_pcie_40gb_r510.txt"), 0)


def test_lgip_of_an_a100_pcie_40gb_on_driver_510(fake: InProcessSmi) -> None:
    # transcripts/lgip_a100_pcie_40gb_r510.txt: every Free count 0 (a 7g instance exists)
    fake.init("A100-PCIE-40GB", mig=True, driver_version="510.47.03")
    fake("mig", "-cgi", "0", "-C")
    assert fake("mig", "-lgip") == (transcript("lgip_a100_pcie_40gb_r510.txt"), 0)


def test_cci_takes_only_the_profiles_lcip_lists(fake: InProcessSmi) -> None:
    # Reconstructed from the listings above: a Hopper 1g.20gb GPU instance lists CI profile 7
    # only (transcripts/h100_cgi15_C.txt made 7), so `-cci 0` is refused; `-cci` alone makes
    # the default.
    fake.init("H100 80GB HBM3", mig=True)
    fake("mig", "-cgi", "15:0")
    out, rc = fake("mig", "-i", "0", "-gi", "3", "-cci", "0")
    assert rc == 255 and "Invalid Argument" in out
    out, rc = fake("mig", "-i", "0", "-gi", "3", "-cci")
    assert rc == 0 and out.rstrip().endswith("using profile MIG 1g.20gb (ID  7)")
    lcip, _ = fake("mig", "-i", "0", "-gi", "3", "-lcip")
    assert re.search(r"MIG 1g\.20gb\s+7\*\s+0/1", lcip)


def test_ampere_switches_at_once_when_nothing_holds_the_gpu(fake: InProcessSmi) -> None:
    # MIG user guide: "the driver will attempt to reset the GPU so that MIG mode can take
    # effect"; the printed text is the guide's sample of an A100's `-i 0 -mig 1`
    # (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html).
    fake.init("A100-SXM4-80GB", 2)
    out, rc = fake("-i", "1", "-mig", "1")
    assert (out, rc) == (f"Enabled MIG Mode for GPU {fake.gpu(1)['bus_id']}\nAll done.\n", 0)
    assert (fake.gpu(1)["mig_current"], fake.gpu(1)["mig_pending"]) == (True, True)
    assert fs.count_effect(fake.path, "reset") == 1  # the driver's own reset of GPU 1 only
    assert fake.gpu(0)["mig_current"] is False
    # a client holding the GPU keeps the mode pending, "In use by another client"
    # (NVIDIA/gpu-operator#118)
    with fs.edit(fake.path) as s:
        s["gpus"][0]["reset_blocked_by"] = "nvidia-persistenced"
    out, _ = fake("-i", "0", "-mig", "1")
    assert "pending enable state for GPU 00000000:07:00.0:In use by another client" in out
    assert (fake.gpu(0)["mig_current"], fake.gpu(0)["mig_pending"]) == (False, True)


@pytest.mark.parametrize("how", ["reset", "reboot"])
def test_hopper_loses_mig_mode_on_reset_and_reboot(fake: InProcessSmi, how: str) -> None:
    # https://github.com/NVIDIA/gpu-admin-tools/issues/2 (NVIDIA): "On H100 the MIG enablement
    # is controlled by driver and it's all gone by the time the VM is gone and GPU resets."
    fake.init("H100 80GB HBM3", mig=True)
    fake("mig", "-cgi", "9", "-C")
    if how == "reset":
        assert fake("-i", "0", "-r")[1] == 0
    else:
        fs.reboot(fake.path)
    g = fake.gpu()
    assert (g["mig_current"], g["mig_pending"], g["gis"]) == (False, False, [])


def test_ampere_keeps_mig_mode_over_a_reboot(fake: InProcessSmi) -> None:
    # NVIDIA/gpu-operator#2603: "MIG mode survives a reboot on Ampere via an InfoROM status bit"
    fake.init("A100 80GB PCIe", mig=True)
    fs.reboot(fake.path)
    assert (fake.gpu()["mig_current"], fake.gpu()["mig_pending"]) == (True, True)


def test_pcie_sku_on_driver_535_lists_no_profiles_until_mig_is_on(fake: InProcessSmi) -> None:
    # mig-parted pkg/mig/discovery/discovery.go: "older drivers (e.g., 535) ... don't support
    # querying MIG profiles when MIG mode is disabled"
    fake.init("A100 80GB PCIe", driver_version="535.161.08")
    assert fake("mig", "-lgip") == ("No MIG-enabled devices found.\n", 6)
    fake("-i", "0", "-mig", "1")
    out, rc = fake("mig", "-lgip")
    assert rc == 0 and "MIG 3g.40gb" in out
    assert "NVIDIA A100 80GB PCIe" in fake("-L")[0]


def test_processes_of_other_pid_namespaces(
    fake: InProcessSmi, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.init("H100 80GB HBM3")
    fs.add_process(fake.path, 0, 50983, "python train.py", namespace="pod-a")
    fs.add_process(fake.path, 0, 7, "own", namespace="agent")
    host = parse_compute_apps(fake(*APPS)[0])  # the host PID namespace sees every process
    assert [(p.pid, p.name) for p in host] == [(7, "own"), (50983, "python train.py")]
    monkeypatch.setenv(fs.ENV_PID_NAMESPACE, "agent")  # a container without hostPID
    assert [p.pid for p in parse_compute_apps(fake(*APPS)[0])] == [7]
    with fs.edit(fake.path) as s:
        s["foreign_processes"] = "not_found"
    # reconstructed from public captures ("50983, [Not Found]")
    seen = parse_compute_apps(fake(*APPS)[0])
    assert [(p.pid, p.name) for p in seen] == [(7, "own"), (50983, "[Not Found]")]


def _eof_within(fd: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready and os.read(fd, 4096) == b"":
            return True
    return False


@pytest.mark.parametrize(("mode", "group_kill_ends_it"), [("child", True), ("detached", False)])
def test_a_killed_call_whose_child_holds_stdout(
    tmp_path: Path, mode: fs.HangMode, group_kill_ends_it: bool
) -> None:
    node = make_node(tmp_path, "H100 80GB HBM3", 1, mig=True)
    fs.hang_at(node.state, "-cgi", seconds=60, mode=mode)
    env = {**os.environ, fs.ENV_STATE: str(node.state)}
    proc = subprocess.Popen(
        [str(node.binary), "mig", "-cgi", "9", "-C"],
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        while not any("hang" in e for e in node.log()):
            assert proc.poll() is None
            time.sleep(0.05)
        time.sleep(0.2)  # the child is forked right after the log line
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(5) == -signal.SIGKILL  # the call itself is gone at once ...
        assert proc.stdout is not None
        # ... and its output pipe closes with it, or stays open while the detached child lives
        assert _eof_within(proc.stdout.fileno(), 1.0) is group_kill_ends_it
    finally:
        assert fs.kill_strays(node.state) == (0 if group_kill_ends_it else 1)
        if proc.stdout is not None:
            assert _eof_within(proc.stdout.fileno(), 5.0) or group_kill_ends_it
            proc.stdout.close()

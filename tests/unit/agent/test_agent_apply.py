"""The executor end to end against the fake nvidia-smi, run as a subprocess exactly like the real
binary (no mocks): every outcome is terminal, and the fake's call log shows what was touched."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kit.migkit import config, dynamic, static
from tests.kit.smi_samples import FakeNode
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.agent.apply import Reason, observe, reconcile_gpus
from vgpu_operator.agent.smi import NvidiaSmi
from vgpu_operator.models.node import NodeConfig

Make = Callable[..., FakeNode]
MIXED = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def layout(node: FakeNode, gpu: int) -> Counter[int]:
    return Counter(gi["profile_id"] for gi in node.load()["gpus"][gpu]["gis"])


def mutating(node: FakeNode) -> list[list[str]]:
    """Calls that could change the hardware."""
    flags = {"-mig", "-r", "-cgi", "-cci", "-dci", "-dgi"}
    return [e["argv"] for e in node.log() if flags & set(e["argv"])]  # type: ignore[arg-type]


async def test_static_layout_on_a100_80gb_resets_each_gpu_once(fake_node: Make) -> None:
    """Nothing holds the GPUs: nvidia-smi resets each one itself when its mode changes."""
    node = fake_node("A100-SXM4-80GB", 2)
    desired = static({"profiles": MIXED})
    out = await reconcile_gpus(node.driver, desired, None)
    assert (out.state, out.reason) == ("success", Reason.APPLIED), out.message
    for i in (0, 1):
        assert layout(node, i) == {9: 1, 14: 1, 19: 2}
        assert all(len(gi["cis"]) == 1 for gi in node.load()["gpus"][i]["gis"])
    # Ampere: one reset of each GPU (by the driver, so the agent runs no `-r`)
    resets = [e["argv"] for e in node.log() if "-r" in e["argv"]]  # type: ignore[operator]
    assert resets == []
    assert node.count("reset") == 2
    assert out.inventory is not None and out.inventory.applied == desired
    assert all(g.mig_current and len(g.instances) == 4 for g in out.inventory.gpus)
    again = await reconcile_gpus(node.driver, desired, desired)
    assert (again.state, again.reason, again.steps_done) == ("success", Reason.UNCHANGED, 0)


async def test_static_layout_on_h100_needs_no_reset(fake_node: Make) -> None:
    node = fake_node("H100 80GB HBM3", 2)
    out = await reconcile_gpus(node.driver, static({"profiles": {"1g.10gb": 7}}), None)
    assert out.state == "success", out.message
    assert node.count("reset") == 0
    assert layout(node, 0) == layout(node, 1) == {19: 7}


async def test_the_order_that_fails_first_fit_is_applied(fake_node: Make) -> None:
    node = fake_node("A100-SXM4-40GB", 1, mig=True)
    env = {**os.environ, fs.ENV_STATE: str(node.state)}
    naive = subprocess.run(
        [str(node.binary), "mig", "-cgi", "19,19,14,9", "-C"], capture_output=True, env=env
    )
    # Insufficient Resources: the MIG user guide's "Example 2: Creation of a 3-2-1-1 geometry"
    # (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html)
    assert naive.returncode == 23
    fs.reboot(node.state)  # start clean: MIG on, no instances
    desired = static({"profiles": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}})
    out = await reconcile_gpus(node.driver, desired, None)
    assert out.state == "success", out.message
    assert layout(node, 0) == {19: 2, 14: 1, 9: 1}


async def test_dynamic_on_h200_turns_mig_on_and_then_leaves_instances_alone(
    fake_node: Make,
) -> None:
    node = fake_node("H200", 2)
    out = await reconcile_gpus(node.driver, dynamic(), None)
    assert out.state == "success", out.message
    assert all(g["mig_current"] and not g["gis"] for g in node.load()["gpus"])
    # the device plugin creates an instance for a pod; the agent must not touch it
    env = {**os.environ, fs.ENV_STATE: str(node.state)}
    subprocess.run([str(node.binary), "mig", "-i", "1", "-cgi", "9", "-C"], env=env, check=True)
    again = await reconcile_gpus(node.driver, dynamic(), dynamic())
    assert (again.state, again.reason) == ("success", Reason.UNCHANGED), again.message
    assert layout(node, 1) == {9: 1}
    assert node.count("destroyed_gi") == 0


async def test_switch_into_dynamic_removes_static_leftovers_once(fake_node: Make) -> None:
    node = fake_node("H200", 1)
    was = static({"profiles": {"3g.71gb": 2}})
    assert (await reconcile_gpus(node.driver, was, None)).state == "success"
    out = await reconcile_gpus(node.driver, dynamic(), was)
    assert out.state == "success", out.message
    assert node.count("destroyed_gi") == 2
    assert node.load()["gpus"][0]["mig_current"]


async def test_mig_to_hami_core_turns_mig_off(fake_node: Make) -> None:
    node = fake_node("A100-SXM4-80GB", 2)
    was = static({"profiles": {"7g.80gb": 1}})
    assert (await reconcile_gpus(node.driver, was, None)).state == "success"
    out = await reconcile_gpus(node.driver, config("hami-core"), was)
    assert out.state == "success", out.message
    assert all(not g["mig_current"] and not g["mig_pending"] for g in node.load()["gpus"])
    assert out.inventory is not None
    assert [g.mig_current for g in out.inventory.gpus] == [False, False]


async def test_in_use_gpu_is_blocked_and_nothing_is_destroyed(fake_node: Make) -> None:
    node = fake_node("H100 80GB HBM3", 2)
    was = static({"profiles": {"1g.10gb": 7}})
    assert (await reconcile_gpus(node.driver, was, None)).state == "success"
    fs.add_process(node.state, 0, 4242, "python train.py")
    before = len(node.log())
    out = await reconcile_gpus(node.driver, static({"profiles": {"3g.40gb": 2}}), was)
    assert out.state == "blocked"
    assert [(i, p.pid, p.name) for i, p in out.processes] == [(0, 4242, "python train.py")]
    assert "GPU 0 has running compute processes: python train.py (pid 4242)" in out.message
    calls = node.log()[before:]
    assert not any("-i" in c["argv"] and "0" in c["argv"] and "-dgi" in c["argv"] for c in calls)  # type: ignore[operator]
    assert layout(node, 0) == {19: 7}  # untouched
    assert layout(node, 1) == {9: 2}  # the free GPU was changed
    assert out.inventory is not None and out.inventory.applied == was  # not applied yet


async def test_reset_not_supported_fails_with_reboot_required(fake_node: Make) -> None:
    node = fake_node("A100-SXM4-80GB", 1)
    with fs.edit(node.state) as s:
        s["gpus"][0]["reset_supported"] = False  # GPU passthrough (NVIDIA/mig-parted#9)
    out = await reconcile_gpus(node.driver, dynamic(), None)
    assert (out.state, out.reason) == ("failed", Reason.REBOOT_REQUIRED)
    assert out.reason == "reboot required"
    assert "reset not supported" in out.message
    assert out.event_reason == "RebootRequired"
    g = node.load()["gpus"][0]
    assert (g["mig_current"], g["mig_pending"]) == (False, True)
    fs.reboot(node.state)  # the reboot makes the mode current; the agent then succeeds
    assert (await reconcile_gpus(node.driver, dynamic(), None)).state == "success"


async def test_reset_refused_by_another_client_fails_with_the_reason(fake_node: Make) -> None:
    node = fake_node("A100-SXM4-80GB", 1)
    with fs.edit(node.state) as s:
        s["gpus"][0]["reset_blocked_by"] = "nvidia-persistenced"
    out = await reconcile_gpus(node.driver, dynamic(), None)
    assert (out.state, out.reason) == ("failed", Reason.RESET_REFUSED)
    assert "in use by another client" in out.message


async def test_rtx_4090_in_mig_mode_fails_clearly_without_touching_it(fake_node: Make) -> None:
    node = fake_node("RTX 4090", 2)
    out = await reconcile_gpus(node.driver, dynamic(), None)
    assert (out.state, out.reason) == ("failed", Reason.NOT_MIG_CAPABLE)
    assert "GPU 0 (NVIDIA GeForce RTX 4090) is not MIG-capable" in out.message
    assert mutating(node) == []
    assert out.inventory is not None and not out.inventory.gpus[0].mig_capable


async def test_reboot_reapplies_the_static_layout(fake_node: Make) -> None:
    node = fake_node("A100-SXM4-80GB", 1)
    desired = static({"profiles": MIXED})
    assert (await reconcile_gpus(node.driver, desired, None)).state == "success"
    fs.reboot(node.state)
    assert layout(node, 0) == {}
    out = await reconcile_gpus(node.driver, desired, desired)
    assert out.state == "success", out.message
    assert layout(node, 0) == {9: 1, 14: 1, 19: 2}
    assert node.count("reset") == 1  # only the first enable; MIG mode survived the reboot


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("insufficient_resources", Reason.INSUFFICIENT),
        ("in_use", Reason.IN_USE),
        ("other", Reason.SMI),
    ],
)
async def test_injected_create_failures_end_failed(
    fake_node: Make, error: str, reason: Reason
) -> None:
    node = fake_node("H100 80GB HBM3", 1, mig=True)
    fs.inject(node.state, "-cgi", error)  # type: ignore[arg-type]
    out = await reconcile_gpus(node.driver, static({"profiles": MIXED}), None)
    assert (out.state, out.reason) == ("failed", reason), out.message
    assert out.inventory is not None  # still read back for the report
    retry = await reconcile_gpus(node.driver, static({"profiles": MIXED}), None)
    assert retry.state == "success", retry.message


async def test_destroy_refused_in_use_destroys_nothing(fake_node: Make) -> None:
    node = fake_node("H100 80GB HBM3", 1)
    was = static({"profiles": {"7g.80gb": 1}})
    assert (await reconcile_gpus(node.driver, was, None)).state == "success"
    fs.inject(node.state, "-dci", "in_use")
    out = await reconcile_gpus(node.driver, static({"profiles": {"3g.40gb": 2}}), was)
    assert (out.state, out.reason) == ("failed", Reason.IN_USE)
    assert layout(node, 0) == {0: 1}


async def test_a_hung_call_times_out_and_the_next_run_converges(fake_node: Make) -> None:
    node = fake_node("H100 80GB HBM3", 1, mig=True, timeout=2.0)
    fs.hang_at(node.state, "-cgi", skip=1, seconds=30)
    desired = static({"profiles": MIXED})
    started = time.monotonic()
    out = await reconcile_gpus(node.driver, desired, None)
    assert (out.state, out.reason) == ("failed", Reason.TIMEOUT)
    assert time.monotonic() - started < 20
    assert out.inventory is None  # a hung nvidia-smi is not asked again in this run
    again = await reconcile_gpus(node.driver, desired, None)
    assert again.state == "success", again.message
    assert layout(node, 0) == {9: 1, 14: 1, 19: 2}


AGENT = """
import asyncio, sys
from vgpu_operator.agent.apply import reconcile_gpus
from vgpu_operator.agent.smi import NvidiaSmi
from vgpu_operator.models.node import NodeConfig
desired = NodeConfig.from_annotation(sys.argv[2])
asyncio.run(reconcile_gpus(NvidiaSmi(sys.argv[1], timeout=600), desired, None))
"""


async def test_agent_killed_mid_apply_converges_on_restart(fake_node: Make) -> None:
    node = fake_node("A100-SXM4-80GB", 2)
    desired = static({"profiles": MIXED})
    fs.hang_at(node.state, "-cgi", skip=5)  # GPU 0 done, GPU 1 half way
    env = {**os.environ, fs.ENV_STATE: str(node.state)}
    assert isinstance(desired, NodeConfig)
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT, str(node.binary), desired.to_annotation()],
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not any("hang" in e for e in node.log()):
            assert time.monotonic() < deadline and agent.poll() is None
            await asyncio.sleep(0.1)
    finally:
        os.killpg(agent.pid, signal.SIGKILL)  # the agent ...
        agent.wait()
        fs.kill_strays(node.state)  # ... and the nvidia-smi it waited for (its own group)
    assert layout(node, 1) != {9: 1, 14: 1, 19: 2}  # really interrupted half way
    created_before = node.count("created_gi")
    driver = NvidiaSmi(str(node.binary), env={fs.ENV_STATE: str(node.state)})
    out = await reconcile_gpus(driver, desired, None)
    assert out.state == "success", out.message
    assert layout(node, 0) == layout(node, 1) == {9: 1, 14: 1, 19: 2}
    assert node.count("destroyed_gi") == 0  # what was created before the kill was kept
    assert node.count("created_gi") - created_before == 3  # only the missing ones


async def test_missing_binary_is_a_terminal_failure(tmp_path: Path) -> None:
    driver = NvidiaSmi(str(tmp_path / "no-such-nvidia-smi"))
    out = await reconcile_gpus(driver, dynamic(), None)
    assert (out.state, out.reason) == ("failed", Reason.OBSERVE)
    assert "cannot run" in out.message


async def test_no_configuration_changes_nothing(fake_node: Make) -> None:
    node = fake_node("A30", 1, mig=True)
    out = await reconcile_gpus(node.driver, None, None)
    assert (out.state, out.reason) == ("success", Reason.NO_CONFIG)
    assert mutating(node) == []


async def test_observe_reports_profiles_and_falls_back_to_the_catalog(fake_node: Make) -> None:
    node = fake_node("A30", 2, driver_version="535.161.08")  # lists no profiles with MIG off
    inv = await observe(node.driver)
    assert [g.profiles_source for g in inv.gpus] == ["catalog", "catalog"]
    assert await reconcile_gpus(node.driver, static({"profiles": {"2g.12gb": 2}}), None)
    inv = await observe(node.driver)
    assert [g.profiles_source for g in inv.gpus] == ["driver", "driver"]
    g = inv.gpus[0]
    assert (g.model, g.memory_mib, g.mig_current) == ("A30", 24576, True)
    assert {p.name: (p.id, p.placements) for p in g.profiles}["2g.12gb"] == (5, [0, 2])
    assert [(gi.name, gi.start, len(gi.cis)) for gi in g.instances] == [
        ("2g.12gb", 0, 1),
        ("2g.12gb", 2, 1),
    ]


def test_binary_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VGPU_NVIDIA_SMI", "/opt/nvidia/bin/nvidia-smi")
    assert NvidiaSmi().binary == "/opt/nvidia/bin/nvidia-smi"
    assert NvidiaSmi("/usr/bin/nvidia-smi").binary == "/usr/bin/nvidia-smi"
    monkeypatch.delenv("VGPU_NVIDIA_SMI")
    assert NvidiaSmi().binary == "nvidia-smi"


async def test_every_call_has_a_timeout(tmp_path: Path) -> None:
    slow = tmp_path / "nvidia-smi"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    started = time.monotonic()
    out = await reconcile_gpus(NvidiaSmi(str(slow), timeout=0.5), dynamic(), None)
    assert (out.state, out.reason) == ("failed", Reason.TIMEOUT)
    assert time.monotonic() - started < 10


async def test_unexpected_errors_still_end_failed(fake_node: Make) -> None:
    node = fake_node("H100 80GB HBM3", 1)

    def explode(step: object) -> None:
        raise RuntimeError("boom")

    out = await reconcile_gpus(node.driver, dynamic(), None, on_step=explode)
    assert (out.state, out.reason, out.message) == ("failed", Reason.INTERNAL, "RuntimeError: boom")


def test_a30_instance_counts_come_from_the_table() -> None:
    # NVML reports wrong InstanceCount for some A30 profiles; mig-parted hardcodes them
    # (NVIDIA/mig-parted@v0.15.0:pkg/mig/discovery/discovery.go `getHardcodedA30Profiles`)
    from vgpu_operator.agent.observe import _profiles
    from vgpu_operator.agent.parse import GpuRow, PlacementRow, ProfileRow
    from vgpu_operator.models.gpu_catalog import MIG_MODELS

    row = GpuRow(0, "GPU-x", "NVIDIA A30", "00000000:07:00.0", 24576, True, True)
    found = [ProfileRow(0, "1g.6gb", 14, 1, 1, 5.81, False, 14, 1, 0)]  # the driver says 1
    where = [PlacementRow(0, 14, (0, 1, 2, 3), 1)]
    (profile,), source = _profiles(row, MIG_MODELS["A30"], found, where)
    assert (profile.count, profile.placements, source) == (4, [0, 1, 2, 3], "driver")

"""Smaller real-hardware behaviours: Hopper loses MIG mode on a reset or reboot (so the agent never
resets it and says so), compute processes of other PID namespaces, and how a process nvidia-smi
cannot name (`[Not Found]`) is reported."""

from __future__ import annotations

from collections.abc import Callable

from tests.kit.migkit import config, dynamic, static
from tests.kit.smi_samples import FakeNode
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.agent.apply import Reason, reconcile_gpus
from vgpu_operator.agent.smi import NvidiaSmi

Make = Callable[..., FakeNode]
LAYOUT = static({"profiles": {"1g.20gb": 4}})


def in_namespace(fake: FakeNode, namespace: str) -> NvidiaSmi:
    """The agent's nvidia-smi run from a PID namespace of its own (no hostPID)."""
    env = {fs.ENV_STATE: str(fake.state), fs.ENV_PID_NAMESPACE: namespace}
    return NvidiaSmi(str(fake.binary), env=env)


async def test_hopper_pending_mode_is_not_reset_and_the_message_says_why(fake_node: Make) -> None:
    # https://github.com/NVIDIA/gpu-admin-tools/issues/2: on H100 MIG mode "is all gone by the
    # time the VM is gone and GPU resets", so a reset cannot apply a pending enable
    fake = fake_node("H100 80GB HBM3", 1)
    with fs.edit(fake.state) as s:
        s["gpus"][0]["reset_blocked_by"] = "nvidia-persistenced"
    out = await reconcile_gpus(fake.driver, dynamic(), None)
    assert (out.state, out.reason) == ("failed", Reason.HELD), out.message
    assert "clears MIG mode" in out.message and "reboot the node" not in out.message
    assert fake.calls("-r") == 0
    # the client goes away: the retry asks for the mode again (no reset) and it applies
    with fs.edit(fake.state) as s:
        s["gpus"][0]["reset_blocked_by"] = ""
    again = await reconcile_gpus(fake.driver, dynamic(), None)
    assert again.state == "success", again.message
    assert fake.calls("-r") == 0 and fake.calls("-mig") == 2


async def test_hopper_after_a_reboot_gets_mig_and_its_layout_again(fake_node: Make) -> None:
    fake = fake_node("H100 80GB HBM3", 1)
    assert (await reconcile_gpus(fake.driver, LAYOUT, None)).state == "success"
    fs.reboot(fake.state)  # MIG mode is gone with the instances
    assert fake.load()["gpus"][0]["mig_current"] is False
    out = await reconcile_gpus(fake.driver, LAYOUT, LAYOUT)  # the agent's resync after boot
    assert (out.state, out.reason) == ("success", Reason.APPLIED), out.message
    assert fake.calls("-mig") == 2 and fake.count("created_gi") == 8


async def test_ampere_unresettable_pending_mode_asks_for_a_reboot(fake_node: Make) -> None:
    # Ampere keeps a pending mode over a reboot and applies it then (NVIDIA/gpu-operator#2603:
    # "MIG mode survives a reboot on Ampere via an InfoROM status bit"): the message
    # says to reboot; Hopper's would not (above)
    fake = fake_node("A100 80GB PCIe", 1)
    with fs.edit(fake.state) as s:
        s["gpus"][0]["reset_supported"] = False
    out = await reconcile_gpus(fake.driver, dynamic(), None)
    assert (out.state, out.reason) == ("failed", Reason.REBOOT_REQUIRED)
    assert "reboot the node to apply MIG mode enable" in out.message


async def test_a_process_of_another_pid_namespace_is_seen_only_from_the_hosts(
    fake_node: Make,
) -> None:
    fake = fake_node("H100 80GB HBM3", 2)
    assert (await reconcile_gpus(fake.driver, LAYOUT, None)).state == "success"
    fs.add_process(fake.state, 0, 50983, "python train.py", namespace="pod-a")
    change = static({"profiles": {"3g.40gb": 2}})
    # from the host's PID namespace (the chart's hostPID: true): GPU 0 is blocked
    out = await reconcile_gpus(fake.driver, change, LAYOUT)
    assert out.state == "blocked" and "python train.py (pid 50983)" in out.message
    assert fake.count("destroyed_gi") == 4  # GPU 1 only
    # from a PID namespace of its own the same GPU looks idle: the agent would destroy the
    # instances under the running process (here the driver refuses: the process holds one)
    fs.add_process(fake.state, 1, 50984, "python eval.py", namespace="pod-b")
    before = len(fake.log())
    blind = await reconcile_gpus(in_namespace(fake, "agent"), LAYOUT, change)
    assert blind.processes == () and blind.state == "failed"  # not `blocked`: it did not know
    tried = [e["argv"] for e in fake.log()[before:] if "-dci" in e["argv"]]  # type: ignore[operator]
    assert tried and all(argv[:3] == ["mig", "-i", "1"] for argv in tried)  # type: ignore[index]


async def test_a_process_nvidia_smi_cannot_name_is_reported_by_its_host_pid(
    fake_node: Make,
) -> None:
    # reconstructed from the public captures the review quotes ("50983, [Not Found]")
    fake = fake_node("H100 80GB HBM3", 1, mig=True)
    with fs.edit(fake.state) as s:
        s["foreign_processes"] = "not_found"
    fs.add_process(fake.state, 0, 50983, "python train.py", namespace="pod-a")
    out = await reconcile_gpus(in_namespace(fake, "agent"), config("hami-core"), None)
    assert out.state == "blocked"
    assert "compute process, host pid 50983" in out.message and "[Not Found]" not in out.message

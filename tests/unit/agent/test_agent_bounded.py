"""Every nvidia-smi call ends within a bound, its kill included (agent.smi), against the fake's
hangs that keep the output pipe open from a child: a `child` in the call's process group (the
group kill ends it) and a `detached` one (nothing the agent can kill: the call cannot be ended,
the GPU is marked unhealthy and the outcome is still final)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from tests.kit.migkit import static
from tests.kit.smi_samples import FakeNode
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.agent.apply import Reason, reconcile_gpus
from vgpu_operator.agent.smi import NvidiaSmi

Make = Callable[..., FakeNode]
LAYOUT = static({"profiles": {"3g.40gb": 2}})


def bounded(fake: FakeNode) -> NvidiaSmi:
    return NvidiaSmi(
        str(fake.binary), timeout=1.0, kill_grace=1.0, env={fs.ENV_STATE: str(fake.state)}
    )


async def test_a_killed_call_whose_child_holds_stdout_ends_with_its_group(fake_node: Make) -> None:
    fake = fake_node("H100 80GB HBM3", 1, mig=True)
    fs.hang_at(fake.state, "-cgi", seconds=60, mode="child")
    driver = bounded(fake)
    started = time.monotonic()
    out = await reconcile_gpus(driver, LAYOUT, None)
    assert (out.state, out.reason) == ("failed", Reason.TIMEOUT), out.message
    assert time.monotonic() - started < 10  # timeout 1 s + kill grace 1 s, not the 60 s hang
    assert driver.stuck == []
    assert fs.kill_strays(fake.state) == 0  # the group kill ended the call and its child
    again = await reconcile_gpus(driver, LAYOUT, None)
    assert again.state == "success", again.message


async def test_a_call_that_cannot_be_ended_marks_the_gpu_unhealthy(fake_node: Make) -> None:
    fake = fake_node("H100 80GB HBM3", 2, mig=True)
    fs.hang_at(fake.state, "-cgi", skip=2, seconds=60, mode="detached")  # GPU 1's first create
    driver = bounded(fake)
    try:
        started = time.monotonic()
        out = await reconcile_gpus(driver, LAYOUT, None)
        assert time.monotonic() - started < 15
        assert (out.state, out.reason) == ("failed", Reason.UNHEALTHY), out.message
        assert "stuck in the driver" in out.message and "GPU 1" in out.message
        assert out.inventory is not None  # a final report, with the GPU marked
        assert [g.unhealthy is not None for g in out.inventory.gpus] == [False, True]
        assert len(driver.stuck) == 1
        # while it runs, no further nvidia-smi is started: every run fails at once
        calls = driver.calls
        quick = await reconcile_gpus(driver, LAYOUT, None)
        assert (quick.state, quick.reason) == ("failed", Reason.UNHEALTHY)
        assert "could not be ended" in quick.message and driver.calls == calls
    finally:
        fs.kill_strays(fake.state)  # what a reboot would end
    for _ in range(50):  # the pipe closes once the holder is gone
        if not driver.stuck:
            break
        await asyncio.sleep(0.1)
    assert driver.stuck == []
    again = await reconcile_gpus(driver, LAYOUT, None)
    assert again.state == "success", again.message


async def test_cancelling_an_action_during_a_hung_call_is_bounded(fake_node: Make) -> None:
    fake = fake_node("H100 80GB HBM3", 1, mig=True)
    fs.hang_at(fake.state, "-cgi", seconds=60, mode="child")
    driver = NvidiaSmi(
        str(fake.binary), timeout=600, kill_grace=1.0, env={fs.ENV_STATE: str(fake.state)}
    )
    task = asyncio.create_task(reconcile_gpus(driver, LAYOUT, None))
    deadline = time.monotonic() + 30
    while not any("hang" in e for e in fake.log()) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)  # the fake is another process: its log is all there is
    await asyncio.sleep(0.2)
    started = time.monotonic()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=10)
    assert done and task.cancelled()
    assert time.monotonic() - started < 5
    assert fs.kill_strays(fake.state) == 0

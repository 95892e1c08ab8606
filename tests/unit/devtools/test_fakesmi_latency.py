"""The fake nvidia-smi's latency knob (vgpu_devcluster.fakesmi_latency), for the benchmarks: each
call the agent makes (the argument lists of agent.smi) falls in its kind; a call of a kind takes
that kind's seconds and a call of another kind does not; unset, the fake answers at once; a bad
value is refused naming the item and the form."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.fakesmi_latency import ENV_LATENCY, REALISTIC, SmiLatency, kind_of

# the argument lists agent.smi builds, by the kind they belong to
CALLS = {
    "query": [
        ["--query-gpu=index,uuid,name", "--format=csv,noheader,nounits", "-i", "0"],
        ["--query-compute-apps=gpu_bus_id,pid", "--format=csv,noheader,nounits"],
        ["-L"],
        ["mig", "-i", "0", "-lgip"],
        ["mig", "-lgipp"],
        ["mig", "-i", "0", "-lgi"],
        ["mig", "-i", "0", "-lci"],
        ["mig", "-i", "0", "-gi", "1", "-lcip"],
    ],
    "mode": [["-i", "0", "-mig", "1"], ["-i", "0", "-mig", "0"], ["-i", "0", "-r"]],
    "create": [
        ["mig", "-i", "0", "-cgi", "9:4", "-C"],
        ["mig", "-i", "0", "-gi", "1", "-cci", "0"],
    ],
    "destroy": [
        ["mig", "-i", "0", "-gi", "1", "-dci"],
        ["mig", "-i", "0", "-gi", "1", "-ci", "0", "-dci"],
        ["mig", "-i", "0", "-gi", "1", "-dgi"],
    ],
}


@pytest.mark.parametrize(("kind", "argv"), [(k, a) for k, calls in CALLS.items() for a in calls])
def test_each_call_of_the_agent_has_its_kind(kind: str, argv: list[str]) -> None:
    assert kind_of(argv) == kind
    assert SmiLatency(**{kind: 2.5}).of(argv) == 2.5
    assert SmiLatency().of(argv) == 0.0


def test_the_text_form_round_trips_and_kinds_left_out_take_none() -> None:
    assert SmiLatency.parse(REALISTIC.text()) == REALISTIC
    assert SmiLatency.parse("mode=3") == SmiLatency(mode=3.0)
    assert SmiLatency.from_env({ENV_LATENCY: "create=0.5, destroy=0.25"}) == SmiLatency(
        create=0.5, destroy=0.25
    )
    assert SmiLatency.from_env({}) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("reset=1", "'reset=1': write kind=seconds with kind one of create, destroy, mode, query"),
        ("mode", "'mode': write kind=seconds"),
        ("mode=slow", "'mode=slow': 'slow' is not a number"),
        ("query=-1", "SmiLatency.query: -1.0 is negative"),
    ],
)
def test_a_bad_value_names_the_item_and_the_form(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        SmiLatency.parse(text)


def run_fake(tmp_path: Path, latency: str | None, *argv: str) -> tuple[float, int, str]:
    state = tmp_path / "gpus.json"
    if not state.exists():
        fs.init_state(state, "A100-SXM4-80GB", 1, node="n")
    binary = fs.write_wrapper(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != ENV_LATENCY}
    env[fs.ENV_STATE] = str(state)
    if latency is not None:
        env[ENV_LATENCY] = latency
    began = time.monotonic()
    done = subprocess.run([str(binary), *argv], env=env, capture_output=True, text=True, timeout=30)
    return time.monotonic() - began, done.returncode, done.stdout + done.stderr


def test_the_fake_takes_the_seconds_of_the_calls_kind_only(tmp_path: Path) -> None:
    quick, rc, _ = run_fake(tmp_path, None, "-i", "0", "-mig", "1")
    assert rc == 0
    slow, rc, out = run_fake(tmp_path, "mode=1.5", "-i", "0", "-mig", "0")
    assert rc == 0 and "Disabled MIG Mode for GPU" in out  # it acted, then waited
    assert slow >= 1.5 > quick
    other, rc, _ = run_fake(tmp_path, "mode=1.5", "--query-gpu=index", "--format=csv")
    assert rc == 0 and other < 1.5
    assert fs.load(tmp_path / "gpus.json")["gpus"][0]["mig_current"] is False


def test_the_fake_refuses_a_bad_latency_naming_it(tmp_path: Path) -> None:
    _, rc, out = run_fake(tmp_path, "mode=soon", "-L")
    assert rc == 2
    assert "fake nvidia-smi: smi latency 'mode=soon': 'soon' is not a number" in out

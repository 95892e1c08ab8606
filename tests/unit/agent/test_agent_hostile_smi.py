"""Property: whatever `nvidia-smi` prints, the agent's action ends and the node gets a final
state. The driver here answers each call as the simulated nvidia-smi would (devcluster.fakesmi,
in memory), and hypothesis replaces or mutates some of those answers: lines cut or dropped,
numbers replaced by huge, negative or non-numeric ones, `[N/A]`, free text, nothing."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kit.memapi import MemoryNodeApi
from vgpu_devcluster import fakesmi
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator import contract
from vgpu_operator.agent.loop import Agent
from vgpu_operator.agent.smi import NvidiaSmi, SmiError, SmiResult, classify
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.node import NodeConfig

RELEASED = [
    None,
    NodeConfig(mode="hami-core", policy="p", generation=1).to_annotation(),
    NodeConfig(mode="whole-gpu", policy="p", generation=1).to_annotation(),
    NodeConfig(mode="mig", policy="p", generation=1).to_annotation(),
    NodeConfig.model_validate(
        {
            "mode": "mig",
            "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]},
        }
    ).to_annotation(),
    '{"mode": "mig", "mig": ',  # a malformed release: failed, with the reason
]
_NUMBER = re.compile(r"\d+")


def mutate(text: str, how: int, seed: int) -> str:
    lines = text.splitlines()
    k = seed % max(1, len(lines))
    if how == 0:  # a line dropped
        return "\n".join(lines[:k] + lines[k + 1 :])
    if how == 1:  # cut in the middle
        return text[: seed % max(1, len(text))]
    if how == 2:  # every number something else
        other = ["99999999999999999999999", "-1", "x", "[N/A]", "1e9", ""][seed % 6]
        return _NUMBER.sub(other, text)
    if how == 3:  # one number something else
        found = list(_NUMBER.finditer(text))
        if not found:
            return text
        m = found[seed % len(found)]
        return text[: m.start()] + ["-5", "4294967295", "NaN", "0x1f"][seed % 4] + text[m.end() :]
    if how == 4:  # fields shifted
        return "\n".join(ln.replace(",", ",,", 1) for ln in lines)
    return ["", "ERR!", "\x00\xff garbage", "Unknown Error", "[N/A]"][seed % 5]


class HostileSmi(NvidiaSmi):
    """nvidia-smi answered in memory by the simulated one, some answers spoiled."""

    def __init__(self, state: fs.NodeState, data: st.DataObject) -> None:
        super().__init__("nvidia-smi", timeout=5)
        self.state = state
        self.data = data

    async def run(self, *args: str, timeout: float | None = None, check: bool = True) -> SmiResult:
        del timeout
        self.calls += 1
        argv = (self.binary, *args)
        try:
            result = fakesmi.execute(self.state, args, None)
            out, rc = result.out, result.rc
        except (fakesmi.Usage, LookupError, ValueError) as exc:
            out, rc = str(exc), 2
        spoil = self.data.draw(st.integers(0, 9), label=f"spoil {' '.join(args)[:40]}")
        if spoil >= 6:  # four calls in ten answered with something else
            how = self.data.draw(st.integers(0, 5), label="how")
            seed = self.data.draw(st.integers(0, 2**16), label="seed")
            out = mutate(out, how, seed)
            if self.data.draw(st.booleans(), label="rc"):
                rc = self.data.draw(st.sampled_from([0, 1, 2, 3, 6, 9, 15, 255]), label="code")
        res = SmiResult(argv, rc, out, "")
        if check and rc != 0:
            raise SmiError(classify(res.output), argv, rc, res.output)
        return res


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=st.data(),
    model=st.sampled_from(["A100-SXM4-80GB", "H100 80GB HBM3", "A30", "RTX 4090"]),
    count=st.integers(1, 3),
    mig=st.booleans(),
    released=st.sampled_from(RELEASED),
)
def test_whatever_nvidia_smi_prints_the_node_gets_a_final_state(
    data: st.DataObject,
    model: str,
    count: int,
    mig: bool,
    released: str | None,
    tmp_path_factory: Any,
) -> None:
    path = tmp_path_factory.mktemp("smi") / "state.json"
    state = fs.init_state(path, model, count, mig=mig)
    annotations = {contract.ANN_CONFIG: released} if released is not None else {}
    api = MemoryNodeApi("n1", annotations)
    agent = Agent(api, HostileSmi(state, data))  # type: ignore[arg-type]

    outcome = asyncio.run(agent.act("start"))

    assert outcome is not None and outcome.state in ("success", "failed", "blocked")
    if released is not None:
        assert api.state == outcome.state  # the final state is on the node
    inventory = api.annotation(contract.ANN_INVENTORY)
    if inventory is not None:
        Inventory.model_validate(json.loads(inventory))

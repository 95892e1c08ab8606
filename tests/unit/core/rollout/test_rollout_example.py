"""examples/dedicated-vgpu-pool does what its comments say, run through the rollout's core."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.kit.nodekit import policy
from tests.kit.rollout_world import World, pods
from vgpu_operator import contract

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "dedicated-vgpu-pool" / "policy.yaml"


def example_spec(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())["spec"]
    spec.update(changes)
    return spec


def pool(count: int) -> World:
    w = World.pool(count, prefix="gpu-")
    for raw in w.nodes.values():
        labels = raw["metadata"]["labels"]
        labels.update({"node-pool": "vgpu", contract.GFD_PRESENT: "true"})
    w.configure(example_spec())
    w.plugins_register()
    return w


def test_a_split_count_change_goes_to_ten_percent_of_the_pool_without_cordon() -> None:
    w = pool(20)
    assert w.released("hami-core") == sorted(w.nodes)
    w.set_policy("pool", example_spec(hamiCore={"deviceSplitCount": 5}), generation=2)
    seen = w.settle(passes=100)
    assert max(len(s) for s in seen) == 2  # 10% of 20
    assert not any(w.cordoned(n) for n in w.nodes)
    assert all(w.config(n).hami_core.device_split_count == 5 for n in w.nodes)  # type: ignore[union-attr]


def test_a_mode_change_cordons_evicts_and_keeps_a_failed_node_cordoned() -> None:
    w = pool(10)
    w.pods["gpu-0"] = pods("gpu-0", "train")
    spec = example_spec(mode="mig", hamiCore=None)
    del spec["hamiCore"]
    w.set_policy("pool", spec, generation=2)
    w.run()
    assert w.in_transition() == ["gpu-0"] and w.cordoned("gpu-0")  # 10% of 10: one node
    w.run()
    assert w.evicted == ["team/train"]
    w.run()  # drained: paused
    w.run()  # released
    assert w.released("mig") == ["gpu-0"]
    w.agent("gpu-0", "failed")
    w.run()
    r = w.rollout("gpu-0")
    assert r is not None and r.reason == "AgentFailed" and w.cordoned("gpu-0")  # KeepCordoned
    for _ in range(5):
        w.run()
    assert w.in_transition() == ["gpu-0"]  # no new nodes until the spec changes


def test_deleting_the_policy_gives_idle_nodes_back_at_once_and_drains_busy_ones() -> None:
    w = pool(20)
    busy = [f"gpu-{i}" for i in range(5)]
    for name in busy:
        w.pods[name] = pods(name, f"job-{name}")
    w.policies = [policy("pool", example_spec(), deleting=True)]
    w.run()
    idle = [n for n in w.nodes if n not in busy]
    assert not any(contract.LABEL_POLICY in w.labels(n) or w.cordoned(n) for n in idle)
    assert sorted(n for n in busy if w.cordoned(n)) == ["gpu-0", "gpu-1"]  # 10% of 20
    seen = w.settle(passes=100)
    assert max(len(s) for s in seen) <= 2
    assert not any(contract.LABEL_POLICY in w.labels(n) or w.cordoned(n) for n in w.nodes)
    assert sorted(w.evicted) == sorted(f"team/job-{n}" for n in busy)

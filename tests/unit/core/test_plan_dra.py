"""`plan` shows a pool's move to DRA like any other transition (core.plan): the nodes' mode change
and why it is disruptive, the rollout's waves under maxUnavailable, the DRA kubelet plugin's
placement PATCH; and, without the operator config's `dra` section, the refusal naming the fix."""

from __future__ import annotations

from dataclasses import replace

from tests.kit.drakit import kubelet_plugin_daemonset
from tests.kit.nodekit import policy
from tests.kit.plan_world import A100_POOL, LATER, a100_cluster, run
from vgpu_operator import contract
from vgpu_operator.models.config import load_config

DRA_POOL = {**A100_POOL, "mode": "dra"}
WITH_DRA = load_config("gpuMemoryFactor: 11\ndra: {}\n")


def test_a_hami_core_pool_moving_to_dra_is_planned_as_a_disruptive_transition() -> None:
    steady, _ = a100_cluster()
    s = replace(
        steady, config=WITH_DRA, daemonsets=[*steady.daemonsets, kubelet_plugin_daemonset()]
    )
    p = run(s, [policy("a100-pool", DRA_POOL)], LATER)
    moves = {n.node: n for n in p.nodes}
    assert sorted(moves) == ["a100-0", "a100-1", "a100-2"]
    for change in moves.values():
        assert (change.old_mode, change.new_mode) == ("hami-core", "dra")
        assert change.change == "disruptive" and change.disruptive == "mode hami-core -> dra"
    assert moves["a100-0"].gpu_pods == ("team-a/train-0",)
    assert moves["a100-0"].step is not None and "cordon" in moves["a100-0"].step
    first = p.rollout[0]
    assert first.now and len(first.nodes) == 2  # maxUnavailable 2
    assert sorted(n for w in p.rollout for n in w.nodes) == ["a100-0", "a100-1", "a100-2"]
    placed = [w for w in p.workloads if w.name == "dra-driver-nvidia-gpu-kubelet-plugin"]
    assert [w.body["spec"] for w in placed] == [
        {"template": {"spec": {"nodeSelector": {contract.LABEL_DEVICE_PLUGIN: "dra"}}}}
    ]


def test_without_the_dra_section_the_move_is_refused_and_nothing_is_written() -> None:
    steady, _ = a100_cluster()
    p = run(steady, [policy("a100-pool", DRA_POOL)], LATER)
    assert not p.changes
    assert any("DraDriverCannotServe" in note and "`dra` section" in note for note in p.notes)

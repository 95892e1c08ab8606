"""What the agent makes of a dra node's released configuration (core.mig.layout): whole GPUs turn
MIG off as whole-gpu does, a static-mig pool gets its layout applied as mig mode's static layout
(the driver publishes the MIG devices it finds), dynamic-mig only turns MIG on (the driver owns
the instances); the partition planner then plans the same steps as for mode mig."""

from __future__ import annotations

from tests.kit.migkit import config, gpu, node
from vgpu_operator.core.mig.layout import effective_mig, resolve_targets
from vgpu_operator.core.mig.partition import plan_node

LAYOUT = {"gpus": "all", "profiles": {"3g.20gb": 2}}
TWO_A100 = node(gpu("A100-SXM4-40GB", 0, mig=True), gpu("A100-SXM4-40GB", 1, mig=True))


def test_whole_gpus_of_a_dra_pool_turn_mig_off_like_whole_gpu() -> None:
    dra = config("dra")
    targets, errors, _ = resolve_targets(TWO_A100, dra, None)
    assert not errors and effective_mig(dra) is None
    assert [(t.index, t.mig, t.clear) for t in targets] == [(0, False, True), (1, False, True)]
    assert targets == resolve_targets(TWO_A100, config("whole-gpu"), None)[0]


def test_a_static_mig_dra_pool_gets_the_same_steps_as_mig_modes_static_layout() -> None:
    dra = config("dra", partitioning="static", layout=[LAYOUT])
    mig = config("mig", partitioning="static", layout=[LAYOUT])
    dra_targets, errors, _ = resolve_targets(TWO_A100, dra, None)
    assert not errors and dra_targets == resolve_targets(TWO_A100, mig, None)[0]
    assert all(t.profiles == {"3g.20gb": 2} for t in dra_targets)
    assert plan_node(TWO_A100, dra, None).steps == plan_node(TWO_A100, mig, None).steps


def test_dynamic_mig_of_a_dra_pool_only_turns_mig_on() -> None:
    dra = config("dra", partitioning="dynamic")
    targets, errors, _ = resolve_targets(TWO_A100, dra, None)
    assert not errors and all(t.mig is True and t.profiles is None for t in targets)

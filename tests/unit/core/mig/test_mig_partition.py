"""The pure MIG planner (core.mig.partition): table tests of the issue's scenarios, plus
properties."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kit.migkit import config, dynamic, gpu, node, simulate, static
from vgpu_operator.core.mig.partition import StepKind, plan_node
from vgpu_operator.core.mig.place import feasible, geometry_of_model
from vgpu_operator.core.mig.verify import verify
from vgpu_operator.models.gpu_catalog import MIG_MODELS

A100_80 = "A100-SXM4-80GB"
A100_40 = "A100-SXM4-40GB"
H100 = "H100 80GB HBM3"
SEVEN_1G = [("1g.10gb", s) for s in range(7)]


def kinds(plan: object) -> list[str]:
    return [str(s.kind) for s in plan.steps]  # type: ignore[attr-defined]


def test_gpus_already_right_get_no_steps() -> None:
    inv = node(*(gpu(A100_80, i, instances=SEVEN_1G) for i in range(8)))
    desired = static({"gpus": "all", "profiles": {"1g.10gb": 7}})
    plan = plan_node(inv, desired, desired)
    assert plan.ok
    assert plan.steps == ()
    assert verify(inv, desired, desired) == []


def test_change_one_gpu_of_eight_touches_only_that_gpu() -> None:
    inv = node(*(gpu(A100_80, i, instances=SEVEN_1G) for i in range(8)))
    before = static({"gpus": "all", "profiles": {"1g.10gb": 7}})
    after = static(
        {"gpus": "all", "profiles": {"1g.10gb": 7}},
        {"gpus": [3], "profiles": {"3g.40gb": 1, "1g.10gb": 4}},
    )
    plan = plan_node(inv, after, before)
    assert {s.gpu for s in plan.steps} == {3}
    # 3g.40gb needs four free memory slices at 0 or 4: three 1g instances go, four stay.
    destroyed = [s for s in plan.steps if s.kind == StepKind.DESTROY_GI]
    assert len(destroyed) == 3
    assert not any(s.kind in (StepKind.SET_MODE, StepKind.RESET) for s in plan.steps)
    assert verify(simulate(inv, plan), after, before) == []


def test_matching_instances_are_kept_and_the_right_one_goes() -> None:
    # 3g@0 + 3g@4 -> {3g:1, 2g:1, 1g:2}: only keeping the 3g at slice 4 leaves room for the rest
    inv = node(gpu(A100_80, instances=[("3g.40gb", 0), ("3g.40gb", 4)]))
    desired = static({"profiles": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}})
    (gp,) = plan_node(inv, desired, None).gpus
    kept = [g for g in inv.gpus[0].instances if g.id in gp.kept]
    assert [(g.name, g.start) for g in kept] == [("3g.40gb", 4)]
    assert [s.gi for s in gp.steps if s.kind == StepKind.DESTROY_GI] == [1]
    assert verify(simulate(inv, plan_node(inv, desired, None)), desired, None) == []


def test_creation_is_largest_first_with_explicit_placements() -> None:
    # on A100-40GB 19,19,14,9 fails first-fit ("Example 2: Creation of a 3-2-1-1 geometry" in
    # https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html);
    # the planner places 3g first, at 4.
    inv = node(gpu(A100_40))
    desired = static({"profiles": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}})
    plan = plan_node(inv, desired, None)
    created = [(s.profile, s.start) for s in plan.steps if s.kind == StepKind.CREATE_GI]
    assert created == [("3g.20gb", 4), ("2g.10gb", 0), ("1g.5gb", 2), ("1g.5gb", 3)]
    assert verify(simulate(inv, plan), desired, None) == []


@pytest.mark.parametrize("mode", ["hami-core", "whole-gpu"])
def test_leaving_mig_turns_mig_mode_off(mode: str) -> None:
    inv = node(gpu(A100_80, instances=[("3g.40gb", 0), ("3g.40gb", 4)]), gpu("RTX 4090", 1))
    plan = plan_node(inv, config(mode), static({"profiles": {"3g.40gb": 2}}))
    assert kinds(plan) == [
        "destroy-ci",
        "destroy-gi",
        "destroy-ci",
        "destroy-gi",
        "set-mig-mode",
    ]
    assert plan.steps[-1].enable is False
    assert {s.gpu for s in plan.steps} == {0}  # the RTX 4090 is not MIG-capable: left alone
    assert verify(simulate(inv, plan), config(mode), None) == []


def test_dynamic_after_static_removes_leftovers_only_at_the_switch() -> None:
    inv = node(gpu(H100, instances=[("3g.40gb", 4), ("2g.20gb", 0)]))
    was_static = static({"profiles": {"3g.40gb": 1, "2g.20gb": 1}})
    switch = plan_node(inv, dynamic(), was_static)
    assert kinds(switch) == ["destroy-ci", "destroy-gi", "destroy-ci", "destroy-gi"]
    assert verify(simulate(inv, switch), dynamic(), was_static) == []
    # afterwards the device plugin owns the instances: the same hardware, no steps
    assert plan_node(inv, dynamic(), dynamic()).steps == ()
    # the same holds when the plugin made other instances since
    busy = node(gpu(H100, instances=[("1g.10gb", 6)]))
    assert plan_node(busy, dynamic(), dynamic()).steps == ()


def test_dynamic_on_a_node_set_up_by_hand_keeps_the_plugins_instances() -> None:
    # seed 001: MIG turned on by hand, HAMi's plugin made instances for running pods; no agent
    # ever applied anything (previous None): nothing is destroyed, and that verifies
    inv = node(gpu(A100_80, instances=[("3g.40gb", 0), ("1g.10gb", 4)]))
    assert plan_node(inv, dynamic(), None).steps == ()
    assert verify(inv, dynamic(), None) == []


def test_dynamic_on_a_fresh_node_turns_mig_on() -> None:
    inv = node(gpu("H200", mig=False), gpu("H200", 1, mig=False))
    plan = plan_node(inv, dynamic(), None)
    assert [(s.gpu, str(s.kind), s.enable) for s in plan.steps] == [
        (0, "set-mig-mode", True),
        (1, "set-mig-mode", True),
    ]


def test_after_reboot_the_static_layout_is_reapplied() -> None:
    desired = static({"profiles": {"2g.20gb": 3, "1g.10gb": 1}})
    # MIG mode kept (Ampere: NVIDIA/gpu-operator#2603), instances gone: "the created MIG devices
    # are not persistent across system reboots" (the MIG user guide)
    rebooted = node(gpu(A100_80, mig=True))
    plan = plan_node(rebooted, desired, desired)
    assert Counter(s.profile for s in plan.steps) == {"2g.20gb": 3, "1g.10gb": 1}
    assert all(s.kind == StepKind.CREATE_GI for s in plan.steps)
    assert verify(simulate(rebooted, plan), desired, desired) == []


def test_ampere_pending_enable_gets_a_reset_then_the_layout() -> None:
    inv = node(gpu(A100_80, mig=False, pending=True))
    desired = static({"profiles": {"7g.80gb": 1}})
    assert kinds(plan_node(inv, desired, None)) == ["reset", "create-gi"]


def test_a_pending_disable_is_cancelled_without_a_reset() -> None:
    inv = node(gpu(A100_80, mig=True, pending=False, instances=[("7g.80gb", 0)]))
    desired = static({"profiles": {"7g.80gb": 1}})
    plan = plan_node(inv, desired, None)
    assert [(str(s.kind), s.enable) for s in plan.steps] == [("set-mig-mode", True)]


def test_gpu_with_processes_is_blocked_and_gets_no_destructive_step() -> None:
    inv = node(
        gpu(A100_80, 0, instances=SEVEN_1G, processes=2),
        gpu(A100_80, 1, instances=SEVEN_1G),
    )
    desired = static({"profiles": {"3g.40gb": 2}})
    plan = plan_node(inv, desired, None)
    (blocked,) = plan.blocked
    assert blocked.index == 0
    assert [p.pid for p in blocked.blocked_by] == [1000, 1001]
    assert {s.gpu for s in plan.steps} == {1}


def test_processes_do_not_block_pure_additions() -> None:
    inv = node(gpu(A100_80, instances=[("3g.40gb", 4)], processes=1))
    desired = static({"profiles": {"3g.40gb": 1, "2g.20gb": 2}})
    plan = plan_node(inv, desired, None)
    assert plan.blocked == ()
    assert kinds(plan) == ["create-gi", "create-gi"]


def test_kept_instance_without_its_compute_instance_gets_one() -> None:
    g = gpu(A100_80, instances=[("3g.40gb", 4)])
    bare = g.model_copy(update={"instances": [g.instances[0].model_copy(update={"cis": []})]})
    plan = plan_node(node(bare), static({"profiles": {"3g.40gb": 1}}), None)
    assert [(str(s.kind), s.gi) for s in plan.steps] == [("create-ci", 2)]


def test_partial_compute_instances_are_not_kept() -> None:
    g = gpu(A100_80, instances=[("3g.40gb", 4)])
    gi = g.instances[0]
    split = gi.model_copy(
        update={"cis": [gi.cis[0].model_copy(update={"profile_id": 0, "name": "1c.3g.40gb"})]}
    )
    plan = plan_node(
        node(g.model_copy(update={"instances": [split]})),
        static({"profiles": {"3g.40gb": 1}}),
        None,
    )
    assert kinds(plan) == ["destroy-ci", "destroy-gi", "create-gi"]


def test_ascend_mode_leaves_nvidia_gpus_alone() -> None:
    inv = node(gpu(A100_80, instances=SEVEN_1G))
    plan = plan_node(inv, config("ascend-vnpu"), None)
    assert plan.ok
    assert plan.steps == ()


def test_no_released_configuration_means_no_steps() -> None:
    plan = plan_node(node(gpu(A100_80, mig=False)), None, None)
    assert plan.steps == ()
    assert plan.notes


# --- properties ---------------------------------------------------------------------------------


@st.composite
def layouts(draw: st.DrawFn, model: str) -> dict[str, int]:
    """A random layout that fits the model (checked with the placement search)."""
    m = MIG_MODELS[model]
    geometry = geometry_of_model(m)
    out: dict[str, int] = {}
    for p in draw(st.permutations(list(m.profiles))):
        n = draw(st.integers(0, p.max_count))
        trial = {**out, p.name: n} if n else out
        if trial and feasible(geometry, trial):
            out = trial
    return out


@settings(max_examples=60, deadline=None)
@given(data=st.data(), model=st.sampled_from(sorted(MIG_MODELS)))
def test_any_layout_to_any_layout_converges(data: st.DataObject, model: str) -> None:
    start = data.draw(layouts(model))
    goal = data.draw(layouts(model))
    if not start or not goal:
        return
    empty = node(gpu(model))
    first = static({"profiles": start})
    inv = simulate(empty, plan_node(empty, first, None))
    assert verify(inv, first, None) == []
    second = static({"profiles": goal})
    plan = plan_node(inv, second, first)
    after = simulate(inv, plan)
    assert verify(after, second, first) == []
    # never more destruction than mig-parted's clear-the-GPU
    # (NVIDIA/mig-parted@v0.15.0:pkg/mig/config/config.go `SetMigConfig`)
    destroyed = sum(1 for s in plan.steps if s.kind == StepKind.DESTROY_GI)
    assert destroyed <= len(inv.gpus[0].instances)
    assert plan_node(after, second, second).steps == ()  # idempotent

"""Layout validation (core.mig.layout): errors name the field path, the GPUs and the fix."""

from __future__ import annotations

import pytest

from tests.kit.migkit import config, dynamic, gpu, node, static
from vgpu_operator.core.mig.layout import example_layout, resolve_targets, validate
from vgpu_operator.core.mig.partition import plan_node
from vgpu_operator.core.mig.place import geometry_of_model
from vgpu_operator.models.gpu_catalog import MIG_MODELS
from vgpu_operator.models.inventory import ProfileInfo

EIGHT_A100_40 = node(*(gpu("A100-SXM4-40GB", i, mig=False) for i in range(8)))


def errors_of(inv: object, desired: object) -> list[str]:
    return [str(e) for e in validate(desired, inv)]  # type: ignore[arg-type]


def test_rtx_4090_in_mig_mode_is_a_clear_error() -> None:
    inv = node(gpu("RTX 4090", mig=False))
    for desired in (dynamic(), static({"profiles": {"1g.10gb": 1}})):
        (err,) = validate(desired, inv)
        assert err.path == "spec.mode"
        assert "GPU 0 (NVIDIA GeForce RTX 4090) is not MIG-capable" in err.message
        assert "hami-core" in err.fix
        assert "exclude" in err.fix


def test_unknown_profile_names_the_field_and_the_choices() -> None:
    (err,) = validate(static({"profiles": {"1g.20gb": 1}}), EIGHT_A100_40)
    assert err.path == 'spec.mig.layout[0].profiles["1g.20gb"]'
    assert err.message == "GPUs 0-7 (NVIDIA A100-SXM4-40GB) has no MIG profile 1g.20gb"
    assert "1g.5gb" in err.fix and "7g.40gb" in err.fix
    assert str(err).startswith('spec.mig.layout[0].profiles["1g.20gb"]: ')
    assert "Fix: use one of" in str(err)


def test_too_many_instances_of_a_profile() -> None:
    (err,) = validate(static({"profiles": {"1g.10gb": 5}}), EIGHT_A100_40)
    assert err.path == 'spec.mig.layout[0].profiles["1g.10gb"]'
    assert "5 x 1g.10gb is more than the 4" in err.message
    assert err.fix == "ask for at most 4"


def test_too_many_slices_for_the_model_suggests_a_layout_that_fits() -> None:
    # the CRD caps a layout at 7 compute slices; an A30 has 4
    # (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html)
    inv = node(gpu("A30", 0), gpu("A30", 1))
    (err,) = validate(static({"profiles": {"2g.12gb": 2, "1g.6gb": 1}}), inv)
    assert err.path == "spec.mig.layout[0].profiles"
    assert err.message == (
        "the layout needs 5 compute slices (the Ng of each profile); GPUs 0-1 (NVIDIA A30) has 4"
    )
    assert err.fix == "remove instances until they fit, for example {'1g.6gb': 2, '2g.12gb': 1}"


def test_too_much_memory() -> None:
    # NVIDIA/k8s-test-infra#886: 4 x 1g.10gb + 3 x 1g.5gb on A100-40GB is legal per entry
    (err,) = validate(static({"profiles": {"1g.10gb": 4, "1g.5gb": 3}}), EIGHT_A100_40)
    assert "11 memory slices" in err.message


def test_unplaceable_layout_on_reported_placements() -> None:
    # a driver that offers 3g only at slice 0: two of them fit the totals but not the placements
    g = gpu("A100-SXM4-40GB")
    odd = [
        p if p.id != 9 else ProfileInfo(**{**p.model_dump(), "placements": [0]}) for p in g.profiles
    ]
    inv = node(g.model_copy(update={"profiles": odd}))
    (err,) = validate(static({"profiles": {"3g.20gb": 2}}), inv)
    assert "cannot be placed" in err.message
    assert "nvidia-smi mig -lgipp" in err.message


def test_gpu_indices_are_checked() -> None:
    desired = static(
        {"gpus": [0, 9], "profiles": {"7g.40gb": 1}},
        {"gpus": [0], "profiles": {"1g.5gb": 7}},
        {"gpus": "all", "profiles": {"7g.40gb": 1}},
        {"gpus": "all", "profiles": {"7g.40gb": 1}},
    )
    got = {e.path: e.message for e in validate(desired, EIGHT_A100_40)}
    assert got == {
        "spec.mig.layout[0].gpus[1]": "the node has no GPU 9 (its GPU indices: 0-7)",
        "spec.mig.layout[1].gpus[0]": "GPU 0 already gets its layout from spec.mig.layout[0]",
        "spec.mig.layout[3].gpus": "spec.mig.layout[2] already covers all GPUs",
    }


def test_named_gpus_override_all_and_others_are_left_alone() -> None:
    desired = static(
        {"gpus": "all", "profiles": {"7g.40gb": 1}}, {"gpus": [2], "profiles": {"1g.5gb": 7}}
    )
    targets, errors, _ = resolve_targets(EIGHT_A100_40, desired, None)
    assert errors == []
    assert targets[2].profiles == {"1g.5gb": 7}
    assert targets[2].source == "spec.mig.layout[1]"
    assert all(t.profiles == {"7g.40gb": 1} for t in targets if t.index != 2)
    only_one = static({"gpus": [1], "profiles": {"7g.40gb": 1}})
    targets, _, notes = resolve_targets(EIGHT_A100_40, only_one, None)
    assert [t.index for t in targets] == [1]
    assert "GPU 0 is not named by spec.mig.layout; left as it is" in notes


def test_invalid_layout_gives_an_empty_plan_with_the_errors() -> None:
    plan = plan_node(EIGHT_A100_40, static({"profiles": {"1g.20gb": 1}}), None)
    assert not plan.ok
    assert plan.steps == ()
    assert len(plan.errors) == 1  # one error for the eight identical GPUs


def test_mixed_models_are_validated_per_model() -> None:
    inv = node(gpu("A100-SXM4-40GB", 0), gpu("A100-SXM4-80GB", 1))
    got = [e.message for e in validate(static({"profiles": {"1g.10gb": 7}}), inv)]
    # 1g.10gb is the double-memory 1g on A100-40GB (4 at most) and the 7-way 1g on A100-80GB
    assert got == ["7 x 1g.10gb is more than the 4 GPU 0 (NVIDIA A100-SXM4-40GB) allows"]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("A30", {"1g.6gb": 2, "2g.12gb": 1}),
        ("A100-SXM4-80GB", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        ("H200", {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
    ],
)
def test_example_layout_is_mig_parted_all_balanced(model: str, expected: dict[str, int]) -> None:
    # the all-balanced rows of NVIDIA/mig-parted@v0.15.0:deployments/systemd/config-default.yaml
    assert example_layout(geometry_of_model(MIG_MODELS[model])) == expected


def test_hami_core_and_whole_gpu_are_always_valid() -> None:
    inv = node(gpu("RTX 4090", mig=False), gpu("A30", 1))
    assert validate(config("hami-core"), inv) == []
    assert validate(config("whole-gpu"), inv) == []

"""Operator-side validation: field paths and fixes, hardware fit, collisions."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kit.nodekit import EVERY_NODE, node, policy
from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.ownership import label_collisions, taint_collisions
from vgpu_operator.core.nodes.validate import (
    UNCONFIRMED_MODEL,
    Problem,
    field_path,
    gpu_evidence,
    gpu_model,
    node_problems,
    parse_policy,
    spec_problems,
)
from vgpu_operator.models.node import Owned
from vgpu_operator.models.policy import Taint, VGPUNodePolicySpec


def static(*layout: dict[str, Any]) -> dict[str, Any]:
    return {
        "mode": "mig",
        "nodeSelector": EVERY_NODE,
        "mig": {"partitioning": "static", "layout": list(layout)},
    }


@pytest.mark.parametrize(
    ("loc", "expected"),
    [
        (("mode",), "spec.mode"),
        (("mig", "layout", 0, "gpus", "literal['all']"), "spec.mig.layout[0].gpus"),
        (("mig", "layout", 1, "gpus", "list[int]", 2), "spec.mig.layout[1].gpus"),
        (("nodeLabels", "team"), "spec.nodeLabels.team"),
        (("nodeLabels", "example.com/x", "[key]"), "spec.nodeLabels['example.com/x']"),
        (("nodeTaints", 0, "effect"), "spec.nodeTaints[0].effect"),
    ],
)
def test_field_path(loc: tuple[int | str, ...], expected: str) -> None:
    assert field_path(loc) == expected


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"mode": "vgpu"}, "spec.mode"),
        ({"mode": "mig", "mig": {"layout": [{"gpus": 3, "profiles": {"1g.10gb": 1}}]}},
         "spec.mig.layout[0].gpus"),
        ({"mode": "hami-core", "mig": {}}, "spec.mig"),
        ({"mode": "hami-core", "hamicore": {}}, "spec.hamicore"),
        ({"mode": "whole-gpu", "nodeTaints": [{"key": "a", "effect": "NoSchedule"}]},
         "spec.nodeTaints"),
        ({"mode": "hami-core", "hamiCore": {"deviceSplitCount": 0}},
         "spec.hamiCore.deviceSplitCount"),
    ],
)  # fmt: skip
def test_invalid_spec_problems_name_the_field(spec: dict[str, Any], field: str) -> None:
    parsed = parse_policy(policy("p", spec, generation=4))
    assert not parsed.usable and parsed.policy is None and parsed.generation == 4
    assert parsed.problems[0].field == field
    assert parsed.problems[0].reason == "InvalidSpec"
    assert field in parsed.problems[0].describe()


def test_valid_policy_parses_with_metadata() -> None:
    raw = policy("p", {"mode": "hami-core"}, generation=7, deleting=True)
    parsed = parse_policy(raw)
    assert parsed.usable and parsed.deleting and parsed.policy is not None
    assert parsed.policy.generation == 7 and parsed.policy.uid == "uid-p"


@pytest.mark.parametrize(
    ("layout", "field"),
    [
        ([{"gpus": "all", "profiles": {"1g.10gb": 7}}, {"gpus": [0], "profiles": {"7g.80gb": 1}}],
         "spec.mig.layout[1].gpus"),
        ([{"gpus": [0, 1], "profiles": {"1g.10gb": 7}}, {"gpus": [1], "profiles": {"7g.80gb": 1}}],
         "spec.mig.layout[1].gpus"),
        ([{"gpus": [], "profiles": {"1g.10gb": 7}}], "spec.mig.layout[0].gpus"),
    ],
)  # fmt: skip
def test_overlapping_layouts_are_an_operator_caught_spec_problem(
    layout: list[dict[str, Any]], field: str
) -> None:
    parsed = parse_policy(policy("p", static(*layout)))
    assert parsed.policy is not None and not parsed.usable
    assert parsed.problems[0].field == field


def test_disjoint_layouts_are_fine() -> None:
    spec = VGPUNodePolicySpec.model_validate(
        static(
            {"gpus": [0, 1], "profiles": {"1g.10gb": 7}},
            {"gpus": [2], "profiles": {"3g.40gb": 2}},
        )
    )
    assert spec_problems(spec) == []


def problems_for(gpu: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> list[str]:
    facts = node_facts(node("n1", labels, gpu=gpu))
    found = node_problems(
        facts, VGPUNodePolicySpec.model_validate({"nodeSelector": EVERY_NODE, **spec})
    )
    return [f"{p.reason}@{p.field}" for p in found]


def test_mig_on_a_gpu_without_mig_is_reported_on_spec_mode() -> None:
    assert problems_for("rtx4090", {"mode": "mig"}) == ["MigNotSupported@spec.mode"]


def test_mig_on_a_gpu_node_without_product_labels() -> None:
    labels = {contract.GFD_PRESENT: "true"}
    assert problems_for("cpu", {"mode": "mig"}, labels) == ["NoGpuInfo@spec.mode"]


@pytest.mark.parametrize("mode", ["hami-core", "mig", "whole-gpu", "ascend-vnpu"])
def test_a_node_without_gpu_evidence_is_never_planned(mode: str) -> None:
    assert problems_for("cpu", {"mode": mode}) == ["NoGpuEvidence@spec.nodeSelector"]
    # With the check off (requireGpuEvidence: false) only the mode's own checks remain.
    facts = node_facts(node("n1", gpu="cpu"))
    spec = VGPUNodePolicySpec.model_validate({"nodeSelector": EVERY_NODE, "mode": mode})
    reasons = [p.reason for p in node_problems(facts, spec, require_evidence=False)]
    assert reasons == (["NoGpuInfo"] if mode == "mig" else [])


@pytest.mark.parametrize(
    ("labels", "capacity", "mode", "evidence"),
    [
        ({contract.GFD_PRESENT: "true"}, {}, "hami-core", "label nvidia.com/gpu.present"),
        ({contract.GFD_COUNT: "2"}, {}, "whole-gpu", "label nvidia.com/gpu.count"),
        ({contract.GFD_COUNT: "0"}, {}, "whole-gpu", None),
        ({contract.GFD_PRESENT: "false"}, {"nvidia.com/gpu": "4"}, "mig",
         "capacity nvidia.com/gpu"),
        ({}, {"nvidia.com/gpu": "0"}, "hami-core", None),
        ({}, {"huawei.com/Ascend910B": "8"}, "ascend-vnpu", "capacity huawei.com/Ascend910B=8"),
        ({}, {"huawei.com/Ascend310P": "2"}, "ascend-vnpu", "capacity huawei.com/Ascend310P=2"),
        ({contract.ASCEND_CHIP_LABEL: "910B3"}, {}, "ascend-vnpu",
         f"label {contract.ASCEND_CHIP_LABEL}"),
        ({contract.NFD_ASCEND_PCI_LABEL: "true"}, {}, "ascend-vnpu",
         f"label {contract.NFD_ASCEND_PCI_LABEL}"),
        ({"ascend": "on"}, {}, "ascend-vnpu", None),  # the operator's own label proves nothing
        ({contract.GFD_PRESENT: "true"}, {}, "ascend-vnpu", None),  # an NVIDIA GPU is no NPU
        ({}, {"huawei.com/Ascend910": "8"}, "hami-core", None),
    ],
)  # fmt: skip
def test_gpu_evidence(
    labels: dict[str, str], capacity: dict[str, str], mode: str, evidence: str | None
) -> None:
    raw = node("n1", labels, gpu="cpu")
    raw["status"] = {"capacity": capacity}
    assert gpu_evidence(node_facts(raw), mode) == evidence


def test_hami_core_needs_no_hardware_check_beyond_evidence() -> None:
    assert problems_for("rtx4090", {"mode": "hami-core"}) == []


def test_layouts_that_fit() -> None:
    assert problems_for("a100", static({"gpus": "all", "profiles": {"1g.10gb": 7}})) == []
    fits = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    assert problems_for("h100", static({"gpus": [0, 7], "profiles": fits})) == []
    assert problems_for("a30", static({"gpus": "all", "profiles": {"2g.12gb": 2}})) == []


def test_unknown_profile_for_the_model() -> None:
    found = problems_for("a30", static({"gpus": "all", "profiles": {"1g.10gb": 4}}))
    assert found == ["UnknownMigProfile@spec.mig.layout[0].profiles"]


def test_layout_that_does_not_fit_the_memory_slices() -> None:
    layout = {"gpus": "all", "profiles": {"1g.20gb": 4, "1g.10gb": 1}}  # 9 memory slices of 8
    assert problems_for("a100", static(layout)) == ["LayoutDoesNotFit@spec.mig.layout[0].profiles"]


def test_gpu_index_beyond_the_node() -> None:
    found = problems_for("a30", static({"gpus": [1, 4], "profiles": {"4g.24gb": 1}}))
    assert found == ["GpuIndexOutOfRange@spec.mig.layout[0].gpus"]


def unconfirmed(product: str | None) -> list[Problem]:
    labels = {contract.GFD_MIG_CAPABLE: "true", contract.GFD_PRESENT: "true"}
    if product is not None:
        labels[contract.GFD_PRODUCT] = product
    spec = static({"gpus": "all", "profiles": {"1g.23gb": 7}})
    facts = node_facts(node("n1", labels, gpu="cpu"))
    return node_problems(facts, VGPUNodePolicySpec.model_validate(spec))


@pytest.mark.parametrize(
    ("product", "said"),
    [
        # a row of models/gpu_catalog_unconfirmed.py: named with why it is not confirmed
        ("NVIDIA-B200", "has NVIDIA-B200, whose catalog row is not confirmed ("),
        (
            "NVIDIA-H20-MIG-1g.12gb",
            "has NVIDIA-H20-MIG-1g.12gb, whose catalog row is not confirmed",
        ),
        ("NVIDIA-X900", "has NVIDIA-X900, a GPU model the catalog does not know"),
        (None, "has no nvidia.com/gpu.product label"),
    ],
)
def test_a_static_layout_on_a_gpu_without_a_confirmed_row_is_refused(
    product: str | None, said: str
) -> None:
    """Issue 31: a row without a confirmed source serves dynamic MIG only where the agent's own
    listing confirms it, and never a static layout. The node is refused (nothing written)."""
    [problem] = unconfirmed(product)
    assert (problem.reason, problem.field, problem.node) == (
        UNCONFIRMED_MODEL,
        "spec.mig.partitioning",
        "n1",
    )
    assert said in problem.message, problem.message
    assert "nvidia-smi mig -lgip" in problem.message and "mig-user-guide" in problem.message
    assert "use spec.mig.partitioning: dynamic" in problem.fix
    dynamic = {"mode": "mig", "nodeSelector": EVERY_NODE, "mig": {"partitioning": "dynamic"}}
    labels = {contract.GFD_MIG_CAPABLE: "true", contract.GFD_PRESENT: "true"}
    if product is not None:
        labels[contract.GFD_PRODUCT] = product
    assert problems_for("cpu", dynamic, labels) == []  # dynamic MIG: left to the agent's listing


def test_gfd_product_with_mig_suffix_is_recognised() -> None:
    labels = {contract.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}
    model = gpu_model(node_facts(node("n", labels, gpu="cpu")))
    assert model is not None and model.nvml_name == "NVIDIA A100-SXM4-80GB"


def test_label_collision_only_for_values_the_operator_did_not_set() -> None:
    owned = Owned(labels={"mine": "1"}).to_annotation()
    raw = node(
        "n1",
        {"mine": "1", "theirs": "x", "same": "v"},
        annotations={contract.ANN_OWNED: owned},
    )
    facts = node_facts(raw)
    found = label_collisions(facts, {"mine": "2", "theirs": "y", "same": "v", "new": "z"})
    assert [p.field for p in found] == ["spec.nodeLabels['theirs']"]
    assert "kubectl label node n1 theirs-" in found[0].fix


def test_taint_collision_by_key_and_effect() -> None:
    raw = node(
        "n1",
        taints=[
            {"key": "k", "value": "user", "effect": "NoSchedule"},
            {"key": "k", "value": "user", "effect": "NoExecute"},
        ],
    )
    facts = node_facts(raw)
    wanted = [
        Taint(key="k", value="ours", effect="PreferNoSchedule"),
        Taint(key="k", value="ours", effect="NoExecute"),
        Taint(key="k", value="user", effect="NoSchedule"),
    ]
    found = taint_collisions(facts, wanted)
    assert [p.field for p in found] == ["spec.nodeTaints[1]"]
    assert "kubectl taint node n1 k:NoExecute-" in found[0].fix

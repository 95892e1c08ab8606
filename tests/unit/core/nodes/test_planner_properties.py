"""Properties over random nodes and policies: idempotence, user labels and taints never removed,
one write per node touching only what the operator manages."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kit.nodekit import labels_of, node, policy, reconcile, taints_of
from vgpu_operator import contract
from vgpu_operator.models.node import Owned

DP = contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL
USER_LABEL_KEYS = ["pool", "zone", "team", "volcano.sh/vgpu.enabled", "ascend", "accelerator", DP]
VALUES = ["a", "b", "true", "false"]
POLICY_LABEL_KEYS = ["volcano.sh/vgpu.enabled", "accelerator", "team"]
TAINT_KEYS = ["dedicated", contract.DEFAULT_TAINT_KEY, "gpu"]
EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
TAINT_VALUES = ["", "hami", "x"]

taint_st = st.fixed_dictionaries(
    {
        "key": st.sampled_from(TAINT_KEYS),
        "value": st.sampled_from(TAINT_VALUES),
        "effect": st.sampled_from(EFFECTS),
    }
)


def _unique_taints(taints: list[dict[str, str]]) -> list[dict[str, Any]]:
    seen, out = set(), []
    for t in taints:
        if (t["key"], t["effect"]) not in seen:
            seen.add((t["key"], t["effect"]))
            out.append({k: v for k, v in t.items() if v != ""})
    return out


@st.composite
def nodes_st(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(1, 4))
    out = []
    for i in range(count):
        labels = draw(st.dictionaries(st.sampled_from(USER_LABEL_KEYS), st.sampled_from(VALUES)))
        if draw(st.booleans()) and draw(st.booleans()):
            labels[contract.LABEL_EXCLUDE] = "true"
        taints = _unique_taints(draw(st.lists(taint_st, max_size=3)))
        gpu = draw(st.sampled_from(["a100", "a30", "rtx4090", "cpu"]))
        out.append(node(f"n{i}", labels, taints, gpu=gpu))
    return out


selector_st = st.one_of(
    st.builds(lambda v: {"matchLabels": {"pool": v}}, st.sampled_from(["a", "b"])),
    st.builds(
        lambda op, vals: {
            "matchExpressions": [
                {"key": "zone", "operator": op, "values": vals if op in ("In", "NotIn") else []}
            ]
        },
        st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
        st.lists(st.sampled_from(VALUES), min_size=1, max_size=2, unique=True),
    ),
    st.just({}),
)


@st.composite
def spec_st(draw: st.DrawFn) -> dict[str, Any]:
    mode = draw(st.sampled_from(["hami-core", "mig", "whole-gpu", "ascend-vnpu"]))
    spec: dict[str, Any] = {
        "mode": mode,
        "nodeSelector": draw(selector_st),
        "priority": draw(st.integers(0, 2)),
    }
    if draw(st.booleans()):
        spec["nodeLabels"] = draw(
            st.dictionaries(st.sampled_from(POLICY_LABEL_KEYS), st.sampled_from(VALUES))
        )
    if mode != "whole-gpu" and draw(st.booleans()):
        spec["nodeTaints"] = _unique_taints(draw(st.lists(taint_st, max_size=2)))
        for t in spec["nodeTaints"]:
            t.setdefault("value", "")
    static = mode == "mig" and draw(st.booleans())
    if static:
        profiles = draw(st.sampled_from([{"1g.10gb": 7}, {"3g.40gb": 2}, {"1g.6gb": 4}]))
        spec["mig"] = {"partitioning": "static", "layout": [{"gpus": "all", "profiles": profiles}]}
    elif draw(st.booleans()):
        spec["disableNvidiaDevicePlugin"] = True
    if draw(st.integers(0, 9)) == 0:
        spec["suspend"] = True
    return spec


@st.composite
def policies_st(draw: st.DrawFn, prefix: str = "p") -> list[dict[str, Any]]:
    count = draw(st.integers(0, 3))
    return [
        policy(f"{prefix}{i}", draw(spec_st()), generation=draw(st.integers(1, 3)))
        for i in range(count)
    ]


def _user_labels(raw: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in labels_of(raw).items() if not k.startswith("vgpu.volcano.sh/")}


SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(nodes_st(), policies_st())
def test_planning_after_applying_the_patches_writes_nothing(
    nodes: list[dict[str, Any]], policies: list[dict[str, Any]]
) -> None:
    after, _ = reconcile(nodes, policies)
    again, plan = reconcile(after, policies)
    assert plan.patches == {}
    assert again == after


@SETTINGS
@given(nodes_st(), policies_st("p"), policies_st("p"), policies_st("q"))
def test_user_labels_and_taints_survive_every_change_and_leaving(
    nodes: list[dict[str, Any]],
    first: list[dict[str, Any]],
    edited: list[dict[str, Any]],
    other: list[dict[str, Any]],
) -> None:
    original = {n["metadata"]["name"]: n for n in nodes}
    current = nodes
    for step in (first, edited, edited + other, other, []):
        current, _ = reconcile(current, step)
        for raw in current:
            before = original[raw["metadata"]["name"]]
            labels = labels_of(raw)
            for key, value in _user_labels(before).items():
                if key == DP and labels.get(key) == "false":
                    owned = Owned.from_annotation(
                        raw["metadata"].get("annotations", {}).get(contract.ANN_OWNED)
                    )
                    assert owned.replaced.get(DP) == value or value == "false"
                    continue
                assert labels.get(key) == value, f"user label {key} lost on {raw}"
            for taint in taints_of(before):
                assert taint in taints_of(raw), f"user taint {taint} lost"
    for raw in current:  # out of every pool: exactly the user's labels and taints again
        before = original[raw["metadata"]["name"]]
        assert labels_of(raw) == labels_of(before)
        assert taints_of(raw) == taints_of(before)
        leftover = set(raw["metadata"].get("annotations", {}))
        assert leftover <= {contract.ANN_CONFIG}


@SETTINGS
@given(nodes_st(), policies_st(), st.one_of(policies_st("p"), policies_st("q")))
def test_one_patch_per_node_touching_only_managed_keys(
    nodes: list[dict[str, Any]], first: list[dict[str, Any]], second: list[dict[str, Any]]
) -> None:
    configured, _ = reconcile(nodes, first)
    _, plan = reconcile(configured, second)
    wanted_anywhere = set(POLICY_LABEL_KEYS) | {"ascend", DP}
    for raw in configured:
        patch = plan.plans[raw["metadata"]["name"]].patch
        if patch is None:
            continue
        assert set(patch) <= {"metadata", "spec"}
        owned = Owned.from_annotation(
            raw["metadata"].get("annotations", {}).get(contract.ANN_OWNED)
        )
        for key, value in patch["metadata"].get("labels", {}).items():
            managed = key.startswith("vgpu.volcano.sh/") or key in owned.labels
            assert managed or (key in wanted_anywhere and value is not None), key
        for key in patch["metadata"].get("annotations", {}):
            assert key.startswith("vgpu.volcano.sh/")

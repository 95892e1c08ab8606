"""Hypothesis strategies for raw VGPUNodePolicy specs, valid and invalid in every way the CRD
and the models judge: missing or empty selectors, operators and values that do not fit, label
and taint keys under kubernetes.io/ and k8s.io/ (and near misses), reserved keys, NoExecute with
and without allowNoExecute, blocks of another mode, MIG layouts over seven slices, values of the
wrong type, integral floats, nulls, unknown fields, names longer than 63 characters.

Shared by the unit property test (models and the pure core) and the cluster test that sends a
sample of them to the real apiserver (models accept iff the CRD accepts).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# Keys: valid ones, then the system prefixes and their near misses, reserved and invalid ones.
GOOD_KEYS = [
    "pool",
    "example.com/pool",
    "volcano.sh/vgpu.enabled",
    "nvidia.com/gpu.present",
    "kubernetes.example.com/x",  # near misses: not under kubernetes.io or k8s.io
    "mykubernetes.io/x",
    "k8s.iox/y",
]
BAD_KEYS = [
    "kubernetes.io/hostname",
    "node-restriction.kubernetes.io/pool",
    "node-role.kubernetes.io/gpu",
    "k8s.io/role",
    "node.k8s.io/gpu",
    "vgpu.volcano.sh/policy",
    "nvidia.com/gpu.deploy.device-plugin",
    "nvidia.com/gpu.deploy.mig-manager",
    "has space",
    "-leading",
    "a/b/c",
    "UPPER.example.com/x",
    "x" * 64,
    "",
]
KEYS = GOOD_KEYS + BAD_KEYS
GOOD_VALUES = ["", "true", "a", "on", "x" * 63, "ok.v_1", "A-1"]
BAD_VALUES = ["x" * 64, "has space", "-bad"]
EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute", "Never"]
OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist", "Equals"]
MODES = ["hami-core", "mig", "whole-gpu", "ascend-vnpu", "dra"]
PROFILES = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me"]
BAD_PROFILES = ["9g.1gb", "1g-10gb"]


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good` nine times in ten, `bad` otherwise."""
    return st.sampled_from(range(10)).flatmap(lambda i: good if i < 9 else bad)


def pick(good: list[Any], bad: list[Any]) -> st.SearchStrategy[Any]:
    """One of `good` nine times in ten, one of `bad` otherwise (cheap: no strategy per draw)."""
    return st.tuples(st.integers(0, 9), st.sampled_from(good), st.sampled_from(bad)).map(
        lambda t: t[1] if t[0] < 9 else t[2]
    )


TRUE_MOSTLY = pick([True], [False])


WRONG = ["5", "true", 1, True, 2.0, 1.5, None, [], {}]


def wrong(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly `good`, sometimes a value of another type (or an integral float, or null)."""
    return mostly(good, st.sampled_from(WRONG))


def optional(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


keys = pick(GOOD_KEYS, BAD_KEYS)
values = pick(GOOD_VALUES, BAD_VALUES)


_OPERATOR = pick(OPERATORS[:4], ["Equals"])
_KEY_OR_WRONG = pick(GOOD_KEYS, BAD_KEYS + WRONG)
_SOME_VALUES = st.lists(values, min_size=1, max_size=3)


@st.composite
def requirement(draw: st.DrawFn) -> dict[str, Any]:
    operator = draw(_OPERATOR)
    out: dict[str, Any] = {"key": draw(_KEY_OR_WRONG), "operator": operator}
    fits = draw(TRUE_MOSTLY)
    if (operator in ("In", "NotIn")) == fits:
        out["values"] = draw(_SOME_VALUES)
    elif draw(st.booleans()):
        out["values"] = []
    return out


selector = mostly(
    st.one_of(
        st.builds(lambda v: {"matchLabels": {"nvidia.com/gpu.present": v}}, values),
        st.builds(
            lambda k, v: {"matchLabels": {k: v}}, keys, pick(GOOD_VALUES, BAD_VALUES + WRONG)
        ),
        st.builds(
            lambda r: {"matchExpressions": r}, st.lists(requirement(), min_size=1, max_size=3)
        ),
    ),
    st.sampled_from([{}, {"matchLabels": {}, "matchExpressions": []}]),
)
taint = st.fixed_dictionaries(
    {"key": keys, "effect": pick(EFFECTS[:3], ["Never"])},
    optional={"value": values},
)
filter_devices = optional(
    {
        "uuid": st.lists(st.sampled_from(["GPU-1", "", "GPU-x"]), max_size=2),
        "index": st.lists(pick([0, 1, 3, 7, 63], [64, 70, *WRONG]), max_size=3),
    }
)
hami_core = optional(
    {
        "deviceSplitCount": pick([1, 4, 10, 128, 2.0], [0, 129, *WRONG]),
        "deviceMemoryScaling": pick([0.5, 1, 1.5, 100], [0, 101, *WRONG]),
        "deviceCoreScaling": pick([1, 2.5, 100], [0, 101, *WRONG]),
        "filterDevices": filter_devices,
    }
)
ascend = optional(
    {
        "vDeviceCount": pick([1, 4, 128], [0, 129, *WRONG]),
        "hamiVnpuCore": pick([True, False], WRONG),
        "filterDevices": filter_devices,
    }
)
layout = optional(
    {
        "gpus": mostly(
            st.one_of(st.just("all"), st.lists(st.integers(0, 7), max_size=3)),
            st.sampled_from(["some", "ALL", [99], [-1], 3, True]),  # 3, True: typeless, below
        ),
        "profiles": mostly(
            st.dictionaries(
                st.sampled_from(PROFILES), pick([1, 2, 3], WRONG), min_size=1, max_size=2
            ),
            st.dictionaries(
                st.sampled_from(PROFILES + BAD_PROFILES), st.integers(0, 8), max_size=3
            ),
        ),
    }
)


_PARTITIONING = pick(["dynamic", "static"], ["fixed"])
_LAYOUTS = st.lists(layout, min_size=1, max_size=3)


@st.composite
def mig(draw: st.DrawFn) -> dict[str, Any]:
    partitioning = draw(_PARTITIONING)
    out: dict[str, Any] = {} if draw(st.booleans()) else {"partitioning": partitioning}
    fits = draw(TRUE_MOSTLY)
    if (partitioning == "static") == fits:
        out["layout"] = draw(_LAYOUTS)
    return out


_DEVICES = pick(["whole-gpu", "static-mig", "dynamic-mig"], ["mig", "gpu"])


@st.composite
def dra(draw: st.DrawFn) -> dict[str, Any]:
    devices = draw(_DEVICES)
    out: dict[str, Any] = {} if draw(st.booleans()) else {"devices": devices}
    fits = draw(TRUE_MOSTLY)
    if (out.get("devices") == "static-mig") == fits:
        out["layout"] = draw(_LAYOUTS)
    return out


rollout = optional(
    {
        "maxUnavailable": pick(["1", "25%", "100%"], ["101%", "lots", ""]),
        "drain": optional(
            {
                "enabled": pick([True, False], WRONG),
                "timeoutSeconds": pick([0, 600, 86400], [-1, 86401, *WRONG]),
                "deleteEmptyDirData": st.booleans(),
            }
        ),
    }
)


_MODE = pick(MODES, ["vgpu"])
_OTHER_BLOCK = st.sampled_from([None, None, "hamiCore", "mig", "ascendVnpu", "dra"])
_BLOCKS = {"hamiCore": hami_core, "mig": mig(), "ascendVnpu": ascend, "dra": dra()}
_MODE_BLOCK = {"hami-core": "hamiCore", "mig": "mig", "ascend-vnpu": "ascendVnpu", "dra": "dra"}
_REST = optional(
    {
        "priority": pick([-1000, -3, 0, 1, 9, 1000, 5.0], [-1001, 5000, *WRONG]),
        "nodeLabels": st.dictionaries(keys, values, max_size=3),
        "nodeTaints": st.lists(taint, max_size=2),
        "allowNoExecute": pick([True, False], WRONG),
        "disableNvidiaDevicePlugin": st.booleans(),
        "disableNvidiaMigManager": st.booleans(),
        "rollout": rollout,
        "suspend": pick([False], WRONG),
    }
)


@st.composite
def spec(draw: st.DrawFn) -> dict[str, Any]:
    mode = draw(_MODE)
    out: dict[str, Any] = {"mode": mode}
    if draw(TRUE_MOSTLY):
        out["nodeSelector"] = draw(selector)
    block = _MODE_BLOCK.get(mode) if draw(TRUE_MOSTLY) else None
    block = block or draw(_OTHER_BLOCK)
    if block is not None and draw(st.booleans()):
        out[block] = draw(_BLOCKS[block])
    out.update(draw(_REST))
    if not draw(TRUE_MOSTLY):
        out["hamicore"] = {}  # a typo: an unknown field
    return out


# Valid DNS subdomain names, 1 to 80 characters (the policy name becomes a label value).
name = pick(list(range(1, 64)), list(range(64, 81))).map(
    lambda n: "p" if n == 1 else ("p" + "-a" * n)[: n - 1] + "z"
)


def typeless_gpus(raw: dict[str, Any]) -> bool:
    """Whether a layout's `gpus` is of a type neither branch of its union has: the CRD cannot
    type that node and lets it through (crdgen's docstring); the models refuse it."""
    for block in (raw.get("mig"), raw.get("dra")):
        layouts = block.get("layout") if isinstance(block, dict) else None
        if isinstance(layouts, list) and any(
            isinstance(entry, dict)
            and "gpus" in entry
            and entry["gpus"] is not None
            and not isinstance(entry["gpus"], str | list)
            for entry in layouts
        ):
            return True
    return False

"""Hostile payloads anyone who may edit a ConfigMap or annotate a Node can write: a YAML alias
bomb of 368 bytes, integers of thousands of digits, timestamps past year 9999 or of month 13,
nesting deeper than the interpreter's recursion limit, forged ownership records, and mutations
of valid payloads. Shared by the unit property tests and the cluster tests."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from vgpu_operator import contract
from vgpu_operator.core.mig.partition import profile_info
from vgpu_operator.models import gpu_catalog
from vgpu_operator.models.inventory import GpuInfo, Inventory
from vgpu_operator.models.node import NodeConfig


def alias_bomb(size: int = 368) -> str:
    """Nine levels of nine aliases each ("billion laughs"), padded to `size` bytes with a
    comment: 9^9 values once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    text = "\n".join(lines) + "\n"
    pad = size - len(text) - 3
    assert pad >= 0, len(text)
    return text + "# " + "x" * pad + "\n"


BOMB = alias_bomb()
BIG_INT = "1" * 4301  # more digits than CPython converts
HOSTILE_TEXTS = [
    BOMB,
    f"nvidia:\n  deviceSplitCount: {BIG_INT}\n",
    f'{{"nodeconfig": [{{"name": "n", "devicesplitcount": {BIG_INT}}}]}}',
    "stamp: 9999-12-31T23:59:59.5Z\n",
    "stamp: 2026-13-01\n",
    "[" * 5000,
    "{" * 5000,
    '{"a":' * 3000 + "1" + "}" * 3000,
    "nvidia: [1, 2\n",
    "- just\n- a list\n",
    "nvidia:\n  knownMigGeometries: 7\n",
    "\x00\x01binary\xff",
    "",
]
TIMESTAMPS = [
    "9999-12-31T23:59:59.5Z",
    "0001-01-01T00:00:00Z",
    "2026-13-01T00:00:00Z",
    "not a time",
    "2026-01-01T00:00:00+14:00",
    "1" * 5000,
]


def mutated(valid: str) -> st.SearchStrategy[str]:
    """`valid` cut, spliced or with a character changed."""
    n = len(valid)
    return st.one_of(
        st.just(valid),
        st.integers(0, n).map(lambda i: valid[:i]),
        st.tuples(st.integers(0, n), st.text(max_size=8)).map(
            lambda t: valid[: t[0]] + t[1] + valid[t[0] :]
        ),
        st.tuples(st.integers(0, max(0, n - 1)), st.characters()).map(
            lambda t: valid[: t[0]] + t[1] + valid[t[0] + 1 :]
        ),
    )


JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=12),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


def text_like(*valid: str) -> st.SearchStrategy[str]:
    """Any of: the valid texts and their mutations, JSON of any shape, free text, the hostile
    texts."""
    return st.one_of(
        st.sampled_from(valid).flatmap(mutated) if valid else st.nothing(),
        JSON.map(json.dumps),
        st.text(max_size=200),
        st.sampled_from(HOSTILE_TEXTS),
    )


OWNED_TEXTS = [
    json.dumps({"labels": {"volcano.sh/vgpu.enabled": "true"}, "taints": [], "replaced": {}}),
    json.dumps({"labels": {"kubernetes.io/hostname": "forged"}}),
    json.dumps({"labels": {"pool": "x"}, "replaced": {"kubernetes.io/os": "windows"}}),
    json.dumps(
        {
            "labels": {contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL: "false"},
            "replaced": {contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL: "true"},
        }
    ),
    json.dumps({"taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}),
    json.dumps({"labels": {"pool": "has space"}}),
]
CONFIG_TEXTS = [
    NodeConfig(mode="hami-core", policy="p", generation=1).to_annotation(),
    NodeConfig.model_validate(
        {"mode": "mig", "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]}}
    ).to_annotation(),
]
INVENTORY_TEXTS = [
    json.dumps(
        {
            "gpus": [
                {
                    "index": 0,
                    "uuid": "GPU-0",
                    "name": "NVIDIA H100 80GB HBM3",
                    "bus_id": "0:0",
                    "memory_mib": 81559,
                    "mig_capable": True,
                    "profiles_source": "driver",
                    "profiles": [
                        {
                            "id": 19,
                            "name": "1g.10gb",
                            "slices": 1,
                            "memory_mib": 999999,
                            "count": 7,
                            "size": 1,
                        }
                    ],
                }
            ]
        }
    )
]
REGISTER_TEXTS = ["GPU-0,10,24564,NVIDIA-NVIDIA GeForce RTX 4090,true,hami-core:"]

# The hostile inputs of the review of 2026-11-25, by its case names: the `nvidia.com/gpu.count`
# of a node with a released configuration and no inventory (node04 "9"*63: OverflowError; node05
# 10^12: MemoryError; 10^8: 3.8 GiB; node09 200000: a 5.2 MiB node-config), GPU names in an
# inventory that shadow other models' MIG geometry (geo01 "B", geo02 "H1"), the instances
# nvidia-smi lists on one GPU (smi13: 24 took 21 s to plan), Retry-After headers (misc01) and
# characters a text log must escape (misc02: NEL, the one-byte CSI, RLO, and U+2028).
GPU_COUNTS = ["9" * 63, "1000000000000", "100000000", "200000"]
SHADOWING_GPU_NAMES = ["B", "H1"]
LISTED_INSTANCES = 24
RETRY_AFTER_HEADERS = ["inf", "1e309", "nan", "-5", "Wed, 21 Oct 2026 07:28:00 GMT"]
LOG_CONTROLS = ["\x85", "\x9b", "\u202e", "\u2028", "\r", "\n"]


def annotations() -> st.SearchStrategy[dict[str, str]]:
    """A Node's annotations of the node contract (and the plugin's register), any of them any
    text."""
    return st.fixed_dictionaries(
        {},
        optional={
            contract.ANN_OWNED: text_like(*OWNED_TEXTS),
            contract.ANN_TARGET: text_like(*CONFIG_TEXTS),
            contract.ANN_CONFIG: text_like(*CONFIG_TEXTS),
            contract.ANN_INVENTORY: text_like(*INVENTORY_TEXTS),
            contract.ANN_ROLLOUT: text_like(),
            "volcano.sh/node-vgpu-register": text_like(*REGISTER_TEXTS),
        },
    )


def as_objects(value: Any) -> Any:
    """A JSON-ish value as it would come back from the API (tuples as lists)."""
    return json.loads(json.dumps(value))


def forged_inventory(name: str) -> str:
    """An inventory annotation whose one GPU is named `name`, with the H100's profiles as a
    driver lists them (every sanity check passes: only the name is forged, as with
    SHADOWING_GPU_NAMES)."""
    model = gpu_catalog.H100_80GB
    gpu = GpuInfo(
        index=0,
        uuid="GPU-forged-0",
        name=name,
        bus_id="00000000:07:00.0",
        memory_mib=model.memory_mib,
        mig_capable=True,
        mig_current=True,
        mig_pending=True,
        profiles=[profile_info(p) for p in model.profiles],
        profiles_source="driver",
    )
    return Inventory(gpus=[gpu]).to_annotation()

"""No node's node-config entry may take more than `bounds.MAX_NODE_ENTRY_BYTES`: a larger one is
refused (its existing entry and ownership left as they were, a note says why), and the other
nodes' entries are written, so one node cannot bring the ConfigMap over the apiserver's 1 MiB
and block every write (the review's node09: 200000 GPUs on a static-MIG node made 5.2 MiB)."""

from __future__ import annotations

import json
from typing import Any
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kit.volcano_fixtures import configmap
from vgpu_operator import bounds
from vgpu_operator.contract import ANN_OWNED_ENTRIES
from vgpu_operator.core.volcano.render import render_ascend_node_config, render_node_config
from vgpu_operator.core.volcano.render.node_config import entry_bytes, node_entries, oversized
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import (
    AscendVnpuSpec,
    FilterDevices,
    HamiCoreSpec,
    MigLayout,
    MigSpec,
)

CFG = OperatorConfig()
NOW = "2026-02-01T00:00:00Z"
LATER = "2026-02-02T00:00:00Z"
PLAIN = NodeConfig(mode="hami-core", policy="pool", generation=1)
# a released configuration listing 2,000 UUIDs (a forged annotation, or a policy gone wild)
HUGE = NodeConfig(
    mode="hami-core",
    policy="pool",
    generation=1,
    hamiCore=HamiCoreSpec(
        filterDevices=FilterDevices(
            uuid=[f"GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(2000)]
        )
    ),
)
STATIC = NodeConfig(
    mode="mig",
    policy="static",
    generation=1,
    mig=MigSpec(partitioning="static", layout=[MigLayout(profiles={"1g.10gb": 7})]),
)


def entries(data: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in json.loads(data["config.json"])["nodeconfig"]}


def test_an_oversized_entry_is_refused_and_the_others_are_written() -> None:
    out = render_node_config(None, {"big": HUGE, "n1": PLAIN, "n2": PLAIN}, CFG, NOW)
    got = entries(out.data)
    assert set(got) == {"n1", "n2"}
    assert set(out.changed_entries) == {"n1", "n2"}
    assert json.loads(out.annotations[ANN_OWNED_ENTRIES]) == {"n1": NOW, "n2": NOW}
    [note] = out.notes
    assert "big" in note and f"more than the {bounds.MAX_NODE_ENTRY_BYTES}" in note
    assert len(out.data["config.json"]) < 4096


def test_200000_gpus_on_a_static_node_are_refused_by_the_renderer_too() -> None:
    # the snapshot bounds the count before; the renderer refuses what would still be too large
    gpus = {"static-0": range(200_000), "static-1": range(8)}
    desired = node_entries({"static-0": STATIC, "static-1": STATIC}, CFG, gpus)
    assert list(oversized(desired)) == ["static-0"]
    out = render_node_config(None, {"static-0": STATIC, "static-1": STATIC}, CFG, NOW, gpus)
    got = entries(out.data)
    assert list(got) == ["static-1"]
    assert got["static-1"]["filterdevices"]["index"] == list(range(8))
    assert len(out.data["config.json"].encode()) < bounds.CONFIGMAP_DATA_LIMIT


def test_an_owned_entry_is_left_as_it_was_when_its_new_one_is_refused() -> None:
    first = render_node_config(None, {"big": PLAIN, "n1": PLAIN}, CFG, NOW)
    cm = configmap("kube-system", "volcano-vgpu-node-config", first.data, dict(first.annotations))
    before = entries(first.data)["big"]
    out = render_node_config(cm, {"big": HUGE, "n1": PLAIN, "n2": PLAIN}, CFG, LATER)
    got = entries(out.data)
    assert got["big"] == before  # not replaced, not removed
    assert "n2" in got and "big" not in out.changed_entries
    # still the operator's, with the time it last changed
    owned = json.loads(out.annotations[ANN_OWNED_ENTRIES])
    assert set(owned) == {"big", "n1", "n2"} and owned["big"] == NOW
    # once the node's configuration is sane again, its entry is written
    fixed = configmap("kube-system", "volcano-vgpu-node-config", out.data, dict(out.annotations))
    again = render_node_config(
        fixed,
        {"big": PLAIN.model_copy(update={"generation": 2}), "n1": PLAIN, "n2": PLAIN},
        CFG,
        LATER,
    )
    assert not again.notes and "big" in entries(again.data)


def test_an_entry_at_the_bound_is_written() -> None:
    uuids: list[str] = []
    config = PLAIN
    while True:
        wider = NodeConfig(
            mode="hami-core",
            hamiCore=HamiCoreSpec(
                filterDevices=FilterDevices(uuid=[*uuids, f"GPU-{len(uuids):036d}"])
            ),
        )
        if entry_bytes(node_entries({"n": wider}, CFG)["n"]) > bounds.MAX_NODE_ENTRY_BYTES:
            break
        uuids, config = [*uuids, f"GPU-{len(uuids):036d}"], wider
    assert len(uuids) > 200  # a few hundred UUIDs fit
    out = render_node_config(None, {"n": config}, CFG, NOW)
    assert not out.notes and "n" in entries(out.data)


def test_the_ascend_node_config_has_the_same_bound() -> None:
    huge = NodeConfig(
        mode="ascend-vnpu",
        ascendVnpu=AscendVnpuSpec(
            filterDevices=FilterDevices(uuid=[f"npu-{i:060d}" for i in range(500)])
        ),
    )
    small = NodeConfig(mode="ascend-vnpu", ascendVnpu=AscendVnpuSpec(vDeviceCount=4))
    out = render_ascend_node_config(None, {"big": huge, "a1": small}, CFG, NOW)
    assert "big" not in out.data[CFG.ascend_node_config.key]
    assert "a1" in out.data[CFG.ascend_node_config.key]
    assert [n for n in out.notes if "big" in n]


# Strings with what JSON escapes or counts as structure, and characters of 2 to 4 UTF-8 bytes.
_TEXT = st.text(st.sampled_from([*'az09 ",:[]{}\\', "\n", "é", "中", "😀", "\u2028"]), max_size=12)
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(_TEXT, inner, max_size=5)),
    max_leaves=40,
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(_TEXT, st.dictionaries(_TEXT, _VALUES, max_size=6), max_size=4),
    st.integers(min_value=0, max_value=2000),
)
def test_oversized_finds_every_entry_over_the_bound_with_its_size(
    desired: dict[str, dict[str, Any]], limit: int
) -> None:
    # `oversized` measures only the entries a cheap bound cannot clear: it must find the same
    # entries, with the same sizes, as measuring every one of them
    with patch.object(bounds, "MAX_NODE_ENTRY_BYTES", limit):
        got = oversized(desired)
    sizes = {name: entry_bytes(entry) for name, entry in desired.items()}
    assert got == {name: size for name, size in sizes.items() if size > limit}

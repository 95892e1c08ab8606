"""A hand-written node-config entry is kept (issue 29, core.volcano.render.entry_origins): taken
over, it is merged with what the policy needs (the person's filter and the fields the policy does
not set stay; an excluded GPU is never offered again), recorded as it was, and put back exactly
when the node leaves, instead of being deleted."""

from __future__ import annotations

import json
from typing import Any

from tests.kit.volcano_fixtures import configmap
from vgpu_operator import bounds
from vgpu_operator.contract import ANN_ORIGINAL_ENTRIES, ANN_OWNED_ENTRIES
from vgpu_operator.core.volcano.config_adoption import reads_as
from vgpu_operator.core.volcano.render import render_ascend_node_config, render_node_config
from vgpu_operator.core.volcano.render.common import Rendered
from vgpu_operator.core.volcano.render.entry_origins import merged, original_entries
from vgpu_operator.core.volcano.render.node_config import node_entry
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import AscendVnpuSpec, FilterDevices, HamiCoreSpec

CFG = OperatorConfig()
NOW = "2026-02-01T00:00:00Z"
HAND = {"name": "n1", "filterdevices": {"uuid": ["GPU-x"], "index": []}, "devicesplitcount": 3}
FOREIGN = {"name": "other", "operatingmode": "mig"}


def cm(entries: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> Any:
    doc = json.dumps({"nodeconfig": entries}, indent=4) + "\n"
    return configmap("kube-system", "volcano-vgpu-node-config", {"config.json": doc}, annotations)


def after(before: Any, rendered: Rendered) -> Any:
    """The ConfigMap as the merge PATCH leaves it."""
    meta = before["metadata"]
    annotations = {**meta.get("annotations", {}), **rendered.annotations}
    return configmap(meta["namespace"], meta["name"], rendered.data, annotations)


def nodeconfig(obj: Any) -> list[dict[str, Any]]:
    return json.loads(obj["data"]["config.json"])["nodeconfig"]  # type: ignore[no-any-return]


def filtered(obj: Any, node: str) -> tuple[str, ...]:
    """The UUIDs the plugin on `node` does not offer, as it reads the file."""
    implicit = node_entry(node, NodeConfig(mode="hami-core"), CFG.device_defaults)
    settings = reads_as(node, nodeconfig(obj), implicit)
    assert settings is not None
    return tuple(settings.filter_uuids)


def policy(**hami: Any) -> NodeConfig:
    return NodeConfig(mode="hami-core", policy="p", hamiCore=HamiCoreSpec(**hami) if hami else None)


def test_a_hand_entry_is_merged_while_held_and_put_back_exactly_on_leave() -> None:
    start = cm([HAND, FOREIGN])
    spec = policy(deviceSplitCount=5, filterDevices=FilterDevices(index=[1]))
    first = render_node_config(start, {"n1": spec}, CFG, NOW)
    held = after(start, first)
    [entry, other] = nodeconfig(held)
    assert other == FOREIGN
    assert entry["devicesplitcount"] == 5  # the policy's
    assert entry["filterdevices"] == {"uuid": ["GPU-x"], "index": [1]}  # both
    assert "GPU-x" in filtered(held, "n1")  # the excluded GPU is never offered
    assert json.loads(held["metadata"]["annotations"][ANN_ORIGINAL_ENTRIES]) == {"n1": [HAND]}
    assert set(json.loads(held["metadata"]["annotations"][ANN_OWNED_ENTRIES])) == {"n1"}
    # a second pass: nothing to write
    assert not render_node_config(held, {"n1": spec}, CFG, "later").changed
    # the node leaves: the person's entry comes back exactly, the record goes
    gone = render_node_config(held, {}, CFG, "later")
    left = after(held, gone)
    assert nodeconfig(left) == [HAND, FOREIGN]
    assert [list(e) for e in nodeconfig(left)] == [list(HAND), list(FOREIGN)]  # key order too
    assert gone.changed_entries == {"n1"}
    assert json.loads(left["metadata"]["annotations"][ANN_ORIGINAL_ENTRIES]) == {}
    assert json.loads(left["metadata"]["annotations"][ANN_OWNED_ENTRIES]) == {}


def test_fields_the_policy_does_not_set_stay_the_persons() -> None:
    start = cm([{**HAND, "devicememoryscaling": 2, "migstrategy": "none"}])
    rendered = render_node_config(start, {"n1": policy()}, CFG, NOW)
    [entry] = nodeconfig(after(start, rendered))
    assert entry["devicesplitcount"] == 3 and entry["devicememoryscaling"] == 2
    assert entry["migstrategy"] == "none"
    assert entry["operatingmode"] == "hami-core"  # the policy's mode
    assert entry["filterdevices"] == {"uuid": ["GPU-x"], "index": []}
    # the plugin reads what it read before: the entry is taken over without a restart
    assert rendered.changed_entries == frozenset()


def test_a_field_the_policy_stops_setting_goes_back_to_the_persons_value() -> None:
    start = cm([HAND])
    held = after(start, render_node_config(start, {"n1": policy(deviceSplitCount=7)}, CFG, NOW))
    assert nodeconfig(held)[0]["devicesplitcount"] == 7
    again = after(held, render_node_config(held, {"n1": policy()}, CFG, "later"))
    assert nodeconfig(again)[0]["devicesplitcount"] == 3


def test_duplicate_hand_entries_are_recorded_and_restored_in_order() -> None:
    twice = [{"name": "n1", "operatingmode": "mig"}, HAND]
    start = cm([FOREIGN, *twice])
    held = after(start, render_node_config(start, {"n1": policy()}, CFG, NOW))
    assert [e["name"] for e in nodeconfig(held)] == ["other", "n1"]  # one entry while held
    left = after(held, render_node_config(held, {}, CFG, "later"))
    assert nodeconfig(left) == [FOREIGN, *twice]


def test_a_static_mig_node_filters_every_gpu_and_keeps_the_persons_too() -> None:
    start = cm([HAND])
    static = NodeConfig.model_validate(
        {
            "mode": "mig",
            "mig": {
                "partitioning": "static",
                "layout": [{"gpus": "all", "profiles": {"7g.80gb": 1}}],
            },
        }
    )
    rendered = render_node_config(start, {"n1": static}, CFG, NOW, gpus={"n1": [0, 1]})
    [entry] = nodeconfig(after(start, rendered))
    assert entry["filterdevices"] == {"uuid": ["GPU-x"], "index": [0, 1]}
    assert entry["operatingmode"] == "hami-core" and entry["devicesplitcount"] == 10


def test_an_entry_the_operator_wrote_itself_is_still_deleted_on_leave() -> None:
    start = cm([FOREIGN])
    held = after(start, render_node_config(start, {"n1": policy()}, CFG, NOW))
    assert ANN_ORIGINAL_ENTRIES not in held["metadata"]["annotations"]
    left = after(held, render_node_config(held, {}, CFG, "later"))
    assert nodeconfig(left) == [FOREIGN]


def test_an_entry_owned_before_this_version_has_no_record_and_goes_as_before() -> None:
    start = cm([HAND], {ANN_OWNED_ENTRIES: json.dumps({"n1": "t0"})})
    held = after(start, render_node_config(start, {"n1": policy()}, CFG, NOW))
    assert nodeconfig(held)[0]["filterdevices"] == {"uuid": [], "index": []}  # the operator's
    left = after(held, render_node_config(held, {}, CFG, "later"))
    assert nodeconfig(left) == []


def test_an_original_too_large_to_record_is_not_taken_over() -> None:
    uuids = [f"GPU-{i:036d}" for i in range(bounds.MAX_NODE_ENTRY_BYTES // 30)]
    big = {"name": "n1", "filterdevices": {"uuid": uuids, "index": []}}
    start = cm([big])
    rendered = render_node_config(start, {"n1": policy()}, CFG, NOW)
    assert nodeconfig(after(start, rendered)) == [big]
    assert "n1" not in json.loads(rendered.annotations.get(ANN_OWNED_ENTRIES, "{}"))
    assert any("left as it was" in note for note in rendered.notes)


def test_a_record_that_does_not_read_restores_nothing() -> None:
    for junk in ("{nope", "[]", '{"n1": 3}', '{"n1": [1]}', '{"n1": []}'):
        obj = configmap("ns", "n", {}, {ANN_ORIGINAL_ENTRIES: junk})
        assert original_entries(obj) == {}


def test_merged_keeps_a_filter_it_cannot_read_in_the_record_only() -> None:
    want = node_entry("n1", policy(), CFG.device_defaults)
    out = merged([{"name": "n1", "filterdevices": "GPU-x"}], want, frozenset(), "filterdevices")
    assert out["filterdevices"] == {"uuid": [], "index": []}
    text = merged([{"name": "n1", "devicesplitcount": "many"}], want, frozenset(), "filterdevices")
    assert text["devicesplitcount"] == 10  # the plugin could not read the person's


def test_an_ascend_hand_entry_is_merged_and_put_back() -> None:
    hand = {"name": "npu-1", "vDeviceCount": 8, "filterDevices": {"uuid": [], "index": [3]}}
    doc = "nodes:\n  - name: npu-1\n    vDeviceCount: 8\n    filterDevices:\n" + (
        "      uuid: []\n      index: [3]\n"
    )
    start = configmap("kube-system", "hami-device-node-config", {"node-config.yaml": doc})
    rc = NodeConfig(mode="ascend-vnpu", ascendVnpu=AscendVnpuSpec(hamiVnpuCore=True))
    rendered = render_ascend_node_config(start, {"npu-1": rc}, CFG, NOW)
    held = configmap(
        "kube-system", "hami-device-node-config", rendered.data, dict(rendered.annotations)
    )
    text = held["data"]["node-config.yaml"]
    assert "vDeviceCount: 8" in text and "hami-vnpu-core: true" in text
    assert "index: [3]" in text  # the person's filter, as they wrote it
    assert json.loads(rendered.annotations[ANN_ORIGINAL_ENTRIES]) == {"npu-1": [hand]}
    gone = render_ascend_node_config(held, {}, CFG, "later")
    assert gone.data["node-config.yaml"] == (  # the same entry (in block style)
        "nodes:\n  - name: npu-1\n    vDeviceCount: 8\n    filterDevices:\n"
        "      uuid: []\n      index:\n        - 3\n"
    )

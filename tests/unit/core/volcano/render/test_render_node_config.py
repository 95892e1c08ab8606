"""volcano-vgpu-node-config and hami-device-node-config: owned entries equal the released
configs, foreign entries stay exactly as they were, ownership is recorded on the ConfigMap."""

from __future__ import annotations

import json

import pytest

from tests.kit.volcano_fixtures import configmap, text
from vgpu_operator.contract import ANN_DATA_CHANGED_AT, ANN_OWNED_ENTRIES
from vgpu_operator.core.volcano.render import (
    RenderError,
    owned_entries,
    render_ascend_node_config,
    render_node_config,
)
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import AscendVnpuSpec, FilterDevices, HamiCoreSpec

CFG = OperatorConfig()
NOW = "2026-02-01T00:00:00Z"


def node_cm(doc: str, owned: dict[str, str] | None = None) -> dict[str, object]:
    ann = {ANN_OWNED_ENTRIES: json.dumps(owned)} if owned is not None else {}
    return configmap("kube-system", "volcano-vgpu-node-config", {"config.json": doc}, ann)


def entries(rendered_json: str) -> list[dict[str, object]]:
    return json.loads(rendered_json)["nodeconfig"]  # type: ignore[no-any-return]


def test_managed_nodes_get_entries_and_the_manifest_example_is_kept() -> None:
    released = {
        "gpu-a": NodeConfig(
            mode="hami-core", hamiCore=HamiCoreSpec(deviceSplitCount=4, deviceCoreScaling=1.5)
        ),
        "gpu-b": NodeConfig(mode="mig"),
        "cpu-c": NodeConfig(mode="whole-gpu"),
        "npu-d": NodeConfig(mode="ascend-vnpu"),
    }
    out = render_node_config(node_cm(text("manifest_node_config.json")), released, CFG, NOW)
    got = entries(out.data["config.json"])
    assert got[0] == json.loads(text("manifest_node_config.json"))["nodeconfig"][0]
    assert got[1:] == [
        {
            "name": "gpu-a",
            "operatingmode": "hami-core",
            "devicesplitcount": 4,
            "devicememoryscaling": 1,
            "devicecorescaling": 1.5,
            "filterdevices": {"uuid": [], "index": []},
        },
        {
            "name": "gpu-b",
            "operatingmode": "mig",
            "devicesplitcount": 10,
            "devicememoryscaling": 1,
            "devicecorescaling": 1,
            "filterdevices": {"uuid": [], "index": []},
        },
    ]
    assert out.changed and out.changed_entries == {"gpu-a", "gpu-b"}
    assert json.loads(out.annotations[ANN_OWNED_ENTRIES]) == {"gpu-a": NOW, "gpu-b": NOW}
    assert out.annotations[ANN_DATA_CHANGED_AT] == NOW


def test_rendering_twice_changes_nothing() -> None:
    released = {"gpu-a": NodeConfig(mode="hami-core")}
    first = render_node_config(node_cm(text("manifest_node_config.json")), released, CFG, NOW)
    cm = configmap("kube-system", "volcano-vgpu-node-config", first.data, first.annotations)
    second = render_node_config(cm, released, CFG, "2026-03-01T00:00:00Z")
    assert not second.changed and second.changed_entries == frozenset()
    assert second.data == first.data


def test_a_node_that_leaves_loses_only_its_own_entry() -> None:
    doc = json.dumps(
        {
            "nodeconfig": [
                {"name": "gpu-a", "operatingmode": "mig", "devicesplitcount": 10},
                {"name": "theirs", "operatingmode": "hami-core", "devicesplitcount": 3},
            ]
        }
    )
    out = render_node_config(node_cm(doc, {"gpu-a": "t0"}), {}, CFG, NOW)
    assert entries(out.data["config.json"]) == [
        {"name": "theirs", "operatingmode": "hami-core", "devicesplitcount": 3}
    ]
    assert out.changed_entries == {"gpu-a"}
    assert json.loads(out.annotations[ANN_OWNED_ENTRIES]) == {}


def test_an_existing_entry_is_taken_over_in_place_keeping_unknown_keys() -> None:
    doc = json.dumps(
        {
            "nodeconfig": [
                {
                    "name": "gpu-a",
                    "operatingmode": "hami-core",
                    "migstrategy": "none",
                    "devicesplitcount": 2,
                },
                {"name": "other", "operatingmode": "mig"},
                {"name": "gpu-a", "operatingmode": "mig"},
            ],
            "extra": {"keep": True},
        }
    )
    out = render_node_config(node_cm(doc), {"gpu-a": NodeConfig(mode="hami-core")}, CFG, NOW)
    doc_out = json.loads(out.data["config.json"])
    assert doc_out["extra"] == {"keep": True}
    # the duplicate (which the plugin would let win) is gone; the first one was updated in place
    assert [e["name"] for e in doc_out["nodeconfig"]] == ["gpu-a", "other"]
    assert doc_out["nodeconfig"][0]["migstrategy"] == "none"
    # the policy sets no split count: the person's stays (core.volcano.render.entry_origins)
    assert doc_out["nodeconfig"][0]["devicesplitcount"] == 2
    assert doc_out["nodeconfig"][0]["operatingmode"] == "hami-core"  # the policy's


def test_filter_devices_come_from_the_policy() -> None:
    rc = NodeConfig(
        mode="hami-core",
        hamiCore=HamiCoreSpec(filterDevices=FilterDevices(uuid=["GPU-x"], index=[1])),
    )
    out = render_node_config(None, {"gpu-a": rc}, CFG, NOW)
    assert out.create
    assert entries(out.data["config.json"])[0]["filterdevices"] == {"uuid": ["GPU-x"], "index": [1]}


def test_nothing_to_do_without_managed_or_owned_nodes() -> None:
    cm = node_cm(text("manifest_node_config.json"))
    out = render_node_config(cm, {"cpu": NodeConfig(mode="whole-gpu")}, CFG, NOW)
    assert not out.changed and out.data == cm["data"]
    assert not render_node_config(None, {}, CFG, NOW).changed


def test_unreadable_config_json_is_never_overwritten() -> None:
    with pytest.raises(RenderError, match="not valid JSON"):
        render_node_config(node_cm("{broken"), {"a": NodeConfig(mode="mig")}, CFG, NOW)
    with pytest.raises(RenderError, match="not a list"):
        render_node_config(node_cm('{"nodeconfig": {}}'), {"a": NodeConfig(mode="mig")}, CFG, NOW)


def test_owned_entries_tolerates_old_or_broken_annotations() -> None:
    assert owned_entries(node_cm("{}", None)) == {}
    cm = configmap("ns", "n", {}, {ANN_OWNED_ENTRIES: '["a", "b"]'})
    assert owned_entries(cm) == {"a": "", "b": ""}
    assert owned_entries(configmap("ns", "n", {}, {ANN_OWNED_ENTRIES: "{nope"})) == {}


def test_ascend_node_config_keeps_comments_and_foreign_nodes() -> None:
    doc = "# managed partly by hand\n" + text("hami_device_node_config.yaml")
    cm = configmap("kube-system", "hami-device-node-config", {"node-config.yaml": doc})
    rc = NodeConfig(
        mode="ascend-vnpu", ascendVnpu=AscendVnpuSpec(vDeviceCount=4, hamiVnpuCore=True)
    )
    out = render_ascend_node_config(cm, {"npu-1": rc, "gpu-a": NodeConfig(mode="mig")}, CFG, NOW)
    rendered = out.data["node-config.yaml"]
    assert rendered.startswith("# managed partly by hand\nnodes:\n")
    assert '  - name: "cnst-dev-w2"\n    hamiVnpuMode: hami-core\n' in rendered
    assert rendered.endswith("  - name: npu-1\n    vDeviceCount: 4\n    hami-vnpu-core: true\n")
    assert out.changed_entries == {"npu-1"}

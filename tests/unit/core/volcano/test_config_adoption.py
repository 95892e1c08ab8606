"""Adopting a hand-made Volcano/HAMi set-up (core.volcano.config_adoption): nothing is changed, and
so
nothing restarted, when what a component reads stays the same."""

from __future__ import annotations

import json
from typing import Any

import yaml

from tests.kit.volcano_fixtures import text
from vgpu_operator import contract
from vgpu_operator.core.volcano.config_adoption import flag_is_default
from vgpu_operator.core.volcano.placement import plan_placement
from vgpu_operator.core.volcano.render import render_node_config, render_plugin_args
from vgpu_operator.models.config import load_config
from vgpu_operator.models.node import NodeConfig

NOW = "2026-03-01T00:00:00Z"
CREATED = "2026-01-01T00:00:00Z"
SEED002 = load_config("resourceNames: {count: nvidia.com/gpu}")


def node_cm(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "volcano-vgpu-node-config", "creationTimestamp": CREATED},
        "data": {"config.json": json.dumps({"nodeconfig": entries})},
    }


def owned_times(annotations: dict[str, str]) -> dict[str, str]:
    return dict(json.loads(annotations[contract.ANN_OWNED_ENTRIES]))


def test_plugin_defaults_are_equal_values() -> None:
    assert flag_is_default("device-cores-scaling", "1")
    assert flag_is_default("device-cores-scaling", "1.0")
    assert flag_is_default("resource-memory-name", "volcano.sh/vgpu-memory")
    assert not flag_is_default("device-split-count", "10")  # the plugin's default is 2
    assert not flag_is_default("resource-name", "nvidia.com/gpu")
    assert not flag_is_default("node-name", "x")


def test_seed002_plugin_gets_no_flag_it_already_has_in_effect() -> None:
    ds = yaml.safe_load(text("seed002_plugin_daemonset.yaml"))
    # --resource-name=nvidia.com/gpu and --device-split-count=10 are set; the rest are the
    # plugin's defaults and equal the configured values: nothing to patch, nothing restarted
    assert render_plugin_args(ds, SEED002) is None
    other = load_config("resourceNames: {count: nvidia.com/gpu}\ngpuMemoryFactor: 2")
    patch = render_plugin_args(ds, other)
    assert patch is not None and patch.args[-1] == "--gpu-memory-factor=2"


def test_a_new_entry_equal_to_what_the_plugin_uses_is_taken_over_unchanged() -> None:
    hand = {"name": "other", "operatingmode": "hami-core", "devicesplitcount": 4}
    released = {
        "plain": NodeConfig(mode="hami-core", policy="p"),
        "split": NodeConfig.model_validate(
            {"mode": "hami-core", "policy": "p", "hamiCore": {"deviceSplitCount": 5}}
        ),
        "mig": NodeConfig.model_validate(
            {"mode": "mig", "policy": "m", "mig": {"partitioning": "dynamic"}}
        ),
    }
    rendered = render_node_config(node_cm([hand]), released, SEED002, NOW)
    entries = {e["name"]: e for e in json.loads(rendered.data["config.json"])["nodeconfig"]}
    assert set(entries) == {"other", "plain", "split", "mig"}  # explicit entries written
    assert entries["other"] == hand  # a hand-made entry of another node stays as it was
    # what the plugins read changes only for split and mig: only their pods are replaced
    assert rendered.changed_entries == frozenset({"split", "mig"})
    times = owned_times(rendered.annotations)
    assert times == {"plain": CREATED, "split": NOW, "mig": NOW}


def test_an_existing_entry_that_changes_is_a_change() -> None:
    before = {"name": "plain", "operatingmode": "mig", "devicesplitcount": 10}
    released = {"plain": NodeConfig(mode="hami-core", policy="p")}
    rendered = render_node_config(node_cm([before]), released, SEED002, NOW)
    assert rendered.changed_entries == frozenset({"plain"})
    assert owned_times(rendered.annotations) == {"plain": NOW}


def node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {}}


def daemonset(selector: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "volcano-device-plugin", "namespace": "volcano-system"},
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": selector,
                    "containers": [{"name": "volcano-device-plugin", "image": "x:v1.11.0"}],
                }
            }
        },
    }


def test_a_placement_already_exact_is_kept_and_one_that_is_not_is_patched() -> None:
    hand = {"volcano.sh/vgpu.enabled": "true"}
    served = {**hand, contract.LABEL_DEVICE_PLUGIN: "hami"}
    nodes = [node("a", served), node("b", served), node("c", {"other": "x"})]
    exact = plan_placement(daemonset(hand), "hami", nodes)
    assert exact.patch is not None and exact.adopted
    # a node that left the pool but kept the hand label: the plugin must go, the patch goes out
    nodes[1] = node("b", hand)
    extra = plan_placement(daemonset(hand), "hami", nodes)
    assert extra.patch is not None and extra.extra == ("b",) and not extra.adopted


def test_a_hand_written_entry_the_plugin_reads_as_the_rendered_one_is_taken_over() -> None:
    # seed 001: the person set the MIG node's mode in the node config and nothing else; the
    # plugin takes the rest from its defaults, which the rendered entry states explicitly
    hand = {"name": "mig", "operatingmode": "mig", "migstrategy": "none"}
    edited = node_cm([hand])
    edited["metadata"]["managedFields"] = [
        {"manager": "kubectl-edit", "time": "2026-02-01T00:00:00Z", "fieldsV1": {"f:data": {}}}
    ]
    released = {
        "mig": NodeConfig.model_validate(
            {"mode": "mig", "policy": "m", "mig": {"partitioning": "dynamic"}}
        )
    }
    rendered = render_node_config(edited, released, SEED002, NOW)
    (entry,) = json.loads(rendered.data["config.json"])["nodeconfig"]
    assert entry["operatingmode"] == "mig" and entry["devicesplitcount"] == 10
    assert entry["migstrategy"] == "none"  # a key the operator does not render is kept
    assert rendered.changed_entries == frozenset()  # no plugin pod is replaced for it
    # dated at the data's last write: a plugin pod started before that edit is still stale
    assert owned_times(rendered.annotations) == {"mig": "2026-02-01T00:00:00Z"}
    # the same entry for a node released as hami-core reads differently: a change
    hami = {"mig": NodeConfig(mode="hami-core", policy="p")}
    assert render_node_config(edited, hami, SEED002, NOW).changed_entries == {"mig"}


def test_a_zero_or_missing_field_reads_as_the_default_and_a_filter_is_kept() -> None:
    released = {"n": NodeConfig(mode="hami-core", policy="p")}
    zero = {"name": "n", "devicesplitcount": 0, "devicememoryscaling": 0}
    assert render_node_config(node_cm([zero]), released, SEED002, NOW).changed_entries == set()
    # the person's filter stays (core.volcano.render.entry_origins): nothing the plugin reads
    # changes, so no plugin pod is replaced for it
    filtered = {"name": "n", "filterdevices": {"uuid": [], "index": [1]}}
    rendered = render_node_config(node_cm([filtered]), released, SEED002, NOW)
    assert rendered.changed_entries == set()
    (entry,) = json.loads(rendered.data["config.json"])["nodeconfig"]
    assert entry["filterdevices"] == {"uuid": [], "index": [1]}
    # two entries by one name: the later one wins in the plugin, so it decides
    twice = [{"name": "n", "operatingmode": "mig"}, {"name": "n", "operatingmode": "hami-core"}]
    assert render_node_config(node_cm(twice), released, SEED002, NOW).changed_entries == set()

"""`core.volcano.plugin_refusal` and `plugin_identity`: which plugin values a policy must agree with
(HAMi's plugin ≤ v1.11 registers its flags' values whatever config.json says), which policies are
refused for it, and which DaemonSet counts as HAMi's plugin at all."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kit.nodekit import policy
from vgpu_operator.core.nodes.validate import REFUSED_REASON, parse_policy
from vgpu_operator.core.volcano.plugin_identity import is_hami_plugin
from vgpu_operator.core.volcano.plugin_refusal import (
    PluginNodeValues,
    plugin_node_values,
    refuse_ignored,
)
from vgpu_operator.models.config import load_config
from vgpu_operator.models.volcano_views import Version

HAMI = "docker.io/projecthami/volcano-vgpu-device-plugin"
ENFORCE = load_config("mode: enforce\n")
OBSERVE = load_config("mode: observe\n")


def daemonset(image: str, args: list[str] | None = None) -> dict[str, Any]:
    container = {"name": "volcano-device-plugin", "image": image, "args": args or []}
    return {
        "kind": "DaemonSet",
        "metadata": {"name": "volcano-device-plugin", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


V11 = PluginNodeValues("kube-system/volcano-device-plugin", Version(1, 11, 0), 10, 1, True)


@pytest.mark.parametrize(
    ("image", "hami"),
    [
        (f"{HAMI}:v1.11.0", True),
        ("aiharbor.msxf.local/test/projecthami/volcano-vgpu-device-plugin:v1.11.0", True),
        (f"{HAMI}@sha256:abc", True),
        ("volcanosh/volcano-device-plugin:v1.10.0", False),  # volcano-sh/devices' legacy plugin
        ("nvcr.io/nvidia/k8s-device-plugin:v0.17.0", False),
        ("example/volcano-vgpu-device-plugin-fork:v1.11.0", False),
    ],
)
def test_hami_plugin_is_recognised_by_its_image_name(image: str, hami: bool) -> None:
    assert is_hami_plugin(daemonset(image)) is hami


def test_enforce_compares_with_the_flags_the_operator_renders() -> None:
    # the DaemonSet says 7, but enforce sets --device-split-count from deviceDefaults (10)
    ds = daemonset(f"{HAMI}:v1.11.0", ["--device-split-count=7"])
    values = plugin_node_values(ds, ENFORCE)
    assert values is not None and values.rendered
    assert (values.split_count, values.core_scaling) == (10, 1)
    assert values.daemonset == "kube-system/volcano-device-plugin"


def test_other_modes_compare_with_the_daemonsets_flags_or_their_defaults() -> None:
    given = plugin_node_values(daemonset(f"{HAMI}:v1.11.0", ["--device-split-count", "7"]), OBSERVE)
    assert given is not None and (given.split_count, given.rendered) == (7, False)
    absent = plugin_node_values(daemonset(f"{HAMI}:v1.10.0"), OBSERVE)
    assert absent is not None and (absent.split_count, absent.core_scaling) == (2, 1)


@pytest.mark.parametrize(
    "image",
    [
        f"{HAMI}:v1.12.0",  # reads per-node values
        f"{HAMI}:latest",  # version unknown: nothing is refused on a guess
        "volcanosh/volcano-device-plugin:v1.10.0",  # not HAMi's (rule plugin-not-hami)
    ],
)
def test_nothing_to_compare_with(image: str) -> None:
    assert plugin_node_values(daemonset(image), ENFORCE) is None
    assert plugin_node_values(None, ENFORCE) is None


def hami(name: str, hami_core: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return policy(name, {"mode": "hami-core", "hamiCore": hami_core}, **kw)


def test_a_split_count_other_than_the_flag_is_refused_with_field_value_and_fix() -> None:
    [p] = refuse_ignored([parse_policy(hami("a", {"deviceSplitCount": 5}))], V11)
    assert p.usable and p.suspended  # held as if suspended: nothing rolls
    [r] = p.refused
    assert r.field == "spec.hamiCore.deviceSplitCount" and r.reason == REFUSED_REASON
    assert "5 cannot take effect" in r.message and "--device-split-count=10" in r.message
    assert "v1.12.0" in r.fix and "set spec.hamiCore.deviceSplitCount to 10" in r.fix
    assert "deviceDefaults.deviceSplitCount" in r.fix


def test_core_scaling_and_filter_devices_are_refused_too() -> None:
    raw = hami("a", {"deviceCoreScaling": 2, "filterDevices": {"index": [1]}})
    [p] = refuse_ignored([parse_policy(raw)], V11)
    assert [r.field for r in p.refused] == [
        "spec.hamiCore.deviceCoreScaling",
        "spec.hamiCore.filterDevices",
    ]


def test_values_the_plugin_uses_already_are_not_refused() -> None:
    same = hami("a", {"deviceSplitCount": 10, "deviceCoreScaling": 1, "filterDevices": {}})
    memory = hami("b", {"deviceMemoryScaling": 2})  # reported by another rule, not refused
    out = refuse_ignored([parse_policy(same), parse_policy(memory)], V11)
    assert [p.refused for p in out] == [(), ()]


def test_deleting_invalid_and_non_hami_policies_are_left_alone() -> None:
    deleting = hami("a", {"deviceSplitCount": 5}, deleting=True)
    invalid = hami("b", {"deviceSplitCount": 500})
    static = policy(
        "c",
        {
            "mode": "mig",
            "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]},
            "hamiCore": {"deviceSplitCount": 5},
        },
    )
    raws = [deleting, invalid, static]
    out = refuse_ignored([parse_policy(r) for r in raws], V11)
    assert [p.refused for p in out] == [(), (), ()]
    # without a plugin that ignores them (v1.12.0+, unknown): nothing is refused
    [p] = refuse_ignored([parse_policy(hami("d", {"deviceSplitCount": 5}))], None)
    assert not p.refused and not p.suspended

"""Property tests: rendering never drops a key, section, plugin or node entry the operator does
not own, and what it owns equals the desired state (and a second render changes nothing)."""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kit.volcano_fixtures import configmap, scheduler_cm, text, without_memory
from vgpu_operator.contract import ANN_ORIGINAL_ENTRIES, ANN_OWNED_ENTRIES
from vgpu_operator.core.volcano.render import (
    desired_nvidia,
    node_entry,
    render_device_config,
    render_node_config,
    render_scheduler_conf,
)
from vgpu_operator.core.volcano.render.common import plain
from vgpu_operator.core.volcano.render.entry_origins import merged
from vgpu_operator.core.volcano.render.node_config import NODE_FIELDS, node_policy_fields
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import HamiCoreSpec
from vgpu_operator.models.volcano_views import parse_scheduler_conf

NOW = "2026-02-01T00:00:00Z"
SPECIAL = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}
WORD = st.from_regex(r"[a-z][a-z0-9-]{0,7}", fullmatch=True).filter(lambda w: w not in SPECIAL)
SCALAR = st.one_of(st.integers(-1000, 100000), st.booleans(), WORD)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(WORD, inner, max_size=3)),
    max_leaves=6,
)
NODES = [f"node-{i}" for i in range(6)]
MODES = st.sampled_from(["hami-core", "mig", "whole-gpu", "ascend-vnpu"])
RELEASED = st.builds(
    NodeConfig,
    mode=MODES,
    hamiCore=st.one_of(
        st.none(),
        st.builds(HamiCoreSpec, deviceSplitCount=st.one_of(st.none(), st.integers(1, 128))),
    ),
)


def _entry(name: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, **extra}


ENTRY_EXTRA = st.dictionaries(
    st.one_of(st.sampled_from(sorted(NODE_FIELDS - {"name"})), WORD.map(lambda w: "x-" + w)),
    SCALAR,
    max_size=4,
)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    existing=st.lists(st.tuples(st.sampled_from(NODES), ENTRY_EXTRA), max_size=8),
    owned=st.sets(st.sampled_from(NODES)),
    desired=st.dictionaries(st.sampled_from(NODES), RELEASED, max_size=6),
    top=st.dictionaries(WORD.map(lambda w: "top-" + w), VALUE, max_size=3),
)
def test_node_config_keeps_foreign_entries_and_owns_exactly_the_desired(
    existing: list[tuple[str, dict[str, Any]]],
    owned: set[str],
    desired: dict[str, NodeConfig],
    top: dict[str, Any],
) -> None:
    doc = {**top, "nodeconfig": [_entry(n, e) for n, e in existing]}
    ann = {ANN_OWNED_ENTRIES: json.dumps({n: "t0" for n in owned})}
    cm = configmap("kube-system", "volcano-vgpu-node-config", {"config.json": json.dumps(doc)}, ann)
    cfg = OperatorConfig()
    out = render_node_config(cm, desired, cfg, NOW)
    result = json.loads(out.data["config.json"])
    mine = {n for n, rc in desired.items() if rc.mode in ("hami-core", "mig")}
    # other top-level keys untouched
    assert {k: v for k, v in result.items() if k != "nodeconfig"} == top
    # foreign entries: all there, unchanged, in their order
    foreign = [e for e in doc["nodeconfig"] if e["name"] not in mine | owned]
    assert [e for e in result["nodeconfig"] if e["name"] not in mine] == foreign
    # owned entries: one per desired node, the owned fields equal to the desired ones, a
    # person's entry taken over now merged in (core.volcano.render.entry_origins)
    for name in mine:
        got = [e for e in result["nodeconfig"] if e["name"] == name]
        assert len(got) == 1
        want = node_entry(name, desired[name], cfg.device_defaults)
        theirs = [_entry(n, e) for n, e in existing if n == name and name not in owned]
        if theirs:
            fields = node_policy_fields(desired[name])
            want = merged(theirs, want, fields, "filterdevices")
            assert json.loads(out.annotations[ANN_ORIGINAL_ENTRIES])[name] == theirs
        assert {k: v for k, v in got[0].items() if k in NODE_FIELDS} == {
            k: v for k, v in plain(want).items() if k in NODE_FIELDS
        }
    # ownership recorded; a second render changes nothing
    if mine or owned:
        assert set(json.loads(out.annotations[ANN_OWNED_ENTRIES])) == mine
    else:
        assert not out.changed  # nothing of the operator's: the ConfigMap is not touched
    again = configmap("kube-system", "volcano-vgpu-node-config", out.data, out.annotations)
    assert not render_node_config(again, desired, cfg, "later").changed


OWNED_NVIDIA = set(desired_nvidia(OperatorConfig())) | {"knownMigGeometries"}


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    sections=st.dictionaries(
        WORD.filter(lambda w: w not in ("nvidia", "vnpus")), VALUE, max_size=3
    ),
    nvidia_extra=st.dictionaries(WORD.map(lambda w: "x" + w), VALUE, max_size=3),
    stale=st.dictionaries(
        st.sampled_from(sorted(OWNED_NVIDIA - {"knownMigGeometries"})), SCALAR, max_size=4
    ),
    factor=st.integers(1, 16),
    split=st.integers(1, 128),
    mig=st.lists(
        st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA A30", "NVIDIA H200"]), max_size=3
    ),
)
def test_device_config_keeps_other_sections_and_keys_and_owns_the_rest(
    sections: dict[str, Any],
    nvidia_extra: dict[str, Any],
    stale: dict[str, Any],
    factor: int,
    split: int,
    mig: list[str],
) -> None:
    base = yaml.safe_load(text("manifest_device_config.yaml"))
    base["nvidia"].update(stale)
    base["nvidia"].update(nvidia_extra)
    doc = {**sections, **base}
    cfg = OperatorConfig.model_validate(
        {"gpuMemoryFactor": factor, "deviceDefaults": {"deviceSplitCount": split}}
    )
    cm = configmap(
        "kube-system",
        "volcano-vgpu-device-config",
        {"device-config.yaml": yaml.safe_dump(doc), "other": "x"},
    )
    out = render_device_config(cm, cfg, NOW, mig_models=mig)
    result = yaml.safe_load(out.data["device-config.yaml"])
    assert out.data["other"] == "x"
    assert {k: v for k, v in result.items() if k != "nvidia"} == sections
    assert {k: v for k, v in result["nvidia"].items() if k not in OWNED_NVIDIA} == nvidia_extra
    assert {k: result["nvidia"][k] for k in desired_nvidia(cfg)} == desired_nvidia(cfg)
    geos = result["nvidia"]["knownMigGeometries"]
    assert without_memory(geos[:3]) == without_memory(base["nvidia"]["knownMigGeometries"])
    assert len(geos) == 3 + len({m for m in mig if m != "NVIDIA A30"})
    again = configmap("kube-system", "volcano-vgpu-device-config", out.data)
    assert not render_device_config(again, cfg, "later", mig_models=mig).changed


PLUGIN = st.builds(
    lambda name, args, opts: {"name": name, **opts, **({"arguments": args} if args else {})},
    st.sampled_from(
        [
            "priority",
            "gang",
            "drf",
            "proportion",
            "nodeorder",
            "binpack",
            "capacity-card",
            "predicates",
            "deviceshare",
        ]
    ),
    st.dictionaries(WORD.map(lambda w: "arg." + w), SCALAR, max_size=2),
    st.dictionaries(
        st.sampled_from(["enablePreemptable", "enableJobOrder"]), st.booleans(), max_size=1
    ),
)
TIERS = st.lists(
    st.builds(lambda ps: {"plugins": ps}, st.lists(PLUGIN, max_size=5)), min_size=1, max_size=3
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    tiers=TIERS,
    configurations=st.lists(
        st.builds(
            lambda n, a: {"name": n, "arguments": a},
            WORD,
            st.dictionaries(WORD, SCALAR, max_size=2),
        ),
        max_size=2,
    ),
)
def test_scheduler_conf_keeps_every_other_plugin_tier_and_argument(
    tiers: list[dict[str, Any]], configurations: list[dict[str, Any]]
) -> None:
    doc: dict[str, Any] = {"actions": "enqueue, allocate, backfill", "tiers": tiers}
    if configurations:
        doc["configurations"] = configurations
    cfg = OperatorConfig()
    out = render_scheduler_conf(scheduler_cm(yaml.safe_dump(doc, sort_keys=False)), cfg, NOW)
    result = yaml.safe_load(out.data["volcano-scheduler.conf"])
    assert result["actions"] == doc["actions"]
    assert result.get("configurations") == doc.get("configurations")
    # every plugin other than the ones the operator adds is still in its tier, in order
    for before, after in zip(tiers, result["tiers"], strict=False):
        kept = [p for p in after["plugins"] if p in before["plugins"]]
        assert [p for p in before["plugins"] if p["name"] != "deviceshare"] == [
            p for p in kept if p["name"] != "deviceshare"
        ]
    assert len(result["tiers"]) == len(tiers)
    view = parse_scheduler_conf(out.data["volcano-scheduler.conf"])
    assert view.deviceshare.vgpu_enable and view.plugin("predicates") is not None
    assert view.deviceshare.known_geometries_cm == cfg.device_config.ref()
    ds_before = next((p for t in tiers for p in t["plugins"] if p["name"] == "deviceshare"), None)
    ds_after = view.plugin("deviceshare")
    assert ds_after is not None
    if ds_before is not None:
        for key, value in (ds_before.get("arguments") or {}).items():
            assert ds_after.arguments[key] == value  # other deviceshare arguments kept
    again = scheduler_cm(out.data["volcano-scheduler.conf"])
    assert not render_scheduler_conf(again, cfg, "later").changed

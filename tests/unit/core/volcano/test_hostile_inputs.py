"""Properties over what anyone may write into Node annotations and the watched ConfigMaps: no
input makes the pure part of a pass raise (node facts, the plan, the rules, the renderers, the
restart planner), every loader error is a finding naming the object and the key, a node with a
malformed or untrusted ownership record gets no write, and a YAML alias bomb costs nothing."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kit import hostile
from tests.kit.nodekit import EVERY_NODE, policy
from tests.kit.volcano_fixtures import healthy
from vgpu_devcluster.nodes import NodeSpec, gpu_node_manifest
from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.ownership import invalid_writes
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.volcano import restarts as planner
from vgpu_operator.core.volcano.render import (
    RenderError,
    render_ascend_node_config,
    render_device_config,
    render_node_config,
    render_scheduler_conf,
    vnpus_section,
)
from vgpu_operator.core.volcano.render.common import RoundTrip
from vgpu_operator.core.volcano.restarts import restart_inputs
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.writes import released_configs
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.volcano import (
    PayloadError,
    load_yaml_mapping,
    parse_device_config,
    parse_node_config,
)

NOW = datetime(2026, 3, 1, tzinfo=UTC)
BASE = healthy(OperatorConfig.model_validate({"ascendVnpu": {"enabled": True}}))
POLICIES = [
    parse_policy(policy("hami", {"mode": "hami-core", "nodeSelector": EVERY_NODE})),
    parse_policy(
        policy(
            "static",
            {
                "mode": "mig",
                "nodeSelector": EVERY_NODE,
                "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]},
            },
        )
    ),
]
CRASHED = "the rule could not be evaluated"


def crashed(snapshot: ClusterSnapshot) -> list[str]:
    return [f"{f.id}: {f.message}" for f in run_rules(snapshot).findings if CRASHED in f.message]


def enforce_pure(s: ClusterSnapshot) -> None:
    """What a configuration pass in enforce mode computes before it writes: every renderer
    (RenderError is how they refuse), the restart inputs and plan."""
    cfg = s.config
    stamp = "2026-03-01T00:00:00.000001Z"
    ref = cfg.ascend_vnpu.scheduler_device
    vnpus = vnpus_section(s.configmap(*ref.ref()), ref.key)
    renders: list[Any] = [
        lambda: render_device_config(
            s.configmap(*cfg.device_config.ref()),
            cfg,
            stamp,
            mig_models=s.mig_gpu_names,
            reported=s.reported_models,
            vnpus=vnpus,
        ),
        lambda: render_node_config(
            s.configmap(*cfg.node_config.ref()), released_configs(s), cfg, stamp,
            gpus=s.gpus_by_node,
        ),
        lambda: render_ascend_node_config(
            s.configmap(*cfg.ascend_node_config.ref()), released_configs(s), cfg, stamp,
            hami_vnpu_core=s.hami_vnpu_core,
        ),
        lambda: render_scheduler_conf(s.scheduler_cm, cfg, stamp) if s.scheduler_cm else None,
    ]  # fmt: skip
    for render in renders:
        with contextlib.suppress(RenderError):
            render()
    settings_ = planner.RestartSettings.from_config(cfg, 5.0)
    inputs = restart_inputs(s)
    planner.plan_restarts(inputs, {}, settings_, NOW)
    planner.plan_restarts(inputs, {}, settings_, NOW + timedelta(days=1))


def test_a_368_byte_alias_bomb_is_refused_before_it_costs_anything() -> None:
    assert len(hostile.BOMB) == 368
    started = time.process_time()
    with pytest.raises(PayloadError, match="aliases"):
        parse_device_config(hostile.BOMB)
    cm = copy.deepcopy(BASE.configmap("kube-system", "volcano-vgpu-device-config"))
    assert cm is not None
    cm["data"]["device-config.yaml"] = hostile.BOMB
    with pytest.raises(RenderError, match="aliases"):
        render_device_config(cm, BASE.config, "now")
    assert time.process_time() - started < 0.5


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(annotations=hostile.annotations(), which=st.sampled_from(POLICIES))
def test_node_annotations_never_make_the_plan_raise_and_a_bad_record_blocks_the_node(
    annotations: dict[str, str], which: Any
) -> None:
    raw = gpu_node_manifest(
        NodeSpec("n", "A100-SXM4-80GB", 8, labels={"pool": "a"}, annotations=annotations)
    )
    facts = node_facts(raw)
    plan = plan_cluster([facts], [which]).plans["n"]
    if contract.ANN_OWNED in facts.errors:
        assert plan.patch is None and plan.problems  # reported, nothing written
        assert plan.problems[0].reason == "OwnedRecordUnreadable"
    if plan.patch is not None:
        assert invalid_writes("n", plan.patch) == []


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(annotations=hostile.annotations())
def test_node_annotations_never_make_the_rules_or_renderers_raise(
    annotations: dict[str, str],
) -> None:
    raw = gpu_node_manifest(NodeSpec("hostile", "H100-80GB-HBM3", 8, annotations=annotations))
    snapshot = dataclasses.replace(BASE, nodes=[*BASE.nodes, raw])
    assert crashed(snapshot) == []
    enforce_pure(snapshot)


CONFIGMAP_KEYS = [
    ("kube-system", "volcano-vgpu-device-config", "device-config.yaml"),
    ("kube-system", "volcano-vgpu-node-config", "config.json"),
    ("volcano-system", "volcano-scheduler-configmap", "volcano-scheduler.conf"),
]


def _payload(draw: st.DrawFn, s: ClusterSnapshot, where: tuple[str, str, str]) -> str:
    cm = s.configmap(where[0], where[1])
    valid = ((cm or {}).get("data") or {}).get(where[2], "")
    return draw(hostile.text_like(valid) if valid else hostile.text_like())


@st.composite
def hostile_configmaps(draw: st.DrawFn) -> tuple[ClusterSnapshot, tuple[str, str, str], str]:
    where = draw(st.sampled_from(CONFIGMAP_KEYS))
    text = _payload(draw, BASE, where)
    items = copy.deepcopy(BASE.configmaps)
    cm = next(c for c in items if (c["metadata"]["namespace"], c["metadata"]["name"]) == where[:2])
    cm["data"][where[2]] = text
    annotations = cm["metadata"].setdefault("annotations", {})
    if draw(st.booleans()):
        annotations[contract.ANN_DATA_CHANGED_AT] = draw(st.sampled_from(hostile.TIMESTAMPS))
    if draw(st.booleans()):
        annotations[contract.ANN_OWNED_ENTRIES] = draw(hostile.text_like('{"gpu-a": "x"}'))
    return dataclasses.replace(BASE, configmaps=items), where, text


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=hostile_configmaps())
def test_configmap_payloads_never_make_a_pass_raise_and_errors_name_the_key(
    case: tuple[ClusterSnapshot, tuple[str, str, str], str],
) -> None:
    snapshot, (namespace, name, key), text = case
    results = run_rules(snapshot)
    assert [f for f in results.findings if CRASHED in f.message] == []
    enforce_pure(snapshot)
    if key == "device-config.yaml":
        try:
            parse_device_config(text)
        except PayloadError:
            named = [
                f
                for f in results.findings
                if f.id == "payload-readable" and f"{namespace}/{name}, key {key}" in f.message
            ]
            assert named, [f.message for f in results.findings]


@pytest.mark.parametrize(
    "text", hostile.HOSTILE_TEXTS[:-1], ids=range(len(hostile.HOSTILE_TEXTS) - 1)
)
@pytest.mark.parametrize("where", CONFIGMAP_KEYS, ids=lambda w: w[2])
def test_each_hostile_payload_is_a_finding_naming_the_configmap_and_key(
    where: tuple[str, str, str], text: str
) -> None:
    items = copy.deepcopy(BASE.configmaps)
    cm = next(c for c in items if (c["metadata"]["namespace"], c["metadata"]["name"]) == where[:2])
    cm["data"][where[2]] = text
    snapshot = dataclasses.replace(BASE, configmaps=items)
    results = run_rules(snapshot)
    assert [f for f in results.findings if CRASHED in f.message] == []
    named = [
        f.message
        for f in results.findings
        if f.id == "payload-readable" and f"{where[0]}/{where[1]}, key {where[2]}" in f.message
    ]
    load = {
        "device-config.yaml": parse_device_config,
        "config.json": parse_node_config,
        "volcano-scheduler.conf": lambda t: load_yaml_mapping(t, "conf"),
    }[where[2]]
    try:
        load(text)
        if not where[2].endswith(".json"):
            RoundTrip(text)  # what the renderers read it with: month 13 fails only there
        refused = False
    except (PayloadError, RenderError):
        refused = True
    assert len(named) == int(refused), [f.message for f in results.findings]
    enforce_pure(snapshot)


@pytest.mark.parametrize("stamp", hostile.TIMESTAMPS)
def test_timestamps_are_clamped_or_refused(stamp: str) -> None:
    items = copy.deepcopy(BASE.configmaps)
    for cm in items:
        cm["metadata"].setdefault("annotations", {})[contract.ANN_DATA_CHANGED_AT] = stamp
    snapshot = dataclasses.replace(BASE, configmaps=items)
    assert crashed(snapshot) == []
    enforce_pure(snapshot)


def test_a_record_naming_what_the_operator_may_not_own_is_a_warning_naming_the_node() -> None:
    """A forged (or older) ownership record blocks nothing and is never acted on, but `doctor`
    names it: someone could edit Node annotations who perhaps should not."""
    nodes = copy.deepcopy(BASE.nodes)
    forged = nodes[0]
    forged["metadata"].setdefault("annotations", {})[contract.ANN_OWNED] = hostile.OWNED_TEXTS[1]
    results = run_rules(dataclasses.replace(BASE, nodes=nodes))
    name = forged["metadata"]["name"]
    said = [
        f
        for f in results.findings
        if f.id == "payload-readable"
        and f"Node {name}, annotation {contract.ANN_OWNED}" in f.message
    ]
    assert [(f.severity, "label kubernetes.io/hostname=forged" in f.message) for f in said] == [
        ("warning", True)
    ]

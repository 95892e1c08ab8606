"""Volcano's `predicates` plugin and DRA: up to v1.14.x it runs kube-scheduler's DRA plugin only
with `predicate.DynamicResourceAllocationEnable: true` (volcano-sh/volcano@v1.14.4:
pkg/scheduler/plugins/predicates/predicates.go reads it, default false); from v1.15.0 it no longer
reads it (volcano-sh/volcano@v1.15.1, same file). So the operator adds it, as a YAML boolean, once
a node is in (or on its way to) a dra pool under a scheduler that reads it or of an unknown
version, through the same scheduler-conf render and restart as the deviceshare arguments; under
v1.15 nothing changes."""

from __future__ import annotations

import re

import pytest

from tests.kit.volcano_fixtures import deployment, gpu_node, healthy, replace, scheduler_cm, text
from vgpu_operator import contract
from vgpu_operator.core.volcano.configmap_writes import configmaps, scheduler_needs_dra
from vgpu_operator.core.volcano.render import render_scheduler_conf
from vgpu_operator.core.volcano.restarts import restart_inputs
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.times import parse_time
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.node import NodeConfig

NOW = "2026-02-01T00:00:00Z"
KEY = "volcano-scheduler.conf"
ARG = "predicate.DynamicResourceAllocationEnable"
DRA_NODE = NodeConfig(mode="dra", policy="dra-pool", generation=1)


def test_the_argument_is_added_to_predicates_as_a_boolean_and_nothing_else_moves() -> None:
    before = text("seed000_scheduler.conf")
    out = render_scheduler_conf(scheduler_cm(before), OperatorConfig(), NOW, dra=True)
    assert out.changed
    assert out.data[KEY] == before.replace(
        "  - name: predicates\n",
        f"  - name: predicates\n    arguments:\n      {ARG}: true\n",
    )
    again = render_scheduler_conf(scheduler_cm(out.data[KEY]), OperatorConfig(), NOW, dra=True)
    assert not again.changed  # once there, no further write (and so no further restart)


def test_a_quoted_or_false_value_is_made_the_boolean_volcano_1_14_reads() -> None:
    conf = text("seed000_scheduler.conf").replace(
        "  - name: predicates\n",
        f'  - name: predicates\n    arguments:\n      {ARG}: "true"  # hand-written\n',
    )
    out = render_scheduler_conf(scheduler_cm(conf), OperatorConfig(), NOW, dra=True)
    assert out.changed  # the comment stays in its column
    assert re.search(rf"{ARG}: true +# hand-written\n", out.data[KEY]), out.data[KEY]


def test_without_dra_the_conf_is_left_as_it_is_an_existing_argument_too() -> None:
    conf = text("seed000_scheduler.conf").replace(
        "  - name: predicates\n",
        f"  - name: predicates\n    arguments:\n      {ARG}: true\n",
    )
    out = render_scheduler_conf(scheduler_cm(conf), OperatorConfig(), NOW)
    assert not out.changed  # never taken off: harmless without DRA pools


def with_dra_node(version: str, config: NodeConfig = DRA_NODE) -> ClusterSnapshot:
    s = healthy()
    nodes = [*s.nodes, gpu_node("gpu-dra", "A100-SXM4-40GB", 1, released=config, tainted=False)]
    return replace(s, nodes=nodes, deployments=[deployment(version)])


@pytest.mark.parametrize(
    ("version", "written"),
    [("v1.13.0", True), ("v1.14.4", True), ("v1.15.0", False), ("v1.15.1", False)],
)
def test_the_scheduler_conf_gains_the_argument_only_where_volcano_reads_it(
    version: str, written: bool
) -> None:
    s = with_dra_node(version)
    assert scheduler_needs_dra(s) is written
    after, writes = configmaps(s, NOW, [])
    sched = [w for w in writes if w.name == "volcano-scheduler-configmap"]
    assert bool(sched) is written
    conf = after.scheduler_cm
    assert conf is not None
    assert (f"{ARG}: true" in conf["data"][KEY]) is written
    if written:  # the change is stamped: the scheduler's restart follows, as for deviceshare
        assert restart_inputs(after).scheduler_reads_changed == parse_time(NOW)


def test_no_dra_node_no_argument_and_an_unknown_version_gets_it() -> None:
    assert not scheduler_needs_dra(replace(healthy(), deployments=[deployment("v1.14.4")]))
    s = with_dra_node("latest")
    assert s.scheduler_container is not None and s.scheduler_container.version is None
    assert scheduler_needs_dra(s)  # harmless where it is not read; needed where it is


def test_a_node_on_its_way_to_a_dra_pool_already_counts() -> None:
    s = with_dra_node("v1.14.4", config=NodeConfig(mode="hami-core", policy="pool"))
    node = s.nodes[-1]
    node["metadata"]["annotations"][contract.ANN_TARGET] = DRA_NODE.to_annotation()
    assert [n["metadata"]["name"] for n in s.dra_nodes] == ["gpu-dra"]
    assert scheduler_needs_dra(s)

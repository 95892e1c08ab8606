"""The controller's read-only cache (`controller.cache`): what the passes read of the watches,
nothing before a reader's kinds are listed, the gates before the first passes, and one cache
and one configuration state handed to every part."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.kit.cachekit import empty_cache
from tests.kit.nodekit import node
from vgpu_operator.controller.app import Controller, Settings, after
from vgpu_operator.controller.policies import PolicyCache
from vgpu_operator.controller.volcano import VolcanoOptions
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.kubeapi.watch import Listing


def controller(volcano: bool, policies: PolicyCache | None = None) -> Controller:
    settings = Settings(credentials=Credentials(), volcano=VolcanoOptions(enabled=volcano))
    return Controller(settings, None, policies)  # type: ignore[arg-type]  # no request is made


async def test_no_pass_before_both_nodes_and_policies_are_listed() -> None:
    cache = empty_cache()
    started = asyncio.Event()

    async def first_pass() -> None:
        started.set()

    task = asyncio.create_task(after(cache.wait_synced(), first_pass()))
    cache.nodes.synced.set()
    await asyncio.sleep(0.05)
    assert not started.is_set()
    assert cache.node_objects() is not None  # the configuration rules need only the nodes
    cache.policies.synced.set()
    await asyncio.wait_for(task, 5)
    assert started.is_set()


async def test_no_configuration_pass_before_pods_and_daemonsets_are_listed() -> None:
    cache = empty_cache(daemonsets=True)
    assert cache.daemonsets is not None
    started = asyncio.Event()

    async def first_pass() -> None:
        started.set()

    assert cache.gpu_pods() is None and cache.daemonset_objects() is None
    task = asyncio.create_task(after(cache.wait_sources(), first_pass()))
    cache.pods.synced.set()
    await asyncio.sleep(0.05)
    assert not started.is_set()
    cache.daemonsets.synced.set()
    await asyncio.wait_for(task, 5)
    assert started.is_set()
    assert cache.gpu_pods() == [] and cache.daemonset_objects() == []


async def test_without_a_configuration_reconciler_no_daemonset_is_waited_for() -> None:
    cache = empty_cache()  # DaemonSets not watched
    cache.nodes.synced.set()
    cache.policies.synced.set()
    await asyncio.wait_for(cache.wait_reconcile_sources(), 1)
    assert cache.plugin_daemonset() is None and cache.plugin_values() is None
    assert cache.daemonset_objects() is None  # (a pass would list them itself)


async def test_what_the_passes_read_of_the_nodes() -> None:
    cache = empty_cache()
    assert cache.node_objects() is None  # not listed yet
    raw: dict[str, Any] = node("n1", {"pool": "a"})
    raw["metadata"]["uid"] = "uid-n1"
    await cache.nodes._listed(Listing([raw], "1"))
    facts, policies = cache.snapshot()
    assert list(facts) == ["n1"] and facts["n1"].labels["pool"] == "a" and policies == {}
    assert cache.node_uid("n1") == "uid-n1" and cache.node_uid("gone") == ""
    held = cache.node_object("n1")
    assert held is not None and held["metadata"]["name"] == "n1"
    assert cache.node_object("gone") is None
    assert [n["metadata"]["name"] for n in cache.node_objects() or []] == ["n1"]


def test_a_drain_sees_no_pod_list_before_the_pod_index_is_listed() -> None:
    cache = empty_cache()
    assert cache.gpu_consumers("n1") is None  # unknown: no node may start or leave Draining
    cache.pods.synced.set()
    assert cache.gpu_consumers("n1") == []


def test_one_cache_and_one_configuration_state_for_every_part() -> None:
    kopf_index = PolicyCache({})  # as Kopf hands it over at start-up: still empty
    ctl = controller(volcano=True, policies=kopf_index)
    assert ctl.cache.policies is kopf_index  # (empty is not absent)
    reconciler, volcano, state = ctl.reconciler, ctl.volcano, ctl.configuration
    assert volcano is not None and state is not None and reconciler.rollout is not None
    assert reconciler.cache is ctl.cache and volcano.cache is ctl.cache
    assert reconciler.rollout.cache is ctl.cache and reconciler.status_writer.cache is ctl.cache
    assert volcano.published is state  # what the configuration passes publish ...
    assert reconciler.status_writer.configuration is state  # ... the statuses read
    assert reconciler.rollout.plugin_readings.state is state  # ... and the rollout waits on
    assert volcano.nodes_idle is reconciler.idle is reconciler.node_writer.idle
    assert ctl.cache.daemonsets is not None and ctl.cache.named  # watched for the passes

    off = controller(volcano=False)
    assert off.volcano is None and off.configuration is None
    assert off.cache.daemonsets is None and off.cache.named == []
    assert (
        off.reconciler.rollout is not None and off.reconciler.rollout.plugin_readings.state is None
    )

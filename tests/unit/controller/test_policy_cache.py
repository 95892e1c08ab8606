"""Kopf's policy index as the controller reads it (`controller.policies`), and when it counts as
holding the cluster's policies: every policy of the controller's own listing, at that
resourceVersion or newer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.kit.fakeapi import FakeApi
from vgpu_operator import kubeapi
from vgpu_operator.controller.policies import PolicyCache, index_entry

POLICIES = kubeapi.policy_path()


def policy(name: str, version: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "vgpu.volcano.sh/v1alpha1",
        "kind": "VGPUNodePolicy",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": version},
        "spec": {"nodeSelector": {"matchLabels": {"pool": name}}, "mode": "whole-gpu", **spec},
    }


def kopf_index(*bodies: dict[str, Any]) -> dict[str, list[Any]]:
    """What Kopf's index holds after the index handler ran on each body: name -> store."""
    out: dict[str, list[Any]] = {}
    for body in bodies:
        for key, value in index_entry(body).items():
            out[key] = [value]
    return out


def test_the_index_entry_is_the_parsed_policy_under_its_name() -> None:
    [(name, entry)] = index_entry(policy("a", "7")).items()
    assert name == "a"
    assert entry.resource_version == "7" and entry.uid == "uid-a"
    assert entry.parsed.policy is not None and entry.parsed.policy.spec.mode == "whole-gpu"


def test_the_cache_reads_each_policy_from_its_store() -> None:
    cache = PolicyCache(kopf_index(policy("a", "1"), policy("b", "2")))
    assert sorted(cache.items) == ["a", "b"]
    entry = cache.get("b")
    assert entry is not None and entry.resource_version == "2"
    assert cache.get("c") is None
    assert len(cache) == 2


def test_holds_needs_every_listed_policy_at_its_version_or_newer() -> None:
    cache = PolicyCache(kopf_index(policy("a", "10"), policy("b", "3")))
    assert cache.holds({})
    assert cache.holds({"a": "10", "b": "2"})
    assert not cache.holds({"a": "11"})  # the index is behind the listing
    assert not cache.holds({"c": "1"})  # not in the index yet


async def test_synced_once_the_index_catches_up_with_the_listing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeApi().install(monkeypatch)
    fake.route("GET", POLICIES, {"items": [policy("a", "5")]})
    index: dict[str, list[Any]] = {}
    cache = PolicyCache(index)
    waiting = asyncio.create_task(cache.wait_listed(None))  # type: ignore[arg-type]
    await asyncio.sleep(0.2)
    assert not cache.synced.is_set()  # Kopf has not delivered the listed policy yet
    index.update(kopf_index(policy("a", "5")))
    await asyncio.wait_for(waiting, 2)
    assert cache.synced.is_set()


async def test_an_empty_cluster_is_synced_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeApi().install(monkeypatch)
    fake.route("GET", POLICIES, {"items": []})
    cache = PolicyCache({})
    await asyncio.wait_for(cache.wait_listed(None), 1)  # type: ignore[arg-type]
    assert cache.synced.is_set()


async def test_a_policy_deleted_before_kopf_listed_does_not_hold_the_sync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Listed by the controller, gone before Kopf's listing: the next listing no longer has it."""
    monkeypatch.setattr("vgpu_operator.controller.policies.RELIST_SECONDS", 0.2)
    fake = FakeApi().install(monkeypatch)
    fake.route("GET", POLICIES, {"items": [policy("gone", "4")]})
    cache = PolicyCache({})
    waiting = asyncio.create_task(cache.wait_listed(None))  # type: ignore[arg-type]
    await asyncio.sleep(0.3)
    assert not cache.synced.is_set()
    fake.route("GET", POLICIES, {"items": []})
    await asyncio.wait_for(waiting, 2)
    assert cache.synced.is_set()


async def test_a_refused_listing_is_taken_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("vgpu_operator.controller.policies.RELIST_SECONDS", 0.1)
    fake = FakeApi().install(monkeypatch)
    fake.route("GET", POLICIES, error=kubeapi.TooManyRequests(429, "storage is initializing"))
    cache = PolicyCache({})
    waiting = asyncio.create_task(cache.wait_listed(None))  # type: ignore[arg-type]
    await asyncio.sleep(0.25)
    assert not cache.synced.is_set()
    fake.route("GET", POLICIES, {"items": []})
    await asyncio.wait_for(waiting, 2)
    assert cache.synced.is_set()

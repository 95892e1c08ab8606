"""The policy reconciler before its configuration reconciler's first pass has read the scheduler
(`core.volcano.soft_slicing.NOT_READ_YET`): an ascend-vnpu pool that may turn hami-vnpu-core soft
slicing on waits, its node unwritten, with no Warning and, while the wait is short, no status
write; once the wait lasts `WAIT_REPORTED_AFTER` its status says WaitingForScheduler; the pass
that reads the scheduler refuses it (Volcano v1.15.1, the install manifests') or accepts it
(v1.16.0-alpha.1) on its arm64 node. A hami-core pool in the same passes is written at once."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.kit.cachekit import empty_cache
from tests.kit.fakeapi import FakeApi
from tests.kit.nodekit import node, policy
from tests.kit.plan_world import NOW, PRESENT, snapshot, with_scheduler
from vgpu_operator import contract
from vgpu_operator.controller.cache import ConfigurationState
from vgpu_operator.controller.kept import policy_entry
from vgpu_operator.controller.policies import PolicyCache
from vgpu_operator.controller.policy_writes import WAIT_REPORTED_AFTER
from vgpu_operator.controller.reconciler import Reconciler, ReconcilerOptions
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.soft_slicing import SOFT_SLICING_REFUSED, WAITING_FOR_SCHEDULER
from vgpu_operator.kubeapi.watch import Listing

ARM = {contract.ASCEND_CHIP_LABEL: "910B3", "pool": "npu", "kubernetes.io/arch": "arm64"}
RAWS = [
    policy(
        "npu",
        {
            "nodeSelector": {"matchLabels": {"pool": "npu"}},
            "mode": "ascend-vnpu",
            "ascendVnpu": {"hamiVnpuCore": True},
        },
    ),
    policy("gpu", {"nodeSelector": {"matchLabels": {"pool": "gpu"}}, "mode": "hami-core"}),
]


class World:
    """One controller's policy reconciler over `s`'s nodes and DaemonSets, its clock `at`, the
    configuration reconciler's state (nothing published yet) and what it posted and wrote."""

    def __init__(self, s: ClusterSnapshot, api: FakeApi) -> None:
        self.s, self.api, self.at = s, api, NOW
        self.configuration = ConfigurationState()
        self.warnings: list[tuple[str, str, str]] = []
        self.cache = empty_cache(s.config, daemonsets=True)
        self.cache.policies = PolicyCache(
            {str(r["metadata"]["name"]): [policy_entry(r)] for r in RAWS}
        )
        self.reconciler = Reconciler(
            api=None,  # type: ignore[arg-type]  # every request goes to the FakeApi
            cache=self.cache,
            post_event=self.post,
            options=ReconcilerOptions(resync_seconds=3600, status_interval=0.0),
            configuration=self.configuration,
            now=lambda: self.at,
        )

    async def listed(self) -> None:
        assert self.cache.daemonsets is not None
        await self.cache.nodes._listed(Listing(self.s.nodes, "1"))
        await self.cache.daemonsets._listed(Listing(self.s.daemonsets, "1"))

    def post(self, ref: Any, type_: str, reason: str, message: str) -> None:
        if ref["kind"] == contract.POLICY_KIND and type_ == "Warning":
            self.warnings.append((ref["metadata"]["name"], reason, message))

    async def full_pass(self) -> None:
        await self.reconciler.reconcile(full=True, only=set())

    def nodes_written(self) -> list[str]:
        return [c.name for c in self.api.calls if c.method == "PATCH" and "/nodes/" in c.path]

    def conditions(self, name: str) -> dict[str, tuple[str, str, str]]:
        """The policy's conditions as the last status PATCH sent them ({}: none sent)."""
        bodies = self.api.bodies("PATCH", rf".*/vgpunodepolicies/{name}/status")
        if not bodies:
            return {}
        return {
            c["type"]: (c["status"], c["reason"], c.get("message", ""))
            for c in bodies[-1]["status"]["conditions"]
        }

    def publish(self, s: ClusterSnapshot) -> bool:
        """The configuration pass published `s`, as `Controller.configuration_passed` tells
        the reconciler: whether that asked for a full pass."""
        self.configuration.snapshot = s
        self.configuration.read_at = self.at
        return self.reconciler.configuration_published(s)


@pytest.fixture
async def world(monkeypatch: pytest.MonkeyPatch) -> World:
    nodes = [node("npu-0", ARM, gpu="cpu"), node("a100-0", {"pool": "gpu", **PRESENT})]
    # the demo's objects (Volcano v1.15.1) and HAMi's Ascend plugin
    w = World(snapshot(nodes, ascend=True), FakeApi().install(monkeypatch))
    await w.listed()
    return w


def later(w: World, by: timedelta) -> datetime:
    w.at = w.at + by
    return w.at


async def test_the_pool_waits_unwritten_then_is_refused_under_volcano_1_15(world: World) -> None:
    w = world
    await w.full_pass()
    assert w.nodes_written() == ["a100-0"]  # the hami-core pool is not held
    assert w.warnings == []  # a wait is no refusal
    assert w.conditions("npu") == {}  # a short wait writes no status
    await w.full_pass()
    assert w.nodes_written() == ["a100-0"] and w.conditions("npu") == {}

    later(w, WAIT_REPORTED_AFTER)  # the wait lasts: the status says so
    await w.full_pass()
    conditions = w.conditions("npu")
    assert conditions["Reconciling"][:2] == ("True", WAITING_FOR_SCHEDULER)
    assert conditions["Ready"][:2] == ("False", WAITING_FOR_SCHEDULER)
    assert conditions["Stalled"][:2] == ("False", "NoProblems")
    assert "not read yet" in conditions["Reconciling"][2]
    assert w.nodes_written() == ["a100-0"] and w.warnings == []

    assert w.publish(w.s)  # the first configuration pass read v1.15.1: a full pass is asked
    await w.full_pass()
    assert w.nodes_written() == ["a100-0"]  # refused: npu-0 still untouched
    [(name, reason, message)] = w.warnings
    assert (name, reason) == ("npu", SOFT_SLICING_REFUSED)
    assert "Volcano v1.15.1" in message and "upgrade Volcano to v1.16.0" in message
    stalled = w.conditions("npu")["Stalled"]
    assert stalled[:2] == ("True", SOFT_SLICING_REFUSED) and "v1.15.1" in stalled[2]


async def test_a_short_wait_ends_in_acceptance_without_a_waiting_status(world: World) -> None:
    w = world
    await w.full_pass()
    assert w.nodes_written() == ["a100-0"] and w.conditions("npu") == {}
    later(w, WAIT_REPORTED_AFTER / 3)
    assert w.publish(with_scheduler(w.s, "v1.16.0-alpha.1"))  # a 1.16 pre-release, arm64
    await w.full_pass()
    assert sorted(w.nodes_written()) == ["a100-0", "npu-0"]  # npu-0 taken into its pool
    assert w.warnings == []
    sent = w.api.bodies("PATCH", r".*/vgpunodepolicies/npu/status")
    reasons = {c["reason"] for body in sent for c in body["status"]["conditions"]}
    assert WAITING_FOR_SCHEDULER not in reasons and SOFT_SLICING_REFUSED not in reasons
    assert w.conditions("npu")["Stalled"][0] == "False"

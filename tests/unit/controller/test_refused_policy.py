"""The policy reconciler with a plugin that cannot apply the policy's per-node values
(`core.volcano.plugin_refusal`): no node is written, the status says Stalled with the field and
the fix, one Warning Event on the policy however many passes; once the plugin can apply them
(upgraded), the nodes are configured."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kit.cachekit import StubCache
from tests.kit.fakeapi import FakeApi, FakeNodes
from vgpu_operator.controller.reconciler import Reconciler, ReconcilerOptions
from vgpu_operator.core.nodes.validate import REFUSED_REASON
from vgpu_operator.core.volcano.plugin_refusal import PluginNodeValues
from vgpu_operator.models.volcano_views import Version

SPLIT_5 = {
    "mode": "hami-core",
    "nodeSelector": {"matchLabels": {"pool": "a"}},
    "hamiCore": {"deviceSplitCount": 5},
}
V11 = PluginNodeValues("kube-system/volcano-device-plugin", Version(1, 11, 0), 10, 1, True)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNodes:
    return FakeNodes(FakeApi(strict=True).install(monkeypatch), ["n1", "n2"], SPLIT_5)


async def test_refused_policy_writes_no_node_and_warns_once(fake: FakeNodes) -> None:
    events: list[tuple[str, str, str, str]] = []
    plugin: list[PluginNodeValues | None] = [V11]

    def post(ref: Any, type_: str, reason: str, message: str) -> None:
        events.append((ref["kind"], type_, reason, message))

    r = Reconciler(
        api=None,  # type: ignore[arg-type]  # the stand-in ignores it
        cache=StubCache(fake.snapshot, plugin=lambda: plugin[0]),
        post_event=post,
        options=ReconcilerOptions(resync_seconds=3600, status_interval=0.0),
    )
    for _ in range(3):
        await r.reconcile(full=True, only=set())
    assert not fake.patches  # no node taken, cordoned or configured
    stalled = [c for c in fake.status[-1]["conditions"] if c["type"] == "Stalled"]
    assert stalled[0]["status"] == "True" and stalled[0]["reason"] == REFUSED_REASON
    assert "spec.hamiCore.deviceSplitCount" in stalled[0]["message"]
    warnings = [e for e in events if e[2] == REFUSED_REASON]
    assert len(warnings) == 1, events
    kind, type_, _, message = warnings[0]
    assert (kind, type_) == ("VGPUNodePolicy", "Warning")
    assert "--device-split-count=10" in message and "v1.12.0" in message
    # the plugin upgraded (it applies per-node values): the nodes are configured
    plugin[0] = None
    await r.reconcile(full=True, only=set())
    assert fake.count() == {"n1": 1, "n2": 1}
    assert len([e for e in events if e[2] == REFUSED_REASON]) == 1

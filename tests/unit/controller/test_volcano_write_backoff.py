"""The configuration reconciler's writes against a stand-in apiserver: a refused ConfigMap,
DaemonSet or Deployment write does not fail the pass, backs that object off (never before a
Retry-After), and leaves the other writes alone."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.kit.fakeapi import FakeApi
from tests.kit.volcano_fixtures import edit, healthy, text
from vgpu_operator import kubeapi
from vgpu_operator.controller.volcano_writes import enforce_configuration, execute
from vgpu_operator.controller.write_results import WriteBackoff, retry_at
from vgpu_operator.core.backoff import Backoff
from vgpu_operator.core.volcano.restarts import RestartAction
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.writes import Restart, WritePlan, restart_body

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
NODE_CM = ("ConfigMap", "kube-system", "volcano-vgpu-node-config")
DEVICE_CM = ("ConfigMap", "kube-system", "volcano-vgpu-device-config")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return FakeApi().install(monkeypatch)


def stale() -> ClusterSnapshot:
    """The node config as the manifest installed it, and no device config yet: a PATCH and a
    POST to make."""
    snap = edit(
        healthy(),
        "configmaps",
        NODE_CM[2],
        lambda cm: cm.update(data={"config.json": text("manifest_node_config.json")}),
    )
    kept = [cm for cm in snap.configmaps if cm["metadata"]["name"] != DEVICE_CM[2]]
    return dataclasses.replace(snap, configmaps=kept)


def backoff() -> WriteBackoff:
    return Backoff(initial=2.0, cap=300.0, jitter=0.0)


def refused(status: int, message: str, **headers: str) -> kubeapi.ApiError:
    return kubeapi.error_for(status, "", body=json.dumps({"message": message}), headers=headers)


async def test_a_refused_configmap_backs_off_and_the_other_writes_go_on(fake: FakeApi) -> None:
    fake.refuse("volcano-vgpu-node-config", refused(422, "denied by policy x"))
    b = backoff()
    _, result = await enforce_configuration(None, stale(), T0, b)
    assert [w.name for w in result.written] == [DEVICE_CM[2]]
    [r] = result.refused
    assert (r.kind, r.namespace, r.name) == NODE_CM
    assert r.message == "422 denied by policy x" and r.next_at == T0 + timedelta(seconds=2)
    assert retry_at(b) == T0 + timedelta(seconds=2)
    assert fake.count("volcano-vgpu-node-config") == 1

    # A pass before it is due leaves it alone (the device config is created again: the
    # stand-in does not change the snapshot).
    _, result = await enforce_configuration(None, stale(), T0 + timedelta(seconds=1.9), b)
    assert result.deferred == [NODE_CM] and result.refused == []
    assert fake.count("volcano-vgpu-node-config") == 1

    # Due: tried again, refused again, twice as long now.
    _, result = await enforce_configuration(None, stale(), T0 + timedelta(seconds=2), b)
    assert fake.count("volcano-vgpu-node-config") == 2
    assert retry_at(b) == T0 + timedelta(seconds=6)

    # Accepted: forgotten.
    fake.accept("volcano-vgpu-node-config")
    _, result = await enforce_configuration(None, stale(), T0 + timedelta(seconds=6), b)
    assert {w.name for w in result.written} == {NODE_CM[2], DEVICE_CM[2]}
    assert len(b) == 0 and retry_at(b) is None


async def restart(action: RestartAction, now: datetime, b: WriteBackoff) -> bool:
    """One restart of a write plan, due now: carried out or not."""
    plan = WritePlan(restarts=(Restart(action, None, restart_body(now)),))
    return bool((await execute(None, plan, now, b)).restarted)


async def test_a_workload_restart_honours_retry_after(fake: FakeApi) -> None:
    fake.refuse("volcano-scheduler", refused(429, "busy", **{"Retry-After": "30"}))
    action = RestartAction(
        "rollout-deployment", "volcano-system", "volcano-scheduler", "scheduler", "conf changed"
    )
    b = backoff()
    assert await restart(action, T0, b) is False
    assert retry_at(b) == T0 + timedelta(seconds=30)
    assert await restart(action, T0 + timedelta(seconds=29), b) is False
    assert fake.count("volcano-scheduler") == 1
    fake.accept("volcano-scheduler")
    assert await restart(action, T0 + timedelta(seconds=30), b) is True
    assert fake.count("volcano-scheduler") == 2 and len(b) == 0


async def test_gone_and_conflicting_objects_are_not_backed_off(fake: FakeApi) -> None:
    fake.refuse("volcano-vgpu-node-config", kubeapi.error_for(409, "Conflict"))
    fake.refuse("configmaps", kubeapi.error_for(404, "Not Found"))  # no such namespace
    b = backoff()
    _, result = await enforce_configuration(None, stale(), T0, b)
    assert result.conflicts == 1 and result.refused == [] and len(b) == 0
    assert fake.sent() == [("POST", "configmaps"), ("PATCH", NODE_CM[2])]

"""The operator side of the Volcano/HAMi cluster tests: the configuration reconciler driven by
hand (one call = one pass), the whole controller with fast configuration passes, `doctor` as a
subprocess, and the audit log read per identity."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import cli
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.controller.volcano import VolcanoOptions, VolcanoReconciler
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import OperatorConfig, load_config


def reconciler(api: client.ApiClient, config: OperatorConfig, **options: Any) -> VolcanoReconciler:
    """A configuration reconciler driven by hand (one `await r.reconcile()` = one pass); the
    Events it would post are kept in `.posted` as (ref, type, reason, message)."""
    posted: list[tuple[Any, ...]] = []
    opts = VolcanoOptions(restart_settle_seconds=0.0, stranded_checks=(), **options)
    r = VolcanoReconciler(
        api=api,
        config=config,
        post_event=lambda *event: posted.append(event),
        options=opts,
    )
    r.posted = posted  # type: ignore[attr-defined]
    return r


async def run_doctor(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    """`vgpu-operator doctor` as a subprocess (asynchronously: the simulator keeps running)."""
    return await cli("doctor", "--kubeconfig", str(kubeconfig), *args)


OperatorFactory = Callable[..., OperatorThread]


def fast_passes(**options: Any) -> VolcanoOptions:
    """The configuration reconciler's options with passes fast enough for a test to watch
    (`options` override them)."""
    defaults: dict[str, Any] = {
        "debounce_seconds": 0.2,
        "min_pass_seconds": 0.5,
        "restart_settle_seconds": 2.0,
        "stranded_checks": (1.0,),
    }
    return VolcanoOptions(**{**defaults, **options})


@pytest.fixture
def volcano_operator(installed: Credentials) -> Iterator[OperatorFactory]:
    """`start(config_yaml, **volcano_options)`: the whole controller (Kopf, both reconcilers)
    under the chart's RBAC, with fast configuration passes; stopped after the test."""
    running: list[OperatorThread] = []

    def start(config: str = "", **options: Any) -> OperatorThread:
        op = OperatorThread(
            installed,
            options=ReconcilerOptions(resync_seconds=3600),
            config=load_config(config),
            volcano=fast_passes(**options),
        )
        running.append(op.start())
        return op

    yield start
    for op in running:
        op.stop()


def operator_writes(local: LocalCluster, offset: int) -> Counter[tuple[str, str, str, str]]:
    """(verb, resource, namespace, name) -> successful writes by the operator since `offset`
    (Events left out)."""
    return Counter(
        (
            e["verb"],
            e["objectRef"]["resource"],
            e["objectRef"].get("namespace", ""),
            e["objectRef"].get("name", ""),
        )
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e["objectRef"]["resource"] != "events"
        and e["verb"] != "list"  # the audit log also has the lists of pods and daemonsets
        and e["responseStatus"]["code"] < 300
    )


def pods_created(local: LocalCluster, offset: int, namespace: str) -> int:
    """Pods created in `namespace` since `offset` (by the DaemonSet/ReplicaSet controllers)."""
    return sum(
        1
        for e in local.audit_events(offset=offset)
        if e["verb"] == "create"
        and e["objectRef"]["resource"] == "pods"
        and e["objectRef"].get("namespace") == namespace
        and not e["objectRef"].get("subresource")
        and e["responseStatus"]["code"] < 300
    )

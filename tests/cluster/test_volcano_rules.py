"""Each rule against the real apiserver, on a consistent install built from the seeds'
configurations and broken one way: for what the operator owns, one `enforce` reconcile fixes
it; for the rest it writes nothing (every Volcano/HAMi object keeps its resourceVersion) and
the finding stays, marked as not fixable by the operator."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import eventually
from tests.cluster.volcano_env import (
    DEVICE_CM,
    HAMI,
    MIG,
    NODE_CM,
    PLUGIN_DS,
    PLUGIN_NS,
    SCHED_CM,
    SCHED_NS,
    VolcanoEnv,
    fixture,
    pod,
    text,
    volcano_env,
)
from tests.cluster.volcano_ops import (
    reconciler,
)
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path, workload_path
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import load_config
from vgpu_operator.models.volcano import REGISTER_ANNOTATION

__all__ = ["volcano_env"]

Apply = Callable[["Ctx"], Awaitable[None]]
DS_PATH = workload_path("DaemonSet", PLUGIN_NS, PLUGIN_DS)


@dataclass
class Ctx:
    env: VolcanoEnv
    namespace: str
    gpu_a: str  # RTX 4090 x 2, hami-core
    gpu_b: str  # A100-SXM4-40GB x 1, mig


@dataclass(frozen=True)
class Case:
    rules: tuple[str, ...]
    apply: Apply
    owned: bool
    config: str = ""
    scheduler_version: str = "v1.15.0"
    pods_restart: bool = False  # the fix is a restart: the finding clears once pods are replaced
    big_node: bool = False  # an H200 x 8 node in the pool (more memory entries than allowed)


# --- breaks ------------------------------------------------------------------------------


def edit_conf(change: Callable[[str], str]) -> Apply:
    async def apply(ctx: Ctx) -> None:
        await ctx.env.edit_configmap(SCHED_NS, SCHED_CM, change, "volcano-scheduler.conf")

    return apply


def edit_device(change: Callable[[str], str]) -> Apply:
    async def apply(ctx: Ctx) -> None:
        await ctx.env.edit_configmap(PLUGIN_NS, DEVICE_CM, change, "device-config.yaml")

    return apply


async def split_count_entry(ctx: Ctx) -> None:
    def change(data: str) -> str:
        doc = json.loads(data)
        for entry in doc["nodeconfig"]:
            if entry["name"] == ctx.gpu_a:
                entry["devicesplitcount"] = 3
        return json.dumps(doc, indent=2)

    await ctx.env.edit_configmap(PLUGIN_NS, NODE_CM, change, "config.json")


async def release_hami_on_b(ctx: Ctx) -> None:
    """The policy reconciler released gpu-b from mig to hami-core."""
    released = HAMI.to_annotation()
    await ctx.env.patch(
        kubeapi.node_path(ctx.gpu_b),
        {
            "metadata": {
                "annotations": {contract.ANN_CONFIG: released, contract.ANN_TARGET: released}
            }
        },
    )


def plugin_v1_11(*args: str) -> Apply:
    """Seed 002's plugin: v1.11.0 with flags."""

    async def apply(ctx: Ctx) -> None:
        image = "docker.io/projecthami/volcano-vgpu-device-plugin:v1.11.0"
        await ctx.env.patch(DS_PATH, _container(image=image, args=list(args)), strategic=True)
        await ctx.env.wait_running()

    return apply


def _container(**fields: Any) -> dict[str, Any]:
    return {
        "spec": {
            "template": {"spec": {"containers": [{"name": "volcano-device-plugin", **fields}]}}
        }
    }


async def hami_scheduler_device(ctx: Ctx) -> None:
    await ctx.env.put_configmap(
        PLUGIN_NS,
        "hami-scheduler-device",
        {"device-config.yaml": text("hami_scheduler_device.yaml")},
    )


async def unrelated_device_key(ctx: Ctx) -> None:
    await edit_device(lambda t: t.replace("nvidia:\n", "nvidia:\n  disableCoreLimit: true\n", 1))(
        ctx
    )


async def on_delete_then_device_key(ctx: Ctx) -> None:
    """An OnDelete DaemonSet (a template change replaces no pod), then a device config change."""
    await ctx.env.patch(
        DS_PATH, {"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None}}}
    )
    await unrelated_device_key(ctx)


async def extra_taint(ctx: Ctx) -> None:
    node = await kubeapi.request(ctx.env.api, "GET", kubeapi.node_path(ctx.gpu_a))
    taints = [
        *node["spec"]["taints"],
        {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"},
    ]
    await ctx.env.patch(kubeapi.node_path(ctx.gpu_a), {"spec": {"taints": taints}})


async def mount_device_config(ctx: Ctx) -> None:
    await ctx.env.patch(
        DS_PATH,
        {
            "spec": {
                "template": {
                    "spec": {
                        "volumes": [{"name": "deviceconfig", "configMap": {"name": DEVICE_CM}}]
                    }
                }
            }
        },
        strategic=True,
    )
    await ctx.env.wait_running()


async def plugin_v1_13(ctx: Ctx) -> None:
    image = "docker.io/projecthami/volcano-vgpu-device-plugin:v1.13.0"
    await ctx.env.patch(DS_PATH, _container(image=image), strategic=True)
    await ctx.env.wait_running()


def user_pod(name: str, **kwargs: Any) -> Apply:
    async def apply(ctx: Ctx) -> None:
        if kwargs.get("node") == "a":
            kwargs["node"] = ctx.gpu_a
        body = pod(ctx.namespace, name, **kwargs)
        await kubeapi.request(
            ctx.env.api, "POST", f"/api/v1/namespaces/{ctx.namespace}/pods", body=body
        )

    return apply


async def mindcluster(ctx: Ctx) -> None:
    await kubeapi.request(
        ctx.env.api,
        "POST",
        workload_path("DaemonSet", PLUGIN_NS),
        body=fixture("mindcluster_plugin_daemonset.yaml"),
    )


async def unregistered(ctx: Ctx) -> None:
    await ctx.env.patch(
        kubeapi.node_path(ctx.gpu_a), {"metadata": {"annotations": {REGISTER_ANNOTATION: None}}}
    )


async def nothing(ctx: Ctx) -> None:
    del ctx


VGPU_ON = "deviceshare.VGPUEnable: true # 启用 vgpu"
CASES: dict[str, Case] = {
    # what the operator owns: fixed by one reconcile
    # a quoted "true" is off up to Volcano v1.14 (v1.15 parses it: no finding there)
    "vgpu-enable-quoted": Case(
        ("scheduler-vgpu-enabled",),
        edit_conf(lambda t: t.replace(VGPU_ON, 'deviceshare.VGPUEnable: "true"')),
        owned=True,
        scheduler_version="v1.14.4",
    ),
    "no-predicates": Case(
        ("scheduler-predicates",),
        edit_conf(lambda t: t.replace("  - name: predicates\n", "")),
        True,
    ),
    "vgpu-with-gpu-sharing": Case(
        ("scheduler-fatal-combination",),
        edit_conf(
            lambda t: t.replace(VGPU_ON, VGPU_ON + "\n      deviceshare.GPUSharingEnable: true")
        ),
        True,
    ),
    "seed002-scheduler-namespace": Case(
        ("device-config-location",), edit_conf(lambda _: text("seed002_scheduler.conf")), True
    ),
    "device-config-edited": Case(
        ("device-config-rendered",),
        edit_device(lambda t: t.replace("deviceSplitCount: 10", "deviceSplitCount: 4")),
        True,
    ),
    "node-entry-edited": Case(("node-config-rendered",), split_count_entry, True),
    "mig-model-missing": Case(
        ("mig-geometry-coverage",),
        edit_device(lambda t: t.replace('"A100-SXM4-40GB"', '"A100-SXM4-40GB-X"')),
        True,
    ),
    "seed002-plugin-name-flag": Case(
        ("plugin-resource-name-flags",),
        plugin_v1_11("--device-split-count=10", "--resource-name=nvidia.com/gpu"),
        True,
    ),
    "plugin-split-flag": Case(
        ("plugin-config-flags-override",), plugin_v1_11("--device-split-count=4"), True
    ),
    "ascend-vnpu-on": Case(
        ("scheduler-ascend-hami", "vnpus-mirror"),
        hami_scheduler_device,
        True,
        config="ascendVnpu: {enabled: true}",
    ),
    "device-config-changed-after-pods": Case(
        ("restart-needed",), unrelated_device_key, True, pods_restart=True
    ),
    "device-config-changed-on-delete-plugin": Case(
        ("restart-needed",), on_delete_then_device_key, True, pods_restart=True
    ),
    "node-released-to-hami-core": Case(
        ("node-config-rendered",), release_hami_on_b, True, pods_restart=True
    ),
    # what the operator only reports: nothing written
    "untolerated-taint": Case(("plugin-placement",), extra_taint, False),
    "device-config-at-/config": Case(("plugin-node-config-mounted",), mount_device_config, False),
    "nvidia-plugin-pod": Case(
        ("nvidia-device-plugin-conflict",),
        user_pod(
            "nvidia-device-plugin-daemonset-vx6fk",
            node="a",
            labels={"app": "nvidia-device-plugin-daemonset"},
        ),
        False,
    ),
    "handshake-free-plugin": Case(("version-handshake",), plugin_v1_13, False),
    "stranded-pod": Case(
        ("stranded-pods",),
        user_pod("train-0", node="a", limits={"volcano.sh/vgpu-number": "1"}),
        False,
    ),
    "legacy-pod": Case(
        ("legacy-gpu-sharing",), user_pod("legacy", limits={"volcano.sh/gpu-memory": "1024"}), False
    ),
    "name-outside-volcano-sh": Case(
        ("plugin-resource-name-prefix",),
        nothing,
        False,
        config="resourceNames: {count: example.com/vgpu-number}",
    ),
    "too-many-memory-entries": Case(("gpu-memory-factor",), nothing, False, big_node=True),
    "mindcluster-plugin": Case(("ascend-mindcluster",), mindcluster, False),
    "register-annotation-gone": Case(("node-registration",), unregistered, False),
    "renamed-resources-on-new-volcano": Case(
        ("scheduler-default-resource-names",),
        nothing,
        False,
        config="resourceNames: {count: volcano.sh/vgpu-count}",
        scheduler_version="v1.15.1",
    ),
}


@pytest.fixture
async def operator_api(installed: Credentials) -> AsyncIterator[client.ApiClient]:
    """A client with the operator's identity (the chart's RBAC)."""
    api = await installed.client()
    async with api:
        yield api


@pytest.mark.parametrize("case_id", list(CASES))
async def test_rule(
    case_id: str, volcano_env: VolcanoEnv, operator_api: client.ApiClient, namespace: str
) -> None:
    case = CASES[case_id]
    env = volcano_env
    env.config = load_config(case.config)
    await env.add_control_node()
    [gpu_a] = await env.add_nodes("RTX-4090", 1, gpus=2, released=HAMI)
    [gpu_b] = await env.add_nodes("A100-SXM4-40GB", 1, gpus=1, released=MIG)
    if case.big_node:
        await env.add_nodes("H200", 1, gpus=8, released=HAMI)
    await env.install(scheduler_version=case.scheduler_version)
    await env.wait_running()
    await asyncio.sleep(1.1)  # edits below are later than the pods' start (1 s resolution)
    await case.apply(Ctx(env, namespace, gpu_a, gpu_b))

    before = [f for f in await env.findings() if f.id in case.rules]
    assert {f.id for f in before} == set(case.rules), f"the break is not seen: {before}"
    assert all(f.fixable_by_operator == case.owned for f in before), before
    versions = await env.resource_versions()

    if case.pods_restart:
        await asyncio.sleep(1.0)  # restarts wait for the second of the change to be over
    r = reconciler(operator_api, env.config)
    await r.reconcile()  # one pass

    after = [f for f in await env.findings() if f.id in case.rules]
    if not case.owned:
        assert r.writes == [] and r.restarted == []
        assert await env.resource_versions() == versions
        assert {f.id for f in after} == set(case.rules)
        return
    assert r.writes or r.restarted
    if not case.pods_restart:
        assert after == [], after
        return

    # the pass wrote (and restarted) all it had to; the pods' replacement finishes the fix.
    # A restart for what this very pass wrote waits until the second of the write is over
    # (pod start times are whole seconds): then one more pass carries it out.
    passes = 1
    if r.writes and not r.restarted:
        await asyncio.sleep(1.1)
        await r.reconcile()
        passes = 2
    restarted = list(r.restarted)
    assert restarted

    async def fixed() -> bool:
        found = await env.findings()
        return not [
            f for f in found if f.id in {*case.rules, "restart-needed", "node-registration"}
        ]

    await eventually(fixed, timeout=90, interval=0.5)
    assert r.passes == passes


async def test_the_seed_002_cluster_is_fixed_in_one_pass_and_stays_fixed(
    volcano_env: VolcanoEnv, operator_api: client.ApiClient
) -> None:
    """Seed 002 end to end: plugin v1.11.0 with --resource-name=nvidia.com/gpu, the scheduler
    pointed at volcano-system. One pass fixes what the operator owns; a second writes nothing."""
    env = volcano_env
    await env.add_control_node()
    await env.add_nodes("RTX-4090", 1, gpus=2, released=HAMI)
    await env.install(
        scheduler_conf="seed002_scheduler.conf",
        plugin=env.plugin_daemonset("seed002_plugin_daemonset.yaml"),
    )
    await env.wait_running()
    before = {f.id for f in await env.findings() if f.fixable_by_operator}
    assert {"device-config-location", "plugin-resource-name-flags"} <= before
    # a DaemonSet's template changes (its pods restart) only after the second in which what the
    # plugin reads last changed (here: the install) is over
    await asyncio.sleep(1.1)
    r = reconciler(operator_api, env.config)
    await r.reconcile()
    written = {(w.kind, w.name) for w in r.writes}
    assert written == {("ConfigMap", SCHED_CM), ("DaemonSet", PLUGIN_DS)}
    conf = await kubeapi.request(env.api, "GET", configmap_path(SCHED_NS, SCHED_CM))
    assert (
        "deviceshare.KnownGeometriesCMNamespace: kube-system"
        in conf["data"]["volcano-scheduler.conf"]
    )
    assert (
        "# volcano-vgpu-device-config这个ConfigMap对应的命名空间"
        in conf["data"]["volcano-scheduler.conf"]
    )
    ds = await kubeapi.request(env.api, "GET", DS_PATH)
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--resource-name=volcano.sh/vgpu-number" in args
    await env.wait_running()
    fixed = {f.id for f in await env.findings()}
    assert not fixed & {"device-config-location", "plugin-resource-name-flags"}
    versions = await env.resource_versions()
    again = reconciler(operator_api, env.config)
    await again.reconcile()
    assert again.writes == []
    assert {p: v for p, v in (await env.resource_versions()).items() if "configmaps" in p} == {
        p: v for p, v in versions.items() if "configmaps" in p
    }

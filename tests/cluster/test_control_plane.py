"""The local control plane is a real Kubernetes: schema validation, RBAC, watches, scheduling,
controllers, kwok, the audit log, and a Kopf operator all work against it."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException

from tests.cluster.helpers import (
    ClusterUnderTest,
    NodeFactory,
    ServiceAccountClient,
    eventually,
    unique,
)
from vgpu_devcluster.cluster import LocalCluster, pid_alive


async def test_crd_schema_violation_is_rejected_with_422_naming_the_field(
    api: client.ApiClient,
) -> None:
    group = f"{unique('g')}.test.vgpu.io"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Cluster",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    ext = client.ApiextensionsV1Api(api)
    await ext.create_custom_resource_definition(crd)
    custom = client.CustomObjectsApi(api)
    try:

        async def established() -> bool:
            got = await ext.read_custom_resource_definition(f"widgets.{group}")
            return any(
                c.type == "Established" and c.status == "True"
                for c in (got.status.conditions or [])
            )

        await eventually(established, timeout=30)
        good = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "ok"}}
        good["spec"] = {"size": 3}

        async def created() -> bool:
            try:
                await custom.create_cluster_custom_object(group, "v1", "widgets", good)
            except ApiException as exc:
                if exc.status == 404:  # discovery not caught up yet
                    return False
                raise
            return True

        await eventually(created, timeout=30)
        bad = {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": "bad"},
            "spec": {"size": 0},
        }
        with pytest.raises(ApiException) as err:
            await custom.create_cluster_custom_object(group, "v1", "widgets", bad)
        assert err.value.status == 422
        assert "spec.size" in err.value.body
    finally:
        await ext.delete_custom_resource_definition(f"widgets.{group}")


async def test_rbac_forbids_until_a_rolebinding_grants(
    api: client.ApiClient, namespace: str, service_account_client: ServiceAccountClient
) -> None:
    sa_api = await service_account_client(namespace, "reader")
    sa_core = client.CoreV1Api(sa_api)
    with pytest.raises(ApiException) as err:
        await sa_core.list_namespaced_config_map(namespace)
    assert err.value.status == 403

    rbac = client.RbacAuthorizationV1Api(api)
    await rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "cm-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        },
    )
    await rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "cm-reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "cm-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )

    async def allowed() -> bool:
        try:
            resp = await sa_core.list_namespaced_config_map(namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 403:
                return False  # the RBAC authorizer's cache has not seen the binding yet
            raise
        return bool(resp.status == 200)

    await eventually(allowed, timeout=30)


async def test_watch_sees_a_label_patch_on_a_node(
    api: client.ApiClient, make_nodes: NodeFactory
) -> None:
    [name] = await make_nodes("A30", 1, wait_ready=False)
    core = client.CoreV1Api(api)
    node = await core.read_node(name)
    marker = unique("v")
    seen = asyncio.Event()

    async def watch_for_label() -> None:
        w = watch.Watch()
        async with w.stream(
            core.list_node,
            field_selector=f"metadata.name={name}",
            resource_version=node.metadata.resource_version,
            timeout_seconds=30,
        ) as stream:
            async for event in stream:
                labels = event["object"].metadata.labels or {}
                if event["type"] == "MODIFIED" and labels.get("test/marker") == marker:
                    seen.set()
                    return

    task = asyncio.create_task(watch_for_label())
    await asyncio.sleep(0.3)
    await core.patch_node(name, {"metadata": {"labels": {"test/marker": marker}}})
    await asyncio.wait_for(seen.wait(), timeout=30)
    await task


async def test_simulated_gpu_node_becomes_ready_and_runs_a_bound_pod(
    api: client.ApiClient, make_nodes: NodeFactory, namespace: str
) -> None:
    [name] = await make_nodes("H100-80GB-HBM3", 1, gpus=8)
    core = client.CoreV1Api(api)
    node = await core.read_node(name)
    assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node.metadata.labels["nvidia.com/mig.capable"] == "true"
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    await core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "bound"},
            "spec": {"nodeName": name, "containers": [{"name": "c", "image": "busybox"}]},
        },
    )

    async def running() -> bool:
        pod = await core.read_namespaced_pod("bound", namespace)
        return bool(pod.status.phase == "Running")

    await eventually(running, timeout=60)


def _pods_of(items: list[Any], selector: dict[str, str]) -> list[Any]:
    return [p for p in items if all(p.metadata.labels.get(k) == v for k, v in selector.items())]


async def test_daemonset_and_deployment_rollout_restart(
    api: client.ApiClient, make_nodes: NodeFactory, namespace: str
) -> None:
    pool = unique("pool")
    nodes = await make_nodes("A100-SXM4-80GB", 3, labels={"test/pool": pool})
    apps = client.AppsV1Api(api)
    core = client.CoreV1Api(api)
    template = {
        "metadata": {"labels": {"app": "ds"}},
        "spec": {
            "nodeSelector": {"test/pool": pool},
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    await apps.create_namespaced_daemon_set(
        namespace,
        {
            "metadata": {"name": "ds"},
            "spec": {"selector": {"matchLabels": {"app": "ds"}}, "template": template},
        },
    )

    async def one_running_pod_per_node() -> bool:
        pods = await core.list_namespaced_pod(namespace, label_selector="app=ds")
        running = {p.spec.node_name for p in pods.items if p.status.phase == "Running"}
        return running == set(nodes) and len(pods.items) == len(nodes)

    await eventually(one_running_pod_per_node, timeout=90)

    deploy_template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "nodeSelector": {"test/pool": pool},
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    await apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": deploy_template,
            },
        },
    )

    async def web_pods() -> set[str]:
        pods = await core.list_namespaced_pod(namespace, label_selector="app=web")
        return {
            p.metadata.name
            for p in pods.items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        }

    async def two_running() -> bool:
        return len(await web_pods()) == 2

    await eventually(two_running, timeout=90)
    before = await web_pods()
    restarted_at = datetime.now(UTC).isoformat()
    await apps.patch_namespaced_deployment(
        "web",
        namespace,
        {
            "spec": {
                "template": {
                    "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": restarted_at}}
                }
            }
        },
    )

    async def replaced() -> bool:
        now = await web_pods()
        return len(now) == 2 and not (now & before)

    await eventually(replaced, timeout=120)


async def test_audit_log_records_a_patch_under_its_identity(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    make_nodes: NodeFactory,
    namespace: str,
    service_account_client: ServiceAccountClient,
) -> None:
    local = cluster.require_audit()
    [name] = await make_nodes(None, 1, prefix="cpu", wait_ready=False)
    rbac = client.RbacAuthorizationV1Api(api)
    role = unique("node-labeler")
    await rbac.create_cluster_role(
        {
            "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch", "get"]}],
        }
    )
    await rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "labeler", "namespace": namespace}],
        }
    )
    try:
        sa_core = client.CoreV1Api(await service_account_client(namespace, "labeler"))
        offset = local.audit_offset()
        user = f"system:serviceaccount:{namespace}:labeler"

        async def patched() -> bool:
            try:
                await sa_core.patch_node(name, {"metadata": {"labels": {"test/audited": "yes"}}})
            except ApiException as exc:
                if exc.status == 403:
                    return False
                raise
            return True

        await eventually(patched, timeout=30)

        async def audited() -> bool:
            events = local.audit_events(user=user, offset=offset)
            return any(
                e["verb"] == "patch"
                and e["objectRef"]["resource"] == "nodes"
                and e["objectRef"]["name"] == name
                and e["responseStatus"]["code"] == 200
                for e in events
            )

        await eventually(audited, timeout=10)
        # kwok's heartbeats are writes too, but under kwok's own identity, never this one.
        assert all(
            e["user"]["username"] == user for e in local.audit_events(user=user, offset=offset)
        )
    finally:
        await rbac.delete_cluster_role_binding(role)
        await rbac.delete_cluster_role(role)


async def test_a_kopf_operator_reacts_to_an_object_in_this_apiserver(
    kubeconfig: Path, api: client.ApiClient, namespace: str
) -> None:
    cfg = yaml.safe_load(kubeconfig.read_text())
    server = cfg["clusters"][0]["cluster"]["server"]
    ca_path = cfg["clusters"][0]["cluster"].get("certificate-authority")
    token = cfg["users"][0]["user"]["token"]

    registry = kopf.OperatorRegistry()
    seen: dict[str, str] = {}

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=server, ca_path=ca_path, token=token)

    @kopf.on.create("configmaps", registry=registry, labels={"test/kopf": "yes"})
    def on_create(name: str, patch: kopf.Patch, **_: Any) -> None:
        seen["name"] = name
        patch.metadata.annotations["test/handled-by"] = "kopf"

    settings = kopf.OperatorSettings()
    settings.watching.server_timeout = 10
    settings.watching.client_timeout = 15
    settings.scanning.disabled = True
    settings.posting.enabled = False
    ready = threading.Event()
    stop = threading.Event()

    def run() -> None:
        async def main() -> None:
            stop_flag: asyncio.Event = asyncio.Event()
            loop = asyncio.get_running_loop()

            def wait_stop() -> None:
                stop.wait()
                loop.call_soon_threadsafe(stop_flag.set)

            threading.Thread(target=wait_stop, daemon=True).start()
            await kopf.operator(
                registry=registry,
                settings=settings,
                standalone=True,
                namespaces=[namespace],
                ready_flag=ready,
                stop_flag=stop_flag,
            )

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert await asyncio.to_thread(ready.wait, 30)
        core = client.CoreV1Api(api)
        await core.create_namespaced_config_map(
            namespace, {"metadata": {"name": "watched", "labels": {"test/kopf": "yes"}}}
        )

        async def handled() -> bool:
            cm = await core.read_namespaced_config_map("watched", namespace)
            return (cm.metadata.annotations or {}).get("test/handled-by") == "kopf"

        await eventually(handled, timeout=30)
        assert seen["name"] == "watched"
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 20)
    assert not thread.is_alive(), "the Kopf operator did not stop when asked"


def test_teardown_leaves_no_process_and_no_temp_dir() -> None:
    local = LocalCluster.start(
        prefix="vgpu-testcluster-teardown-",
        with_scheduler=False,
        with_kwok=False,
        with_controller_manager=False,
    )
    pids = dict(local.pids)
    workdir = local.workdir
    assert set(pids) == {"etcd", "kube-apiserver"}
    assert all(pid_alive(pid) for pid in pids.values())
    local.stop()
    assert not any(pid_alive(pid) for pid in pids.values())
    assert not workdir.exists()

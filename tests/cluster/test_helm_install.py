"""The chart installed like real software: `helm install` into the local apiserver creates
everything and kwok runs the pods; `helm upgrade` with a changed configuration rolls the
controller; after the operator has labelled and tainted nodes and patched HAMi's plugin
DaemonSet, the pre-delete hook's own command, run under the hook's own ServiceAccount, and
`helm uninstall` leave no label, taint, annotation, finalizer or DaemonSet patch of it: the hook
deletes the policies while the controller still runs, the controller moves the nodes out and
releases its finalizer, then the hook stops it and removes the rest.

kwok runs no container: it marks the hook Job complete without running anything, so the test
runs the command the hook renders (`helm get hooks`) itself, as that Job would: the same args,
the release's ConfigMap as the mounted config file, the hook ServiceAccount's token.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory, PolicyFactory, eventually, helm, unique
from tests.cluster.rbackit import token_kubeconfig
from tests.cluster.volcano_env import fixture
from tests.cluster.volcano_ops import fast_passes
from vgpu_devcluster.install import apply, chart_dir
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import load_config

POOL_LABEL = "vgpu-test/pool"
USER_TAINT = {"key": "dedicated", "value": "ml", "effect": "PreferNoSchedule"}
PLUGIN = "volcano-device-plugin"
CONTROL = {"vgpu-test/role": "control"}  # the node the controller and the hook Job run on
HOOK_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def release_values(name: str, namespace: str, pool: str) -> dict[str, Any]:
    """Names of our own, so the release shares nothing with the rest of the suite: its
    cluster-wide objects (fullnameOverride), the nodes its pods land on, the Volcano/HAMi
    objects its operator configuration names (all in the test's namespace)."""

    def ref(name: str, key: str | None = None) -> dict[str, str]:
        return {"namespace": namespace, "name": name} | ({"key": key} if key else {})

    return {
        "fullnameOverride": name,
        "nodeSelector": {POOL_LABEL: pool} | CONTROL,
        "agent": {"nodeSelector": {POOL_LABEL: pool}},
        "config": {
            "deviceConfig": ref("volcano-vgpu-device-config", "device-config.yaml"),
            "nodeConfig": ref("volcano-vgpu-node-config", "config.json"),
            "devicePlugin": ref(PLUGIN) | {"container": PLUGIN},
            "scheduler": {
                "configMap": ref("volcano-scheduler-configmap", "volcano-scheduler.conf"),
                "deployment": ref("volcano-scheduler"),
            },
            "ascendNodeConfig": ref("hami-device-node-config", "node-config.yaml"),
            "ascendDevicePlugin": ref("hami-ascend-device-plugin"),
            "ascendVnpu": {
                "enabled": False,
                "schedulerDevice": ref("hami-scheduler-device", "device-config.yaml"),
            },
        },
    }


async def pods(api: client.ApiClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    body = await kubeapi.request(
        api, "GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": selector}
    )
    return list(body.get("items") or [])


async def exists(api: client.ApiClient, path: str) -> bool:
    try:
        await kubeapi.request(api, "GET", path)
    except kubeapi.NotFound:
        return False
    return True


def placement(daemonset: dict[str, Any]) -> tuple[Any, Any]:
    pod = daemonset["spec"]["template"]["spec"]
    return copy.deepcopy(pod.get("nodeSelector")), copy.deepcopy(pod.get("tolerations"))


async def node_state(api: client.ApiClient, name: str) -> tuple[Any, Any, Any]:
    node = await kubeapi.request(api, "GET", kubeapi.node_path(name))
    meta = node["metadata"]
    return meta.get("labels"), meta.get("annotations"), node["spec"].get("taints")


async def generation(api: client.ApiClient, path: str) -> int:
    """A workload's spec generation (status updates do not change it)."""
    return int((await kubeapi.request(api, "GET", path))["metadata"]["generation"])


def operator_keys(node: dict[str, Any]) -> list[str]:
    meta = node["metadata"]
    keys = [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]
    return [k for k in keys if k.startswith(f"{contract.GROUP}/")]


async def ensure_namespace(api: client.ApiClient, name: str) -> None:
    """Namespaces the chart's Roles go into (Volcano's, when Volcano is installed)."""
    with contextlib.suppress(kubeapi.Conflict):
        await kubeapi.request(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": name}})


async def run_hook(
    api: client.ApiClient,
    kubeconfig: Path,
    release: str,
    namespace: str,
    work: Path,
    *extra: str,
) -> str:
    """What the pre-delete hook's Job does, done here: its RBAC applied as rendered, its
    container's args run with the release's configuration and the hook ServiceAccount's token."""
    hooks = [
        d
        for d in yaml.safe_load_all(
            await helm(kubeconfig, "get", "hooks", release, "-n", namespace)
        )
        if d
    ]
    for doc in hooks:
        if doc["kind"] in HOOK_KINDS:
            await apply(api, doc)
    [job] = [d for d in hooks if d["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert "command" not in container  # the image's entrypoint: vgpu-operator
    # the mounted ConfigMap, as files
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "config"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "config"]
    cm_path = f"/api/v1/namespaces/{namespace}/configmaps/{volume['configMap']['name']}"
    configmap = await kubeapi.request(api, "GET", cm_path)
    mounted = work / "config-volume"
    mounted.mkdir(exist_ok=True)
    for key, text in configmap["data"].items():
        (mounted / key).write_text(text)
    args = [a.replace(mount["mountPath"], str(mounted)) for a in container["args"]]
    account = await token_kubeconfig(api, namespace, pod["serviceAccountName"], work)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vgpu_operator.commands.cli",
        *args,
        *extra,
        "--kubeconfig",
        str(account),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, f"{args}:\n{out.decode()}\n{err.decode()}"
    return out.decode()


async def test_install_upgrade_uninstall_leaves_nodes_clean(
    api: client.ApiClient,
    kubeconfig: Path,
    tmp_path: Path,
    namespace: str,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    pool = unique("helm")
    release = unique("vo")
    on = {POOL_LABEL: pool}
    [cpu] = await make_nodes(None, 1, labels=on | CONTROL, prefix="cpu")
    gpus = await make_nodes("A100-SXM4-80GB", 2, gpus=1, labels=on | {"team": "ml"})
    user_tainted = gpus[0]
    await kubeapi.request(
        api,
        "PATCH",
        kubeapi.node_path(user_tainted),
        body={"spec": {"taints": [USER_TAINT]}},
        content_type=kubeapi.MERGE_PATCH,
        field_manager=None,
    )
    before = {n: await kubeapi.request(api, "GET", kubeapi.node_path(n)) for n in gpus}

    # HAMi's plugin as shipped (its own nodeSelector kept to this test's nodes)
    plugin = fixture("manifest_plugin_daemonset.yaml")
    plugin["metadata"]["namespace"] = namespace
    plugin_spec = plugin["spec"]["template"]["spec"]
    plugin_spec["nodeSelector"] = dict(on)
    plugin_spec.pop("serviceAccountName", None)
    plugin_spec.pop("serviceAccount", None)
    await apply(api, plugin)
    ds_path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{PLUGIN}"
    shipped = placement(await kubeapi.request(api, "GET", ds_path))

    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(release_values(release, namespace, pool)))
    for ns in ("kube-system", "volcano-system"):
        await ensure_namespace(api, ns)
    chart = str(chart_dir())

    # -- install: everything created, kwok runs the controller and the agents ---------------
    await helm(
        kubeconfig,
        "install",
        release,
        chart,
        "-n",
        namespace,
        "-f",
        str(values),
        "--wait",
        "--timeout",
        "150s",
    )
    manifest = [
        d
        for d in yaml.safe_load_all(
            await helm(kubeconfig, "get", "manifest", release, "-n", namespace)
        )
        if d
    ]
    assert {"Deployment", "DaemonSet", "ConfigMap", "ClusterRole"} <= {d["kind"] for d in manifest}
    for doc in manifest:
        assert await exists(api, _path(doc)), f"{doc['kind']} {doc['metadata']['name']} missing"
    controller = "app.kubernetes.io/name=vgpu-operator,app.kubernetes.io/component=controller"
    agent = "app.kubernetes.io/name=vgpu-operator,app.kubernetes.io/component=agent"

    async def running() -> bool:
        ctl = await pods(api, namespace, controller)
        agents = await pods(api, namespace, agent)
        return (
            len(ctl) == 2
            and {p["spec"].get("nodeName") for p in ctl} == {cpu}
            and {p["spec"].get("nodeName") for p in agents} == set(gpus)
            and all(p["status"].get("phase") == "Running" for p in ctl + agents)
        )

    await eventually(running, timeout=60)

    # -- upgrade with a changed configuration: a new ReplicaSet rolls the controller ----------
    dep_path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{release}"
    old = (await kubeapi.request(api, "GET", dep_path))["spec"]["template"]["metadata"]
    await helm(
        kubeconfig,
        "upgrade",
        release,
        chart,
        "-n",
        namespace,
        "-f",
        str(values),
        "--set",
        "config.restarts.minIntervalSeconds=60",
        "--wait",
        "--timeout",
        "150s",
    )
    new = (await kubeapi.request(api, "GET", dep_path))["spec"]["template"]["metadata"]
    assert new["annotations"]["checksum/config"] != old["annotations"]["checksum/config"]

    async def rolled() -> bool:
        sets = await kubeapi.request(
            api,
            "GET",
            f"/apis/apps/v1/namespaces/{namespace}/replicasets",
            query={"labelSelector": controller},
        )
        replicas = {
            r["metadata"]["labels"]["pod-template-hash"]: r["status"].get("replicas", 0)
            for r in sets["items"]
        }
        return len(replicas) == 2 and sorted(replicas.values()) == [0, 2]

    await eventually(rolled, timeout=90)

    # -- the operator (in-process, as the release's ServiceAccount, with its ConfigMap) --------
    cm = await kubeapi.request(
        api, "GET", f"/api/v1/namespaces/{namespace}/configmaps/{release}-config"
    )
    config = load_config(cm["data"]["config.yaml"])
    assert config.restarts.min_interval_seconds == 60 and config.device_plugin.name == PLUGIN
    account = await token_kubeconfig(api, namespace, release, tmp_path)
    operator = OperatorThread(
        Credentials(kubeconfig=str(account)),
        options=ReconcilerOptions(resync_seconds=3600),
        config=config,
        volcano=fast_passes(),
    ).start()
    try:
        policy = await policies("helm", {"mode": "hami-core", "nodeSelector": {"matchLabels": on}})

        async def configured() -> bool:
            nodes = [await kubeapi.request(api, "GET", kubeapi.node_path(n)) for n in gpus]
            ds = await kubeapi.request(api, "GET", ds_path)
            pod = ds["spec"]["template"]["spec"]
            return (
                all(
                    (n["metadata"].get("labels") or {}).get(contract.LABEL_POLICY) == policy
                    and any(
                        t["key"] == contract.DEFAULT_TAINT_KEY for t in n["spec"].get("taints", [])
                    )
                    for n in nodes
                )
                and (pod.get("nodeSelector") or {}).get(contract.LABEL_DEVICE_PLUGIN) == "hami"
            )

        await eventually(configured, timeout=90)
    except BaseException:
        operator.stop()
        raise
    raw_policy = await kubeapi.request(api, "GET", kubeapi.policy_path(policy))
    assert contract.FINALIZER in raw_policy["metadata"]["finalizers"]
    # what the agent writes beside the controller (kwok runs no agent): its state and inventory
    await kubeapi.request(
        api,
        "PATCH",
        kubeapi.node_path(gpus[1]),
        body={
            "metadata": {
                "labels": {contract.LABEL_STATE: "success"},
                "annotations": {contract.ANN_INVENTORY: '{"gpus": []}'},
            }
        },
        content_type=kubeapi.MERGE_PATCH,
        field_manager=None,
    )

    # -- uninstall: the hook's command under the hook's ServiceAccount, then helm uninstall ----
    # The controller runs while the hook starts (pre-delete: the Deployment is still there):
    # the operator thread does its work, and stops when the hook scales the Deployment to 0,
    # as its pods would.
    async def scaled_to_zero() -> bool:
        return not (await kubeapi.request(api, "GET", dep_path))["spec"].get("replicas", 1)

    async def stop_with_the_deployment() -> None:
        await eventually(scaled_to_zero, timeout=600, interval=0.2)
        await asyncio.to_thread(operator.stop)

    stopper = asyncio.create_task(stop_with_the_deployment())
    try:
        # --dry-run first: it says what it would change and changes nothing
        nodes_before = [await node_state(api, n) for n in gpus]
        generations = [await generation(api, p) for p in (ds_path, dep_path)]
        preview = await run_hook(api, kubeconfig, release, namespace, tmp_path, "--dry-run")
        annotated = f"{contract.ANN_EVICT_GPU_PODS}=false, deleted and its nodes moved out"
        assert f"vgpunodepolicy {policy}: (dry run, not done) would be annotated" in preview
        assert annotated in preview  # the chart's default: no GPU pod evicted
        assert f"deployment {namespace}/{release}: would scale to 0" in preview
        taint = f"{contract.DEFAULT_TAINT_KEY}=hami:NoSchedule"
        assert f"(dry run, not done) removed taint {taint}" in preview
        assert [await node_state(api, n) for n in gpus] == nodes_before
        assert [await generation(api, p) for p in (ds_path, dep_path)] == generations
        assert not await gone_policy(api, policy)
        said = await run_hook(api, kubeconfig, release, namespace, tmp_path)
        await stopper
    finally:
        stopper.cancel()
        operator.stop()
    # the running controller moved the nodes out (the policy's onDelete: Delete) and released
    # the finalizer; then the hook stopped it and took off the rest
    assert f"vgpunodepolicy {policy}: deleted; the controller moves its nodes out" in said
    assert f"vgpunodepolicy {policy}: its nodes have left; finalizer released" in said
    assert f"deployment {namespace}/{release}: scaled to 0" in said
    assert f"daemonset {namespace}/{release}-agent: deleted" in said
    assert f"removed nodeSelector {contract.LABEL_DEVICE_PLUGIN}=hami" in said
    assert f"removed label {contract.LABEL_STATE}=success" in said  # the agent's
    assert not await pods(api, namespace, controller)
    await helm(kubeconfig, "uninstall", release, "-n", namespace, "--wait", "--timeout", "120s")

    for name in gpus:
        node = await kubeapi.request(api, "GET", kubeapi.node_path(name))
        assert operator_keys(node) == [], (name, operator_keys(node))
        assert node["metadata"]["labels"] == before[name]["metadata"]["labels"]
        assert node["spec"].get("taints") == before[name]["spec"].get("taints")
    assert placement(await kubeapi.request(api, "GET", ds_path)) == shipped
    assert await gone_policy(api, policy), "deleted, its finalizer released"
    for doc in manifest:
        assert not await exists(api, _path(doc)), f"{doc['kind']} {doc['metadata']['name']} left"
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for path in (
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{release}-cleanup",
        f"{rbac}/clusterroles/{release}-cleanup",
        f"{rbac}/clusterrolebindings/{release}-cleanup",
        # the plugin DaemonSet is in the release's namespace here, so are its Role and binding
        *(
            f"{rbac}/namespaces/{namespace}/{kind}/{release}-cleanup{suffix}"
            for kind in ("roles", "rolebindings")
            for suffix in ("", "-plugins")
        ),
        f"/apis/batch/v1/namespaces/{namespace}/jobs/{release}-cleanup",
    ):
        assert not await exists(api, path), f"hook object {path} left"


async def gone_policy(api: client.ApiClient, name: str) -> bool:
    return not await exists(api, kubeapi.policy_path(name))


def _path(doc: dict[str, Any]) -> str:
    api_version: str = doc["apiVersion"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    meta = doc["metadata"]
    ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    plural = PLURALS.get(doc["kind"]) or doc["kind"].lower() + "s"
    return f"{base}{ns}/{plural}/{meta['name']}"


PLURALS = {
    "PodDisruptionBudget": "poddisruptionbudgets",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}

"""The controller's runtime check of its own admission policies, against the real apiserver: a
`helm install` of the chart under a name and namespace of its own, and the operator running in
this process with that release's ServiceAccount token and the configuration the release
rendered (kwok runs no container). With a binding deleted, a binding switched to audit only, or
a policy changed under its annotation (only the dry run notices that one), the running operator
stops writing within 30 s and says so (the AdmissionPoliciesEnforced condition, an Event,
`vgpu_operator_admission_policies_enforced`, `doctor`); once they are back it writes again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from prometheus_client import REGISTRY

from tests.cluster.auditkit import gone
from tests.cluster.helpers import NodeFactory, PolicyFactory, event_reasons, helm, unique
from tests.cluster.poolkit import clean, configured_by, hami_policy, node, wait_nodes
from tests.cluster.rbackit import token_kubeconfig
from vgpu_devcluster.install import chart_dir, ensure_namespace
from vgpu_operator import kubeapi
from vgpu_operator.controller.admission_guard import ENFORCED, NOT_ENFORCED
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.controller.volcano import VolcanoOptions
from vgpu_operator.core.admission.verdict import BINDINGS_PATH, CONDITION, POLICIES_PATH
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import OperatorConfig, load_config

pytestmark = pytest.mark.cluster

STOPS_WITHIN = 30.0  # seconds, from the change to the condition saying so (the bound)
GAUGE = "vgpu_operator_admission_policies_enforced"


async def release_token(
    api: client.ApiClient, namespace: str, account: str, directory: Path
) -> Credentials:
    return Credentials(kubeconfig=str(await token_kubeconfig(api, namespace, account, directory)))


@contextlib.asynccontextmanager
async def release(api: client.ApiClient, kubeconfig: Path) -> AsyncIterator[tuple[str, str, str]]:
    """A `helm install` of the chart's defaults: (namespace, fullname, its config.yaml)."""
    namespace, name = unique("adm-rel"), unique("adm")
    fullname = f"{name}-op"
    await ensure_namespace(api, namespace)
    await ensure_namespace(
        api, "volcano-system"
    )  # the chart's Roles live there (no Volcano needed)
    await helm(
        kubeconfig, "install", name, str(chart_dir()), "-n", namespace,
        "--set", f"fullnameOverride={fullname}",
    )  # fmt: skip
    try:
        cm = await kubeapi.request(
            api, "GET", f"/api/v1/namespaces/{namespace}/configmaps/{fullname}-config"
        )
        yield namespace, fullname, str(cm["data"]["config.yaml"])
    finally:
        await helm(kubeconfig, "uninstall", name, "-n", namespace, "--no-hooks")
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(
                api, "DELETE", f"/api/v1/namespaces/{namespace}", field_manager=None
            )


async def condition(api: client.ApiClient, policy: str) -> tuple[str, str, str]:
    body = await kubeapi.request(api, "GET", kubeapi.policy_path(policy))
    for c in (body.get("status") or {}).get("conditions") or []:
        if c["type"] == CONDITION:
            return c["status"], c["reason"], c.get("message", "")
    return "", "", ""


async def until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> float:
    """Seconds until `check` holds; fails after `timeout`."""
    start = time.monotonic()
    while not await check():
        assert time.monotonic() - start < timeout, f"{what}: not within {timeout:.0f}s"
        await asyncio.sleep(0.25)
    return time.monotonic() - start


def gauge(reason: str) -> float | None:
    return REGISTRY.get_sample_value(GAUGE, {"reason": reason})


def restored(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as it can be created again (as `helm upgrade` would put it back)."""
    meta = {k: obj["metadata"][k] for k in ("name", "labels", "annotations")}
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": meta,
        "spec": obj["spec"],
    }


def doctor(kubeconfig: Path, config_file: Path) -> tuple[int, list[dict[str, Any]]]:
    """`vgpu-operator doctor --rule admission-policies -o json` with the operator's
    configuration: its exit code and findings."""
    done = subprocess.run(
        [
            sys.executable, "-m", "vgpu_operator.commands.doctor",
            "--kubeconfig", str(kubeconfig), "--config", str(config_file),
            "--rule", "admission-policies", "-o", "json",
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.returncode, list(json.loads(done.stdout)["findings"])


async def test_the_operator_stops_writing_while_its_admission_policies_are_not_enforced(
    api: client.ApiClient,
    kubeconfig: Path,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    tmp_path: Path,
) -> None:
    async with release(api, kubeconfig) as (namespace, fullname, config_text):
        config: OperatorConfig = load_config(config_text)
        assert config.admission_policies is not None
        config_file = tmp_path / "config.yaml"
        config_file.write_text(config_text)
        credentials = await release_token(api, namespace, fullname, tmp_path)
        objects, workloads = f"{fullname}-objects", f"{fullname}-workloads"
        pool = unique("pool")
        [first] = await make_nodes("A100-SXM4-80GB", 1, labels={"test/pool": pool})
        name = await policies("adm", hami_policy(pool))
        uid = (await kubeapi.request(api, "GET", kubeapi.policy_path(name)))["metadata"]["uid"]
        running = OperatorThread(
            credentials,
            config=config,
            options=ReconcilerOptions(resync_seconds=3600),
            volcano=VolcanoOptions(enabled=False),
        ).start()
        try:

            async def writes(node_name: str) -> None:
                await wait_nodes(api, [node_name], configured_by(name), timeout=STOPS_WITHIN)

            async def says(status: str, reason: str) -> bool:
                return (await condition(api, name))[:2] == (status, reason)

            async def told(event: str) -> bool:
                selector = f"involvedObject.uid={uid}"
                return (await event_reasons(api, "default", selector))[event] > 0

            # Enforced (the release's policies take effect a moment after helm created them):
            # the operator writes its node.
            await until(lambda: says("True", "Enforced"), STOPS_WITHIN, "enforced at start")
            await writes(first)
            assert gauge("Enforced") == 1
            assert doctor(kubeconfig, config_file) == (0, [])

            # 1. The objects binding deleted: no writes within 30 s, said in the condition, an
            #    Event, the gauge and doctor; a new node of the pool is left as it is.
            binding = await kubeapi.request(api, "GET", f"{BINDINGS_PATH}/{objects}")
            await kubeapi.request(api, "DELETE", f"{BINDINGS_PATH}/{objects}", field_manager=None)
            took = {
                "deleted": await until(
                    lambda: says("False", "BindingMissing"), STOPS_WITHIN, "deleted"
                )
            }
            _, _, message = await condition(api, name)
            assert f"ValidatingAdmissionPolicyBinding {objects} is missing" in message
            assert "helm upgrade" in message and "observe mode" in message
            assert gauge("BindingMissing") == 0
            await until(lambda: told(NOT_ENFORCED), 10, "the Warning Event")
            code, [finding] = doctor(kubeconfig, config_file)
            assert (code, finding["id"], finding["severity"]) == (1, "admission-policies", "error")
            assert f"ValidatingAdmissionPolicyBinding {objects} is missing" in finding["message"]
            assert "dry-run request they must refuse" in finding["message"]
            assert "helm upgrade" in finding["fix"]
            [second] = await make_nodes("A100-SXM4-80GB", 1, labels={"test/pool": pool})

            async def observed() -> bool:  # observe mode's report: what enforce would write
                selector = f"involvedObject.name={second}"
                return (await event_reasons(api, "default", selector))["WouldWrite"] > 0

            await until(observed, STOPS_WITHIN, "the new node seen, as observe mode sees it")
            assert clean(await node(api, second)), "written while not enforced"
            assert (await condition(api, name))[:2] == ("False", "BindingMissing")

            # ... and back: the operator writes the new node.
            await kubeapi.request(
                api, "POST", BINDINGS_PATH, body=restored(binding), field_manager=None
            )
            await until(lambda: says("True", "Enforced"), STOPS_WITHIN, "resumed")
            await writes(second)
            await until(lambda: told(ENFORCED), 10, "the Normal Event")
            assert gauge("Enforced") == 1

            # 2. The workloads binding switched to audit only.
            audit = {"spec": {"validationActions": ["Audit"]}}
            path = f"{BINDINGS_PATH}/{workloads}"
            await kubeapi.request(
                api, "PATCH", path, body=audit, content_type=kubeapi.MERGE_PATCH, field_manager=None
            )
            took["audit"] = await until(
                lambda: says("False", "BindingNotDenying"), STOPS_WITHIN, "audit only"
            )
            assert gauge("BindingNotDenying") == 0
            deny = {"spec": {"validationActions": ["Deny"]}}
            await kubeapi.request(
                api, "PATCH", path, body=deny, content_type=kubeapi.MERGE_PATCH, field_manager=None
            )
            await until(lambda: says("True", "Enforced"), STOPS_WITHIN, "resumed after audit")

            # 3. The objects policy changed under its annotation (it no longer matches the
            #    operator): only the dry run, an eviction in kube-system, shows it.
            policy_path = f"{POLICIES_PATH}/{objects}"
            policy = await kubeapi.request(api, "GET", policy_path)
            never = {"spec": {"matchConditions": [{"name": "never", "expression": "false"}]}}
            await kubeapi.request(
                api, "PATCH", policy_path, body=never, content_type=kubeapi.MERGE_PATCH,
                field_manager=None,
            )  # fmt: skip
            took["edited"] = await until(
                lambda: says("False", "NotRefused"), STOPS_WITHIN, "edited"
            )
            _, _, message = await condition(api, name)
            assert "evict pod kube-system/vgpu-operator-admission-probe" in message
            back = {"spec": {"matchConditions": policy["spec"]["matchConditions"]}}
            await kubeapi.request(
                api, "PATCH", policy_path, body=back, content_type=kubeapi.MERGE_PATCH,
                field_manager=None,
            )  # fmt: skip
            await until(lambda: says("True", "Enforced"), STOPS_WITHIN, "resumed after edit")

            # The policy deleted while the operator writes: its nodes released, its finalizer
            # removed (the operator is stopped next).
            await kubeapi.request(api, "DELETE", kubeapi.policy_path(name), field_manager=None)
            await wait_nodes(api, [first, second], clean, timeout=STOPS_WITHIN)

            await until(partial(gone, api, name), STOPS_WITHIN, "the policy's finalizer released")
            print(f"seconds from the change to the condition saying so: {took}")
        finally:
            running.stop()

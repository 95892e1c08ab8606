"""Every workload example (`examples/*/workloads/*.yaml`) is accepted by the real apiserver
against Volcano's own CRDs (volcano-sh/volcano@v1.15.1:installer/volcano-development.yaml), as
`kubectl apply --dry-run=server` sends it; and each example folder has, per policy, a job its
pool can run: tolerating the pool's taints and asking the resources and `volcano.sh/vgpu-mode`
of the pool's mode. Operator config files next to the examples load as the operator's config."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import eventually
from vgpu_devcluster import binaries, upstream
from vgpu_devcluster.install import apply, object_path
from vgpu_operator import contract, kubeapi
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.models.config import load_config
from vgpu_operator.models.policy import VGPUNodePolicySpec
from vgpu_operator.models.volcano import POD_VGPU_MODE

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WORKLOADS = sorted(EXAMPLES.glob("*/workloads/*.yaml"))
# The folders whose workloads this file covers (demo/, dedicated-vgpu-pool/, gitops/ have
# their own tests).
FOLDERS = (
    "legacy-gpu-sharing-migration",
    "ascend-vnpu",
    "heterogeneous-hami-and-mig",
    "hami-core-all-gpus",
    "static-mig",
)

Obj = dict[str, Any]


def documents(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def templates(job: Obj) -> list[Obj]:
    return [t["template"] for t in job["spec"]["tasks"]]


def limits(template: Obj) -> set[str]:
    return {
        name
        for c in template["spec"]["containers"]
        for name in (c.get("resources") or {}).get("limits") or {}
    }


def tolerates(template: Obj, taint: Any) -> bool:
    for t in template["spec"].get("tolerations") or []:
        if t.get("key") != taint.key or t.get("effect", taint.effect) != taint.effect:
            continue
        if t.get("operator") == "Exists" or t.get("value") == taint.value:
            return True
    return False


def serves(spec: VGPUNodePolicySpec, template: Obj) -> bool:
    """Can a pod of this template run on the pool: every taint tolerated, the mode's
    resources asked, and the vGPU mode pinned where the scheduler chooses between modes."""
    if not all(tolerates(template, t) for t in spec.effective_taints()):
        return False
    mode = (template.get("metadata") or {}).get("annotations", {}).get(POD_VGPU_MODE)
    asked = limits(template)
    mig = spec.effective_mig()
    if spec.mode == "hami-core":
        return mode == "hami-core" and "volcano.sh/vgpu-number" in asked
    if spec.mode == "mig" and mig is not None and mig.partitioning == "dynamic":
        return mode == "mig" and "volcano.sh/vgpu-number" in asked
    if spec.mode == "mig":  # static: NVIDIA's plugin, a resource per profile
        return mode is None and any(a.startswith("nvidia.com/mig-") for a in asked)
    if spec.mode == "ascend-vnpu":
        return any(a.startswith("huawei.com/Ascend") for a in asked)
    return "nvidia.com/gpu" in asked  # whole-gpu


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_pool_has_a_workload_it_can_run(folder: str) -> None:
    policies = [
        d
        for f in sorted((EXAMPLES / folder).glob("*.yaml"))
        for d in documents(f)
        if d.get("kind") == contract.POLICY_KIND
    ]
    jobs = [d for f in sorted((EXAMPLES / folder).glob("workloads/*.yaml")) for d in documents(f)]
    assert policies and jobs
    assert all(j["kind"] == "Job" and j["apiVersion"] == "batch.volcano.sh/v1alpha1" for j in jobs)
    for doc in policies:
        parsed = parse_policy(doc)
        assert parsed.policy is not None, parsed.problems
        spec = parsed.policy.spec
        assert any(serves(spec, t) for j in jobs for t in templates(j)), (
            f"{folder}: no workload runs on pool {doc['metadata']['name']} ({spec.mode})"
        )


def test_operator_configs_of_the_examples_load() -> None:
    files = sorted(EXAMPLES.glob("*/operator-config/values.yaml"))
    assert files
    for f in files:
        config = load_config(yaml.safe_dump(yaml.safe_load(f.read_text())["config"]))
        assert config.ascend_vnpu.enabled or "ascend" not in str(f)
        # the chart grants these objects by name: the example names them as HAMi ships them
        if "ascend" in str(f):
            assert config.ascend_device_plugin.name == "hami-ascend-device-plugin"


@pytest.fixture(scope="module")
async def volcano_crds(api: client.ApiClient) -> None:
    crds = [d for d in upstream.volcano_documents() if d["kind"] == "CustomResourceDefinition"]
    for crd in crds:
        await apply(api, crd)

    async def established() -> bool:
        for crd in crds:
            got = await kubeapi.request(api, "GET", object_path(crd))
            conditions = {
                c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions") or []
            }
            if conditions.get("Established") != "True":
                return False
        return True

    await eventually(established, timeout=60)


@pytest.mark.parametrize("path", WORKLOADS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
async def test_workload_applies_with_server_dry_run(
    volcano_crds: None, namespace: str, kubeconfig: Path, path: Path
) -> None:
    """`kubectl apply --dry-run=server` itself (the CRDs' schemas, pruning and strict field
    validation on the apiserver), then the stored object keeps every resource asked."""
    kubectl = binaries.ensure("kubectl")
    proc = await asyncio.create_subprocess_exec(
        str(kubectl),
        "--kubeconfig",
        str(kubeconfig),
        "apply",
        "--dry-run=server",
        "--validate=strict",
        "-n",
        namespace,
        "-f",
        str(path),
        "-o",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    stored = json.loads(out)
    items = stored["items"] if stored.get("kind") == "List" else [stored]
    sent = documents(path)
    assert [i["kind"] for i in items] == [d["kind"] for d in sent] == ["Job"] * len(sent)
    for got, doc in zip(items, sent, strict=True):
        assert got["metadata"]["namespace"] == namespace
        assert [
            t["template"]["spec"]["containers"][0]["resources"] for t in got["spec"]["tasks"]
        ] == [t["template"]["spec"]["containers"][0]["resources"] for t in doc["spec"]["tasks"]]

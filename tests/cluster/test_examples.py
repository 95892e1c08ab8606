"""Every file in `examples/` is accepted by the real apiserver as `kubectl apply --dry-run=server`
sends it, whole (all its documents): the policies (schema + CEL; and the operator's models parse
them), the Argo CD Applications and Flux objects of `examples/gitops/` against those projects'
own CRDs (fetched from their Go modules by vgpu_devcluster.gitops_crds), and the operator
configs (`operator-config/values.yaml`, Helm values) as the chart renders them. The workloads
(`*/workloads/`) are sent the same way by tests/cluster/test_workload_examples.py, against
Volcano's CRDs."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import EXAMPLES, documents, eventually
from tests.cluster.ssa import items, kubectl
from vgpu_devcluster import binaries
from vgpu_devcluster.gitops_crds import ensure_gitops_crds
from vgpu_devcluster.install import OPERATOR_NAMESPACE, apply, chart_dir, ensure_namespace
from vgpu_operator import contract, kubeapi
from vgpu_operator.core.nodes.validate import parse_policy

pytestmark = pytest.mark.cluster

ALL_FILES = sorted(p for p in EXAMPLES.rglob("*.yaml"))
WORKLOADS = [p for p in ALL_FILES if p.parent.name == "workloads"]
VALUES = [p for p in ALL_FILES if p.parent.name == "operator-config"]
MANIFESTS = [p for p in ALL_FILES if p not in WORKLOADS and p not in VALUES]
# The namespaces the GitOps examples' objects live in (Argo CD's and Flux's defaults).
GITOPS_NAMESPACES = ("argocd", "flux-system")

Obj = dict[str, Any]


def label(path: Path) -> str:
    return str(path.relative_to(EXAMPLES))


def contains(stored: Any, sent: Any) -> bool:
    """Everything `sent` says is in `stored` (which may add defaults): maps key by key, lists
    item by item."""
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(
            k in stored and contains(stored[k], v) for k, v in sent.items()
        )
    if isinstance(sent, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(sent)
            and all(contains(a, b) for a, b in zip(stored, sent, strict=True))
        )
    return bool(stored == sent)


def test_every_example_file_is_covered() -> None:
    """Each YAML file is a manifest, Helm values or a workload; and each scenario folder holds
    policies."""
    assert set(MANIFESTS) | set(VALUES) | set(WORKLOADS) == set(ALL_FILES)
    assert len(MANIFESTS) >= 10, [label(p) for p in MANIFESTS]
    with_policies = {
        p.parent.name
        for p in MANIFESTS
        if any(d.get("kind") == contract.POLICY_KIND for d in documents(p.read_text()))
    }
    assert len(with_policies) >= 6, with_policies
    gitops = {p.name for p in MANIFESTS if p.parent.name == "gitops"}
    assert {"argocd-operator-owns.yaml", "flux-operator-owns.yaml"} <= gitops, gitops


@pytest.fixture(scope="module")
async def gitops_crds(api: client.ApiClient, installed: object) -> None:
    """Argo CD's and Flux's CRDs (as their Go modules ship them), Established; their
    namespaces."""
    crds = [yaml.safe_load(p.read_text()) for p in ensure_gitops_crds()]
    for crd in crds:
        await apply(api, crd)
    for namespace in (*GITOPS_NAMESPACES, "volcano-system"):
        await ensure_namespace(api, namespace)

    async def established() -> bool:
        for crd in crds:
            got = await kubeapi.request(
                api,
                "GET",
                f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}",
            )
            conditions = {
                c["type"]: c["status"] for c in got.get("status", {}).get("conditions", [])
            }
            if conditions.get("Established") != "True":
                return False
        return True

    await eventually(established, timeout=60)


@pytest.mark.parametrize("path", MANIFESTS, ids=label)
async def test_manifest_applies_with_server_dry_run(
    gitops_crds: None, kubeconfig: Path, path: Path
) -> None:
    """`kubectl apply --dry-run=server --validate=strict -f FILE`: every document is stored as
    sent (the apiserver's schemas, pruning, CEL and strict field validation)."""
    code, out, err = await kubectl(
        kubeconfig, "apply", "--dry-run=server", "--validate=strict", "-f", str(path), "-o", "json"
    )
    assert code == 0, err
    sent = documents(path.read_text())
    got = items(out)
    assert [(g["kind"], g["metadata"]["name"]) for g in got] == [
        (d["kind"], d["metadata"]["name"]) for d in sent
    ]
    for stored, doc in zip(got, sent, strict=True):
        # nothing the file says was pruned or changed
        assert contains(stored["spec"], doc["spec"]), (label(path), doc["metadata"]["name"])
        if doc["kind"] == contract.POLICY_KIND:
            parsed = parse_policy(doc)
            assert parsed.usable, parsed.problems


def chart_values(path: Path) -> Obj:
    """The Helm values a file stands for: a values file as it is, an operator config file
    (`vgpu-operator run --config`) as the chart's `config:`."""
    loaded: Obj = yaml.safe_load(path.read_text())
    return loaded if "config" in loaded else {"config": loaded}


@pytest.mark.parametrize("path", VALUES, ids=label)
async def test_operator_config_renders_and_applies_with_server_dry_run(
    gitops_crds: None, kubeconfig: Path, path: Path, tmp_path: Path
) -> None:
    """Operator configs: `helm template -f VALUES | kubectl apply --dry-run=server -f -`, and
    the operator config the chart renders from them carries the file's settings."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values(path)))
    helm = binaries.ensure("helm")
    args = [str(helm), "template", "vgpu-operator", str(chart_dir()), "-n", OPERATOR_NAMESPACE]
    args += ["--kube-version", binaries.KUBERNETES_VERSION, "-f", str(values)]
    rendered = subprocess.run(
        args,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    code, out, err = await kubectl(
        kubeconfig,
        "apply",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        "-",
        "-o",
        "json",
        stdin=rendered,
    )
    assert code == 0, err
    got = items(out)
    assert len(got) == len(documents(rendered))
    [configmap] = [g for g in got if g["metadata"]["name"] == "vgpu-operator-config"]
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    assert contains(config, chart_values(path)["config"])

"""What Helm does to the chart's `crds/`, with the project's helm on the local apiserver, and the
command that upgrades the CRDs (docs/release.md, "CRD upgrades"):

- `helm install` creates a CRD of `crds/` that does not exist (field manager `helm`);
- `helm upgrade` with a chart whose CRD has a new field leaves the CRD exactly as it was;
- `kubectl apply --server-side -f crds/` then names the conflict with `helm`; with
  `--force-conflicts` it upgrades the CRD;
- `helm uninstall` leaves the CRD (and so every policy) in place.

The chart is copied with its `crds/` only (Helm's handling of `crds/` does not depend on the
templates), and the CRD is renamed into a group of its own so the session's CRD is untouched.
Release 1 carries an older CRD (without `suspend`, as before that field), release 2 the current.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import unique
from vgpu_devcluster import binaries
from vgpu_devcluster.install import chart_dir, crds_dir
from vgpu_operator import kubeapi

ADDED_FIELD = "suspend"  # optional, read by no CEL rule


async def run(tool: str, kubeconfig: Path, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        str(binaries.ensure(tool)),
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def chart_with(crd: dict[str, Any], version: str, into: Path) -> Path:
    meta = yaml.safe_load((chart_dir() / "Chart.yaml").read_text())
    meta["version"] = version
    (into / "crds").mkdir(parents=True)
    (into / "Chart.yaml").write_text(yaml.safe_dump(meta))
    (into / "crds" / "crd.yaml").write_text(yaml.safe_dump(crd))
    return into


def spec_properties(crd: dict[str, Any]) -> dict[str, Any]:
    [version] = [v for v in crd["spec"]["versions"] if v["storage"]]
    props: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    return props


async def test_helm_installs_crds_never_upgrades_or_deletes_them_server_side_apply_does(
    api: client.ApiClient, kubeconfig: Path, tmp_path: Path
) -> None:
    [path] = sorted(crds_dir().glob("*.yaml"))
    current = yaml.safe_load(path.read_text())
    group = f"{unique('crd')}.vgpu.test"
    current["spec"]["group"] = group
    current["metadata"]["name"] = f"{current['spec']['names']['plural']}.{group}"
    older = copy.deepcopy(current)
    for version in older["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert ADDED_FIELD not in json.dumps(spec.get("x-kubernetes-validations", []))
        del spec["properties"][ADDED_FIELD]
    v1 = chart_with(older, "0.0.1", tmp_path / "v1")
    v2 = chart_with(current, "0.0.2", tmp_path / "v2")
    crd_path = (
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{current['metadata']['name']}"
    )
    release, namespace = unique("crds"), unique("crds")
    try:
        code, out = await run(
            "helm", kubeconfig, "install", release, str(v1), "-n", namespace, "--create-namespace"
        )
        assert code == 0, out
        installed = await kubeapi.request(api, "GET", crd_path)
        assert ADDED_FIELD not in spec_properties(installed)
        assert {m["manager"] for m in installed["metadata"]["managedFields"]} >= {"helm"}

        # helm upgrade: the CRD stays exactly as helm install left it
        code, out = await run("helm", kubeconfig, "upgrade", release, str(v2), "-n", namespace)
        assert code == 0, out
        after = await kubeapi.request(api, "GET", crd_path)
        assert after["metadata"]["resourceVersion"] == installed["metadata"]["resourceVersion"]
        assert ADDED_FIELD not in spec_properties(after)

        # the documented upgrade: server-side apply, which names helm's fields first
        upgrade = ("apply", "--server-side", "-f", str(v2 / "crds"))
        code, out = await run("kubectl", kubeconfig, *upgrade)
        assert code != 0 and 'conflict with "helm"' in out and "--force-conflicts" in out, out
        code, out = await run("kubectl", kubeconfig, *upgrade, "--force-conflicts")
        assert code == 0, out
        upgraded = await kubeapi.request(api, "GET", crd_path)
        assert ADDED_FIELD in spec_properties(upgraded)

        # helm uninstall: the CRD stays (deleting it would delete every policy)
        code, out = await run("helm", kubeconfig, "uninstall", release, "-n", namespace, "--wait")
        assert code == 0, out
        await kubeapi.request(api, "GET", crd_path)
    finally:
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(api, "DELETE", crd_path, field_manager=None)
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(
                api, "DELETE", f"/api/v1/namespaces/{namespace}", field_manager=None
            )

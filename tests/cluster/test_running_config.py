"""`doctor` and `plan` without `--config` check against the configuration of the running
operator, found in the cluster where the chart keeps it (commands/running_config.py), and say
where it came from on stderr:

- no chart ConfigMap: the built-in default, and why;
- the chart's ConfigMap as `helm template` renders it for a release of its own name in a
  namespace of its own (the same object `helm install` creates): found by its label, used (the
  snapshot `doctor --save-snapshot` writes records it; `plan` lets a node without GPU evidence
  into a pool under its `requireGpuEvidence: false`, which the built-in default refuses);
- a second release's ConfigMap: exit 2 naming both;
- credentials that may not list ConfigMaps across namespaces (as the controller's own may
  not; here an account without rights): the built-in default, saying the list was refused.

The demo keeps its configuration in the same ConfigMap: tests/cluster/test_demo.py."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import NodeFactory, cli, unique
from tests.cluster.rbackit import token_kubeconfig
from vgpu_devcluster import binaries
from vgpu_devcluster.install import apply, chart_dir
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path

pytestmark = pytest.mark.cluster

RULE = "scheduler-vgpu-enabled"  # any one rule: the configuration is what is checked here
CONFIG = {"gpuMemoryFactor": 7, "requireGpuEvidence": False}


def policy_file(directory: Path, pool: str) -> Path:
    """A hami-core policy of the nodes labelled test/pool=POOL, not applied."""
    doc = {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": pool},
        "spec": {"nodeSelector": {"matchLabels": {"test/pool": pool}}, "mode": "hami-core"},
    }
    path = directory / f"{pool}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def chart_configmap(release: str, namespace: str, config: dict[str, Any], tmp: Path) -> Any:
    """The chart's configuration ConfigMap as `helm install RELEASE -n NAMESPACE` creates it
    (`fullnameOverride`: the chart's way to name a second release's objects apart)."""
    values = tmp / f"{release}-values.yaml"
    values.write_text(yaml.safe_dump({"fullnameOverride": release, "config": config}))
    helm = binaries.ensure("helm")
    args = [str(helm), "template", release, str(chart_dir()), "-n", namespace, "-f", str(values)]
    args += ["--kube-version", binaries.KUBERNETES_VERSION]
    args += ["--show-only", "templates/configmap.yaml"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return yaml.safe_load(out)


# The time of a plan, in the rollout's records of the nodes it takes (`since`, `started`).
PLAN_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def at_any_time(data: Any) -> Any:
    """`data` with every time to the microsecond (a plan's "now") masked."""
    return json.loads(PLAN_TIME.sub("<now>", json.dumps(data)))


async def doctor(kubeconfig: Path | str, *args: str) -> tuple[int, str, str]:
    return await cli("doctor", "--kubeconfig", str(kubeconfig), "--rule", RULE, *args)


async def plan_json(kubeconfig: Path, *args: str) -> tuple[dict[str, Any], str]:
    code, out, err = await cli("plan", "--kubeconfig", str(kubeconfig), "-o", "json", *args)
    assert code in (0, 1), out + err
    return json.loads(out), err


# the CRD (`plan` lists the live policies) and the chart's accounts; their credentials unused
@pytest.mark.usefixtures("installed")
async def test_doctor_and_plan_use_the_running_operators_configuration(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    make_nodes: NodeFactory,
    tmp_path: Path,
) -> None:
    pool = unique("cfg")
    [cpu] = await make_nodes(None, 1, labels={"test/pool": pool})  # no GPU evidence
    policy = policy_file(tmp_path, pool)

    # no chart ConfigMap in the cluster: the built-in default, said with why
    code, _, err = await doctor(kubeconfig)
    assert code in (0, 1), err
    assert "operator configuration: the built-in default (no ConfigMap labelled " in err, err
    default, err = await plan_json(kubeconfig, "-f", str(policy))
    assert "operator configuration: the built-in default" in err, err
    assert [(n["node"], n["action"]) for n in default["nodes"]] == [(cpu, "blocked")], default

    release = unique("gpu-ops")
    created = [chart_configmap(release, namespace, CONFIG, tmp_path)]
    try:
        await apply(api, created[0])
        where = f"ConfigMap {namespace}/{release}-config, key config.yaml"

        snapshot = tmp_path / "snapshot.json"
        code, _, err = await doctor(kubeconfig, "--save-snapshot", str(snapshot))
        assert code in (0, 1), err
        assert f"operator configuration: {where}" in err, err
        recorded = json.loads(snapshot.read_text())["config"]
        assert {k: recorded[k] for k in CONFIG} == CONFIG  # what the checks were read with

        found, err = await plan_json(kubeconfig, "-f", str(policy))
        assert f"operator configuration: {where}" in err, err
        assert [(n["node"], n["enters"]) for n in found["nodes"]] == [(cpu, True)], found
        assert found["nodes"][0]["action"] != "blocked", found  # no GPU evidence asked for
        # the same plan as with the ConfigMap's configuration given as a file
        given = tmp_path / "config.yaml"
        given.write_text(created[0]["data"]["config.yaml"])  # what `kubectl get` gives
        from_file, err = await plan_json(kubeconfig, "-f", str(policy), "--config", str(given))
        assert f"operator configuration: file {given}" in err, err
        assert at_any_time(from_file) == at_any_time(found)

        # a second release: not guessed between
        second = unique("gpu-ops")
        created.append(chart_configmap(second, namespace, {}, tmp_path))
        await apply(api, created[1])
        code, out, err = await doctor(kubeconfig)
        assert code == 2 and out == "", out + err
        assert f"{namespace}/{release}-config" in err and f"{namespace}/{second}-config" in err
        assert "--config FILE" in err, err

        # credentials that may not list ConfigMaps in every namespace (the controller's own
        # may not either: its Roles name each object): the built-in default, saying why. A
        # ServiceAccount of the test's with no rights at all, so that the session's audit of
        # the chart's accounts (test_rbac_audit.py) sees no refusal of theirs.
        account = {"apiVersion": "v1", "kind": "ServiceAccount"}
        account["metadata"] = {"name": "no-rights", "namespace": namespace}
        await apply(api, account)
        nobody = await token_kubeconfig(api, namespace, "no-rights", tmp_path)
        code, _, err = await doctor(str(nobody))
        assert code != 2, err  # 2: the lookup refused to choose; this one chose the default
        assert "listing ConfigMaps in every namespace was refused (403)" in err, err
    finally:
        # deleted now: the namespace's deletion lags, and the session's other doctor runs
        # must not find a release here
        for cm in created:
            with contextlib.suppress(kubeapi.NotFound):
                await kubeapi.request(
                    api,
                    "DELETE",
                    configmap_path(cm["metadata"]["namespace"], cm["metadata"]["name"]),
                )

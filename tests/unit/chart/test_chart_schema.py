"""values.schema.json describes and checks every value: a `description` on every property, no
unknown key anywhere but under `global` (each top-level key tried with `helm template`), enums
where a value has a fixed set, and the `config` part generated from the operator's own model
(vgpu_devcluster.chart_schema), so the chart refuses what the operator would refuse at start."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from vgpu_devcluster import binaries, chart_schema
from vgpu_devcluster.install import chart_dir

SCHEMA: dict[str, Any] = json.loads((chart_dir() / "values.schema.json").read_text())
VALUES: dict[str, Any] = yaml.safe_load((chart_dir() / "values.yaml").read_text())


def _template(*sets: str) -> subprocess.CompletedProcess[str]:
    args = [str(binaries.ensure("helm")), "template", str(chart_dir())]
    for s in sets:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def _walk(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema under `node` with its path (properties by name, items as [])."""
    if not isinstance(node, dict):
        return
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _walk(node[key], f"{path}[]" if key == "items" else f"{path}.*")
    for sub in node.get("anyOf", []):
        yield from _walk(sub, path)


def _all_schemas() -> Iterator[tuple[str, dict[str, Any]]]:
    yield from _walk(SCHEMA, "")
    for name, sub in SCHEMA["$defs"].items():
        yield from _walk(sub, f"$defs.{name}")


def test_every_property_has_a_description() -> None:
    missing = [
        f"{path}.{name}"
        for path, node in _all_schemas()
        for name, sub in node.get("properties", {}).items()
        if not sub.get("description")
    ]
    assert not missing, missing


def test_every_object_is_closed_except_global_and_kubernetes_passthroughs() -> None:
    """An object either lists its keys (additionalProperties: false), is a map of typed values
    (additionalProperties: a schema), or is a Kubernetes object the apiserver checks
    (`$comment: passthrough`: affinity terms, a volume's source, an env var's valueFrom)."""
    open_ = [
        path
        for path, node in _all_schemas()
        if node.get("type") == "object"
        and path != ".global"
        and node.get("additionalProperties") is not False
        and not isinstance(node.get("additionalProperties"), dict)
        and node.get("$comment") != "passthrough"
    ]
    assert not open_, open_
    passthrough = sorted(p for p, n in _all_schemas() if n.get("$comment") == "passthrough")
    assert passthrough == ["$defs.kubernetesObject", ".agent.extraVolumes[]"]


def test_config_schema_is_generated_from_the_model() -> None:
    assert chart_schema.main(["--check"]) == 0, "run: python -m vgpu_devcluster.chart_schema"


def _unknown_key_case(key: str) -> str:
    """A --set that puts an unknown key under top-level `key`."""
    node = SCHEMA["properties"][key]
    if "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
    if node.get("type") == "array":
        return f"{key}[0].zzUnknown=1"
    if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"{key}.zz.zzUnknown=1"  # a map: its values are typed, not objects
    return f"{key}.zzUnknown=1"


TOP_LEVEL = sorted(k for k in SCHEMA["properties"] if k != "global")


def test_values_yaml_and_schema_have_the_same_top_level_keys() -> None:
    assert sorted(VALUES) == sorted(SCHEMA["properties"])


@pytest.mark.parametrize("key", TOP_LEVEL)
def test_an_unknown_key_under_each_top_level_key_is_refused(key: str) -> None:
    case = _unknown_key_case(key)
    done = _template(case)
    assert done.returncode != 0, f"helm template accepted --set {case}"
    assert f"/{key}" in done.stderr, done.stderr


def test_unknown_keys_deeper_down_are_refused() -> None:
    for case in (
        "agent.nvidiaSmi.hostPath.zzUnknown=1",
        "monitoring.dashboard.zzUnknown=1",
        "config.restarts.zzUnknown=1",
        "config.migGeometries.catalog[0].zzUnknown=1",
        "securityContext.capabilities.zzUnknown=1",
        "affinity.podAntiAfinity.x=1",
        "topologySpreadConstraints[0].zzUnknown=1",
        "extraEnv[0].name=X,extraEnv[0].valu=y",
    ):
        assert _template(case).returncode != 0, f"helm template accepted --set {case}"


def test_anything_under_global_is_accepted() -> None:
    done = _template("global.foo=bar", "global.nested.deeper=1")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("config.onDelete=Delet", "/config/onDelete"),
        ("config.requireGpuEvidence=yes", "/config/requireGpuEvidence"),
        ("config.gpuMemoryFactor=0", "/config/gpuMemoryFactor"),
        ("config.deviceDefaults.deviceSplitCount=500", "/config/deviceDefaults/deviceSplitCount"),
        ("config.resourceNames.count=not a name", "/config/resourceNames"),
        ("admissionPolicies.enabled=maybe", "/admissionPolicies/enabled"),
        (
            "admissionPolicies.evictions.deniedNamespaces[0]=Not_A_Namespace",
            "/admissionPolicies/evictions/deniedNamespaces/0",
        ),
        ("rbac.pluginPodLabels.x.y.z=1", "/rbac/pluginPodLabels/x/y"),
        ("tolerations[0].operator=Sometimes", "/tolerations/0/operator"),
        ("topologySpreadConstraints[0].whenUnsatisfiable=Never", "/topologySpreadConstraints/0"),
        ("global.imageRegistry[0]=x", "/global/imageRegistry"),
    ],
)
def test_enums_and_types_are_checked(value: str, field: str) -> None:
    done = _template(value)
    assert done.returncode != 0, f"helm template accepted --set {value}"
    assert field in done.stderr, done.stderr


def test_whole_auto_resource_names_pass_as_the_operator_takes_them() -> None:
    done = _template("config.resourceNames=null", "config.resourceNames=auto")
    assert done.returncode == 0, done.stderr

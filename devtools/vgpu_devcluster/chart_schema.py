"""The `config` part of the chart's values.schema.json, generated from the operator's own
configuration model (models/config.py, `OperatorConfig`), so `helm template/install/upgrade`
refuse what the operator would refuse at start (an enum typo, an unknown key, a bad name)
instead of a CrashLoopBackOff.

The rest of values.schema.json is written by hand; this replaces only `properties.config` and
the `$defs` whose names start with `config.`:

    .venv/bin/python -m vgpu_devcluster.chart_schema          # rewrite values.schema.json
    .venv/bin/python -m vgpu_devcluster.chart_schema --check  # exit 1 when it is out of date

The model's JSON schema carries a `fix` hint on most fields (how to correct a bad value); it
becomes the field's `description` where DESCRIPTIONS below has none. Every object is closed
(`additionalProperties: false`): the MIG catalog's items allow extra keys in pydantic only to
refuse them with a better message, which the operator still gives.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vgpu_devcluster.install import chart_dir

PREFIX = "config."
# (model name, property) -> description; "OperatorConfig" is the top level.
DESCRIPTIONS: dict[tuple[str, str], str] = {
    ("OperatorConfig", "mode"): (
        "enforce: write what the operator owns and restart what must re-read; report: write "
        "only the nodes (labels, taints) and report the rest; observe: write nothing but the "
        "policies' status and Events, reporting what enforce would do."
    ),
    ("OperatorConfig", "onDelete"): (
        "What deleting a policy does to its nodes unless its spec.onDelete says: Delete (remove "
        "what the operator set) or Retain (leave everything, stop managing the nodes)."
    ),
    ("OperatorConfig", "requireGpuEvidence"): (
        "Label and taint a node only when it shows its policy's hardware (GPU Feature Discovery "
        "labels, device plugin capacity). Turn off only without GFD or the device plugins."
    ),
    ("OperatorConfig", "resourceNames"): (
        "The four vGPU extended resource names the scheduler and device plugin agree on, or "
        "'auto' for all four (resolved from the cluster)."
    ),
    ("OperatorConfig", "gpuMemoryFactor"): (
        "MiB per registered vGPU memory unit (the plugin's --gpu-memory-factor): a "
        "vgpu-memory request of N means N x this MiB, so changing it changes the unit of every "
        "request. Unset (null): the one the cluster's device config has, adopted, never reset; "
        "1 where it has none."
    ),
    ("OperatorConfig", "deviceDefaults"): (
        "The device ConfigMap's `nvidia:` values for every node without a per-node override."
    ),
    ("OperatorConfig", "deviceConfig"): (
        "The Volcano vGPU device ConfigMap (namespace, name, data key) the operator renders. The "
        "chart's Roles grant it by name, so 'auto' is not accepted here: run "
        "`vgpu-operator doctor --discover` and set what it prints."
    ),
    ("OperatorConfig", "nodeConfig"): (
        "The device plugin's per-node ConfigMap (namespace, name, data key)."
    ),
    ("OperatorConfig", "ascendNodeConfig"): (
        "HAMi's Ascend device plugin node ConfigMap (namespace, name, data key)."
    ),
    ("OperatorConfig", "devicePlugin"): (
        "The volcano-vgpu-device-plugin DaemonSet (namespace, name, optional container)."
    ),
    ("OperatorConfig", "ascendDevicePlugin"): (
        "HAMi's Ascend device plugin DaemonSet (namespace, name, optional container)."
    ),
    ("OperatorConfig", "scheduler"): "The Volcano scheduler's ConfigMap and Deployment.",
    ("OperatorConfig", "restarts"): (
        "Whether and how often the operator may restart components after a change they only "
        "read at start."
    ),
    ("OperatorConfig", "ascendVnpu"): "Ascend vNPU in HAMi mode (off by default).",
    ("OperatorConfig", "migGeometries"): "The knownMigGeometries catalog the operator renders.",
    ("OperatorConfig", "nvidiaDevicePlugin"): (
        "How to recognise NVIDIA's own device plugin pods (they must not run on managed nodes)."
    ),
    ("OperatorConfig", "nvidiaDevicePluginConfig"): (
        "The ConfigMap of NVIDIA's device plugin configs (namespace, name, optional key; "
        "unset: none read): pods asking a resource they rename (time-slicing, MPS) are GPU "
        "consumers. Read only, granted by name."
    ),
    ("OperatorConfig", "gpuDraDrivers"): (
        "DRA drivers whose ResourceClaims make their pod a GPU consumer (default [gpu.nvidia.com])."
    ),
    ("OperatorConfig", "dra"): (
        "The installation of NVIDIA's DRA driver the `mode: dra` pools use; null: no policy may "
        "use mode dra. Its kubelet plugin DaemonSet is pinned to the dra nodes (granted by name)."
    ),
    ("DraInstallation", "driver"): "The DRA driver's name (its ResourceSlices' spec.driver).",
    ("DraInstallation", "kubeletPluginDaemonSet"): (
        "The driver's kubelet plugin DaemonSet (namespace, name): the operator gives it a "
        "nodeSelector on vgpu.volcano.sh/device-plugin=dra."
    ),
    ("DraInstallation", "dynamicMIG"): (
        "Whether the driver runs with its DynamicMIG feature gate: dynamic-mig pools need it "
        "on, static-mig pools need it off."
    ),
    ("DaemonSetRef", "namespace"): "The DaemonSet's namespace.",
    ("DaemonSetRef", "name"): "The DaemonSet's name.",
    ("OperatorConfig", "policyKeys"): (
        "The node label and taint keys policies may ask for (keys, or prefixes ending in '/'): "
        "the operator refuses a policy asking for another, and the admission policy refuses "
        "the controller's Node writes of any other key. The chart requires it."
    ),
    ("PolicyKeys", "labels"): "Label keys or prefixes ending in '/' (spec.nodeLabels).",
    ("PolicyKeys", "taints"): "Taint keys or prefixes ending in '/' (spec.nodeTaints).",
    ("OperatorConfig", "requireAdmissionPolicies"): (
        "true: the controller writes only while the chart's admission policies are present, "
        "unchanged and enforced, and runs as in observe mode otherwise; false: it writes "
        "without them (required with admissionPolicies.enabled: false)."
    ),
    ("OperatorConfig", "admissionPolicies"): (
        "Rendered by the chart (the hash and names of the admission policies it installs); "
        "not a value to set."
    ),
    ("NvidiaPluginConfigRef", "namespace"): "The ConfigMap's namespace.",
    ("NvidiaPluginConfigRef", "name"): "The ConfigMap's name.",
    ("NvidiaPluginConfigRef", "key"): "The one config to read (a data key); unset: every key.",
    ("ConfigMapRef", "namespace"): "The ConfigMap's namespace.",
    ("ConfigMapRef", "name"): "The ConfigMap's name.",
    ("ConfigMapRef", "key"): "The data key holding the file: letters, digits, '-', '_', '.'.",
    ("WorkloadRef", "namespace"): "The workload's namespace.",
    ("WorkloadRef", "name"): "The workload's name.",
    ("DeviceDefaults", "deviceSplitCount"): "How many pods may share one GPU (1-128).",
    ("AscendVnpu", "enabled"): "Mirror HAMi's Ascend vNPU device config to the scheduler.",
    ("AscendVnpu", "schedulerDevice"): "HAMi's scheduler device ConfigMap (the source).",
    ("DeviceDefaults", "deviceMemoryScaling"): "Memory overcommit factor (0 < x <= 100).",
    ("DeviceDefaults", "deviceCoreScaling"): "Core overcommit factor (0 < x <= 100).",
    ("DeviceDefaults", "defaultMemory"): "MiB a vGPU request without a memory gets (0: all).",
    ("DeviceDefaults", "defaultCores"): "Percent of cores a request without cores gets (0-100).",
    ("DeviceDefaults", "defaultGPUNum"): "vGPUs a request without a count gets.",
    ("DeviceDefaults", "overwriteEnv"): "Let HAMi-core overwrite the container's CUDA env.",
    ("MigGeometries", "builtins"): "Include the built-in geometries (A30, A100, H100, H200...).",
    ("MigGeometries", "fromInventory"): (
        "Add a model no catalog knows from a node agent's inventory (sanity-checked)."
    ),
    ("MigGeometries", "catalog"): (
        "Entries of your own, ahead of the built-ins: models, allowedGeometries (group, "
        "geometries). An invalid catalog stops the operator at start, naming the field."
    ),
    ("MigGeometryEntry", "models"): "Substrings of the GPU model names this entry is for.",
    ("MigGeometryEntry", "allowedGeometries"): "Whole-GPU MIG layouts, in order of preference.",
    ("MigGeometryGroup", "group"): "The layout group's name: letters, digits, '_' and '.'.",
    ("MigGeometryGroup", "geometries"): "The MIG instances of this layout.",
    ("MigTemplate", "name"): "The MIG profile, e.g. 1g.10gb.",
    ("MigTemplate", "memory"): "The profile's memory in MiB.",
    ("MigTemplate", "count"): "How many instances of the profile.",
    ("NvidiaDevicePluginMatch", "podLabels"): "Label sets, any of which marks such a pod.",
    ("NvidiaDevicePluginMatch", "imageSubstrings"): "Image substrings that mark such a pod.",
    ("ResourceNames", "count"): "Resource of a vGPU count, e.g. volcano.sh/vgpu-number.",
    ("ResourceNames", "memory"): "Resource of vGPU memory, e.g. volcano.sh/vgpu-memory.",
    ("ResourceNames", "memoryPercentage"): (
        "Resource of vGPU memory as a percentage, e.g. volcano.sh/vgpu-memory-percentage."
    ),
    ("ResourceNames", "cores"): "Resource of vGPU cores, e.g. volcano.sh/vgpu-cores.",
    ("RestartPolicy", "allowed"): "Whether the operator may restart the scheduler and plugins.",
    ("RestartPolicy", "minIntervalSeconds"): "A component is restarted at most this often.",
    ("SchedulerRef", "configMap"): "The scheduler's ConfigMap (namespace, name, data key).",
    ("SchedulerRef", "deployment"): "The scheduler's Deployment (namespace, name).",
    ("WorkloadRef", "container"): (
        "Which container matters; unset: the one whose image or name says so, else the first."
    ),
}
# Whole references the model also takes as the string 'auto' and the chart can pass on (the
# chart needs the object names of the others for its Roles).
AUTO_WHOLE = ("ResourceNames",)


def _model_schema() -> dict[str, Any]:
    from vgpu_operator.models.config import OperatorConfig

    return OperatorConfig.model_json_schema(by_alias=True)


def _clean(node: Any, owner: str, prop: str | None, missing: list[str]) -> Any:
    """`node` with titles and defaults dropped, refs renamed, descriptions added, closed."""
    if isinstance(node, list):
        return [_clean(item, owner, None, missing) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "default", "fix"):
            continue
        if key == "$ref":
            out[key] = "#/$defs/" + PREFIX + value.rsplit("/", 1)[1]
        elif key == "properties":
            out[key] = {p: _clean(v, owner, p, missing) for p, v in value.items()}
        elif key in ("items", "anyOf", "additionalProperties"):
            out[key] = _clean(value, owner, None, missing)
        else:
            out[key] = value
    if prop is not None:
        text = DESCRIPTIONS.get((owner, prop)) or node.get("description") or node.get("fix")
        if text is None:
            missing.append(f"{owner}.{prop}")
        else:
            out["description"] = " ".join(str(text).split())
    nullable = out.get("anyOf")
    if nullable and len(nullable) == 2 and {"type": "null"} in nullable:
        [other] = [s for s in nullable if s != {"type": "null"}]
        if set(other) == {"type"}:  # Optional[str] and the like: one type or null
            del out["anyOf"]
            out["type"] = [other["type"], "null"]
    if out.get("type") == "object" and "properties" in out:
        out["additionalProperties"] = False
    return out


def config_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the schema of `config`, the `$defs` it refers to), each `$defs` name prefixed."""
    model = _model_schema()
    missing: list[str] = []
    defs: dict[str, Any] = {}
    for name, schema in model.pop("$defs", {}).items():
        cleaned = _clean(schema, name, None, missing)
        if name in AUTO_WHOLE:
            cleaned = {"anyOf": [cleaned, {"const": "auto"}]}
        defs[PREFIX + name] = cleaned
    top = _clean(model, "OperatorConfig", None, missing)
    top["description"] = (
        "The operator configuration (models/config.py), rendered into the ConfigMap "
        "vgpu-operator-config. Generated from the model by `python -m "
        "vgpu_devcluster.chart_schema`; unset keys take the built-in defaults."
    )
    if missing:
        raise KeyError(f"no description for {', '.join(missing)}: add it to DESCRIPTIONS")
    return top, defs


def schema_path() -> Path:
    return chart_dir() / "values.schema.json"


def updated(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (values.schema.json's content) with its `config` part regenerated."""
    top, defs = config_schema()
    kept = {k: v for k, v in schema.get("$defs", {}).items() if not k.startswith(PREFIX)}
    out = dict(schema)
    out["$defs"] = {**kept, **dict(sorted(defs.items()))}
    out["properties"] = {**schema["properties"], "config": top}
    return out


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vgpu_devcluster.chart_schema")
    parser.add_argument("--check", action="store_true", help="exit 1 when out of date")
    args = parser.parse_args(argv)
    path = schema_path()
    current = path.read_text()
    wanted = render(updated(json.loads(current)))
    if args.check:
        if wanted != current:
            print(f"{path} is out of date: run python -m vgpu_devcluster.chart_schema")
            return 1
        return 0
    path.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""HAMi's plugin manifest's MIG geometries promise more memory than the instances have (A100-40GB
`1g.5gb` 5120 MiB, `7g.40gb` 40960, A30 `1g.6gb` 6144, against `nvidia-smi mig -lgip`'s 4.75,
39.25-39.50 and 5.81 GiB). On a cluster with an A100-SXM4-40GB and an A30 node in dynamic-MIG
mode (their node-config entries, as a hand-configured cluster has them) and that device config:

- `report` mode writes nothing to it and reports each template (rule mig-memory-above-hardware,
  a Warning Event on the ConfigMap naming the figures);
- `enforce` mode lowers every template of those two models to what the instance surely has
  (core/volcano/mig_memory.py: the lowest cited `-lgip` figure, floor((GiB - 0.005) x 1024)
  MiB), keeps the A100-80GB's (within the listing's two decimals) and every group name, order
  and count, and the rule is quiet."""

from __future__ import annotations

import json
from typing import Any

import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import event_reasons, eventually
from tests.cluster.volcano_env import DEVICE_CM, NODE_CM, PLUGIN_NS, VolcanoEnv, volcano_env
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_operator import kubeapi
from vgpu_operator.controller.snapshot import configmap_path
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.volcano.mig_memory import hardware_memory

__all__ = ["volcano_env", "volcano_operator"]

RULE = "mig-memory-above-hardware"
REASON = "ConfigMigMemoryAboveHardware"  # core/findings.py: "Config" + the rule id, camel-cased
KEY = "device-config.yaml"
# the manifest's entries, by their first model string, and the GPUs they serve
MODELS = {"A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB", "A30": "NVIDIA A30"}


def templates(text: str) -> dict[str, list[tuple[str, str, int]]]:
    """First model string -> (group, profile, memory) of every template, in order."""
    nvidia = yaml.safe_load(text)["nvidia"]
    return {
        e["models"][0]: [
            (g["group"], t["name"], t["memory"])
            for g in e["allowedGeometries"]
            for t in g["geometries"]
        ]
        for e in nvidia["knownMigGeometries"]
    }


async def device_config(api: client.ApiClient) -> dict[str, Any]:
    return await kubeapi.request(api, "GET", configmap_path(PLUGIN_NS, DEVICE_CM))


async def test_manifest_mig_memory_reported_in_report_mode_and_lowered_in_enforce(
    api: client.ApiClient, volcano_env: VolcanoEnv, volcano_operator: OperatorFactory
) -> None:
    env = volcano_env
    await env.add_control_node()
    a100 = await env.add_nodes("A100-SXM4-40GB", 1, gpus=1, released=None)
    a30 = await env.add_nodes("A30", 1, gpus=1, released=None)
    await env.install(consistent=False)  # the plugin manifest's device config, as shipped

    def with_mig_entries(text: str) -> str:
        data = json.loads(text)
        data["nodeconfig"] += [{"name": n, "operatingmode": "mig"} for n in [*a100, *a30]]
        return json.dumps(data, indent=4)

    await env.edit_configmap(PLUGIN_NS, NODE_CM, with_mig_entries, "config.json")
    shipped = await device_config(api)
    before = templates(shipped["data"][KEY])
    hardware = hardware_memory()
    above = {
        (model, profile)
        for model, nvml in MODELS.items()
        for _, profile, memory in before[model]
        if memory > hardware[nvml][profile]
    }
    assert {("A100-SXM4-40GB", "1g.5gb"), ("A100-SXM4-40GB", "7g.40gb"), ("A30", "1g.6gb")} <= above

    # report: reported, not written
    op = volcano_operator("mode: report")
    uid = shipped["metadata"]["uid"]

    async def reported() -> bool:
        reasons = await event_reasons(api, PLUGIN_NS, f"involvedObject.uid={uid},type=Warning")
        return reasons[REASON] > 0

    await eventually(reported, timeout=30, interval=0.3)
    findings = [
        f for f in run_rules(await env.snapshot(), only=[RULE]).findings if f.severity == "error"
    ]
    named = {(m, p) for m in MODELS for _, p, _ in before[m]}
    said = {(m, p) for m, p in named if any(f" {p} of {MODELS[m]} " in f.message for f in findings)}
    assert said == above, [f.message for f in findings]
    assert any("5120 MiB, but the instance has" in f.message for f in findings), findings
    assert (await device_config(api))["metadata"]["resourceVersion"] == shipped["metadata"][
        "resourceVersion"
    ]
    op.stop()

    # enforce: lowered to the instances' memory, nothing else of the entries changed
    volcano_operator()
    lowered: dict[str, list[tuple[str, str, int]]] = {}

    async def corrected() -> bool:
        lowered.update(templates((await device_config(api))["data"][KEY]))
        return all(
            memory <= hardware[nvml][profile]
            for model, nvml in MODELS.items()
            for _, profile, memory in lowered[model]
        )

    await eventually(corrected, timeout=30, interval=0.3)
    for model, nvml in MODELS.items():
        want = [
            (group, profile, min(memory, hardware[nvml][profile]))
            for group, profile, memory in before[model]
        ]
        assert lowered[model] == want, model
    assert lowered["A100-SXM4-80GB"] == before["A100-SXM4-80GB"]  # within -lgip's decimals
    left = run_rules(await env.snapshot(), only=[RULE]).findings
    assert [f.message for f in left if f.severity == "error"] == []

"""doctor's output, the simulated device plugin, and the plugin args the operator owns."""

from __future__ import annotations

import json

from tests.kit.volcano_fixtures import (
    T_STARTED,
    gpu_node,
    healthy,
    obj,
    seed002,
    text,
)
from vgpu_devcluster.fakeplugin import node_gpus, simulate_registration
from vgpu_operator.core.report import exit_code, format_json, format_table, rows
from vgpu_operator.core.rules import RULES, run_rules
from vgpu_operator.core.volcano.render import ArgsPatch, render_plugin_args
from vgpu_operator.models.config import OperatorConfig, load_config
from vgpu_operator.models.volcano import HANDSHAKE_ANNOTATION, REGISTER_ANNOTATION, parse_register
from vgpu_operator.models.volcano_views import Version

EXPECTED_RULES = {
    "scheduler-vgpu-enabled",
    "plugin-not-hami",
    "scheduler-predicates",
    "scheduler-fatal-combination",
    "scheduler-ascend-hami",
    "device-config-location",
    "vnpus-mirror",
    "vnpus-form",
    "device-config-rendered",
    "node-config-rendered",
    "plugin-resource-name-flags",
    "plugin-config-flags-override",
    "plugin-resource-name-prefix",
    "plugin-placement",
    "plugin-node-config-mounted",
    "nvidia-device-plugin-conflict",
    "hami-stack-conflict",
    "dra-driver-conflict",
    "mig-manager-conflict",
    "dra-api-not-served",
    "dra-deviceclass",
    "dra-node-slices",
    "dra-plugin-placement",
    "dra-second-owner",
    "dra-feature-gates",
    "scheduler-default-resource-names",
    "version-handshake",
    "node-registration",
    "mig-geometry-coverage",
    "mig-memory-above-hardware",
    "mig-model-strings",
    "mig-geometry-groups",
    "plugin-static-mig",
    "gpu-memory-factor",
    "node-input-bounds",
    "policy-keys",
    "restart-needed",
    "stranded-pods",
    "legacy-gpu-sharing",
    "ascend-mindcluster",
    "ascend-node-config-file",
    "plugin-node-overrides",
    "settings-without-effect",
    "mig-geometry-reports",
    "payload-readable",
    "ascend-soft-slicing",
    "admission-policies",
}


def test_every_rule_of_the_issue_is_registered_once() -> None:
    assert set(RULES) == EXPECTED_RULES


def test_a_consistent_cluster_passes_every_rule_and_exits_0() -> None:
    """Nothing but the one note every report carries: what a vgpu-memory request means."""
    results = run_rules(healthy())
    assert [(f.id, f.severity) for f in results.findings] == [("gpu-memory-factor", "info")]
    assert exit_code(results) == 0
    assert all(r[2] == "ok" for r in rows(results) if r[0] != "gpu-memory-factor")
    table = format_table(results)
    assert table.splitlines()[0].split() == ["RULE", "OBJECT", "STATUS", "FIX"]
    n = len(EXPECTED_RULES)
    assert f"{n} rules: {n - 1} ok, 0 error(s), 0 warning(s), 1 note(s)" in table
    assert "volcano.sh/vgpu-memory: a request of N means N x 1 MiB" in table


def test_doctor_names_the_causes_of_unexpected_admission_error() -> None:
    results = run_rules(seed002(fixed=False))
    assert exit_code(results) == 1
    statuses = {r[0]: r[2] for r in rows(results)}
    assert {k for k, v in statuses.items() if v == "error"} == {
        "device-config-location",
        "plugin-resource-name-flags",
        "stranded-pods",
    }
    assert results.status("gpu-memory-factor") == "warning"  # and its note on the unit
    table = format_table(results)
    assert "kubelet rejected it with UnexpectedAdmissionError" in table
    assert "Pod volcano-system/test-vgpu-compatible" in table
    assert "--resource-name=volcano.sh/vgpu-number" in table  # wrapped without breaking flags
    data = json.loads(format_json(results))
    assert data["summary"]["error"] == 3 and data["summary"]["warning"] == 1
    assert {r["id"]: r["status"] for r in data["rules"]}["stranded-pods"] == "error"
    assert data["findings"][0]["objects"][0]["kind"] == "ConfigMap"


def test_after_the_seeds_fix_only_the_memory_warning_is_left() -> None:
    results = run_rules(seed002(fixed=True))
    assert [(f.id, f.severity) for f in results.findings if f.severity != "info"] == [
        ("stranded-pods", "error"),
        ("gpu-memory-factor", "warning"),
    ]  # the pod that already failed still has to be recreated


def test_simulated_registration_matches_the_plugin_record_format() -> None:
    node = gpu_node("gpu-a", "RTX-4090", 2)
    node_cfg = json.dumps(
        {
            "nodeconfig": [
                {
                    "name": "gpu-a",
                    "operatingmode": "hami-core",
                    "devicesplitcount": 4,
                    "filterdevices": {"uuid": [], "index": [1]},
                }
            ]
        }
    )
    reg = simulate_registration(
        node,
        node_cfg,
        text("manifest_device_config.yaml"),
        version=Version(1, 12, 0),
        now=T_STARTED,
    )
    gpu0 = node_gpus(node)[0]
    assert reg.annotations[REGISTER_ANNOTATION] == (
        f"{gpu0.uuid},4,24564,NVIDIA-NVIDIA GeForce RTX 4090,true,hami-core:"
    )
    assert reg.annotations[HANDSHAKE_ANNOTATION] == f"Reported {T_STARTED}"
    assert reg.allocatable == {
        "volcano.sh/vgpu-number": "4",
        "volcano.sh/vgpu-cores": "100",
        "volcano.sh/vgpu-memory": "24564",
    }


def test_simulated_registration_follows_factor_mode_and_version() -> None:
    node = gpu_node("gpu-b", "A100-SXM4-80GB", 2)
    cfg = text("manifest_device_config.yaml").replace("gpuMemoryFactor: 1", "gpuMemoryFactor: 2")
    mig = json.dumps({"nodeconfig": [{"name": "gpu-b", "operatingmode": "mig"}]})
    reg = simulate_registration(node, mig, cfg, version=Version(1, 13, 0))
    records = parse_register(reg.annotations[REGISTER_ANNOTATION])
    assert [(r.count, r.memory, r.mode) for r in records] == [(10, 40960, "mig")] * 2
    assert HANDSHAKE_ANNOTATION not in reg.annotations  # removed after v1.12.0
    assert reg.allocatable["volcano.sh/vgpu-memory"] == "81920"
    # v1.11: flags (default split 2) and flag names; the ConfigMap's names are not used
    old = simulate_registration(
        node, None, cfg, version=Version(1, 11, 0), args=["--resource-name=nvidia.com/gpu"]
    )
    assert old.allocatable["nvidia.com/gpu"] == "4"
    assert old.mode == "hami-core"
    # without a device config the real plugin has nothing to register
    assert simulate_registration(node, None, None).problem == "no device ConfigMap to read"


def test_seed002_plugin_args_are_set_to_the_configured_names() -> None:
    ds = obj("seed002_plugin_daemonset.yaml")
    patch = render_plugin_args(ds, load_config("deviceDefaults: {deviceSplitCount: 10}"))
    assert patch == ArgsPatch(
        container="volcano-device-plugin",
        # only what differs from what the plugin uses: the other flags' defaults are the
        # configured values already (core.volcano.config_adoption), so they are not added
        args=["--device-split-count=10", "--resource-name=volcano.sh/vgpu-number"],
    )
    ds["spec"]["template"]["spec"]["containers"][0]["args"] = patch.args
    assert render_plugin_args(ds, OperatorConfig()) is None  # converged


def test_plugin_args_of_versions_that_read_the_configmap_are_left_alone() -> None:
    assert render_plugin_args(obj("manifest_plugin_daemonset.yaml"), OperatorConfig()) is None
    ds = obj("seed002_plugin_daemonset.yaml")
    ds["spec"]["template"]["spec"]["containers"][0]["image"] = "local/plugin:dev"
    assert render_plugin_args(ds, OperatorConfig()) is None  # unknown version: no guess


def test_space_separated_flags_keep_their_style() -> None:
    ds = obj("seed002_plugin_daemonset.yaml")
    ds["spec"]["template"]["spec"]["containers"][0]["args"] = [
        "--resource-name",
        "nvidia.com/gpu",
        "--device-split-count",
        "10",
        "--resource-memory-name=volcano.sh/vgpu-memory",
        "--resource-core-name=volcano.sh/vgpu-cores",
        "--device-cores-scaling=1",
        "--gpu-memory-factor=1",
    ]
    patch = render_plugin_args(ds, OperatorConfig())
    assert patch is not None
    assert patch.args[:4] == [
        "--resource-name",
        "volcano.sh/vgpu-number",
        "--device-split-count",
        "10",
    ]

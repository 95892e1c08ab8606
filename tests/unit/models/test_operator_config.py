"""The operator configuration: defaults, a full file, and errors that name the field and fix."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_operator.models.config import ConfigError, OperatorConfig, load_config

FULL = """
resourceNames:
  count: volcano.sh/vgpu-number
  memory: volcano.sh/vgpu-memory
  memoryPercentage: volcano.sh/vgpu-memory-percentage
  cores: volcano.sh/vgpu-cores
gpuMemoryFactor: 2
deviceDefaults: {deviceSplitCount: 4, deviceCoreScaling: 1.5}
deviceConfig: {namespace: kube-system, name: volcano-vgpu-device-config, key: device-config.yaml}
nodeConfig: {namespace: kube-system, name: volcano-vgpu-node-config, key: config.json}
ascendNodeConfig: {namespace: kube-system, name: hami-device-node-config, key: node-config.yaml}
devicePlugin: {namespace: volcano-system, name: volcano-device-plugin}
ascendDevicePlugin: {namespace: kube-system, name: hami-ascend-device-plugin}
scheduler:
  configMap: {namespace: volcano-system, name: volcano-scheduler-configmap,
              key: volcano-scheduler.conf}
  deployment: {namespace: volcano-system, name: volcano-scheduler}
mode: report
restarts: {allowed: false, minIntervalSeconds: 600}
ascendVnpu:
  enabled: true
  schedulerDevice: {namespace: kube-system, name: hami-scheduler-device, key: device-config.yaml}
migGeometries:
  builtins: false
  fromInventory: false
  catalog:
  - models: ["H100 NVL"]
    allowedGeometries:
    - group: group1
      geometries: [{name: 1g.12gb, memory: 11264, count: 7}]
"""


def test_empty_file_gives_the_defaults_of_the_shipped_manifests() -> None:
    cfg = load_config("")
    assert cfg == OperatorConfig()
    assert cfg.resource_names.count == "volcano.sh/vgpu-number"
    assert cfg.resource_names.memory_percentage == "volcano.sh/vgpu-memory-percentage"
    assert cfg.device_config.ref() == ("kube-system", "volcano-vgpu-device-config")
    assert cfg.node_config.name == "volcano-vgpu-node-config"
    assert cfg.node_config.key == "config.json"
    assert cfg.ascend_node_config.key == "node-config.yaml"
    assert cfg.scheduler.config_map.ref() == ("volcano-system", "volcano-scheduler-configmap")
    assert cfg.scheduler.config_map.key == "volcano-scheduler.conf"
    assert cfg.scheduler.deployment.name == "volcano-scheduler"
    assert cfg.mode == "enforce"
    assert cfg.restarts.allowed and cfg.restarts.min_interval_seconds == 300
    assert not cfg.ascend_vnpu.enabled
    assert cfg.ascend_vnpu.scheduler_device.name == "hami-scheduler-device"
    assert cfg.resource_names.is_default()


def test_a_full_file_is_read_with_camel_case_keys() -> None:
    cfg = load_config(FULL)
    assert cfg.gpu_memory_factor == 2
    assert cfg.device_defaults.device_split_count == 4
    assert cfg.device_defaults.device_core_scaling == 1.5
    assert cfg.device_plugin.namespace == "volcano-system"
    assert cfg.mode == "report"
    assert not cfg.restarts.allowed and cfg.restarts.min_interval_seconds == 600
    assert cfg.ascend_vnpu.enabled
    assert not cfg.mig_geometries.builtins and not cfg.mig_geometries.from_inventory
    assert cfg.mig_geometries.catalog[0].models == ["H100 NVL"]
    assert cfg.mig_geometries.catalog[0].allowed_geometries[0].geometries[0].memory == 11264


@pytest.mark.parametrize(
    ("text", "path", "in_message", "in_fix"),
    [
        ("gpuMemoryFactor: 0", "gpuMemoryFactor", "greater than or equal to 1", "1..1024"),
        (
            "resourceNames: {count: vgpu}",
            "resourceNames.count",
            "'vgpu' is not valid",
            "<domain>/<name>",
        ),
        ("mode: enforced", "mode", "'enforce', 'report' or 'observe'", "'observe' (write nothing"),
        (
            "scheduler: {configMap: {namespace: Volcano_System, name: a, key: b}}",
            "scheduler.configMap.namespace",
            "'Volcano_System' is not valid",
            "namespace name",
        ),
        (
            "deviceConfig: {namespace: kube-system, name: x}",
            "deviceConfig.key",
            "Field required",
            "add this field",
        ),
        (
            "deviceDefaults: {deviceSplitCount: 0}",
            "deviceDefaults.deviceSplitCount",
            "greater than or equal to 1",
            "1..128",
        ),
        (
            "restarts: {minIntervalSeconds: -5}",
            "restarts.minIntervalSeconds",
            "greater than",
            "0..86400",
        ),
        ("ascendVnpu: {enabled: maybe}", "ascendVnpu.enabled", "valid boolean", "type"),
        (
            "resourceNames: {memory: volcano.sh/vgpu-number}",
            "resourceNames",
            "must differ",
            "give each its own name",
        ),
        (
            "nodeConfig: {namespace: kube-system, name: volcano-vgpu-device-config, key: c.json}",
            "nodeConfig",
            "same ConfigMap",
            "different ConfigMaps",
        ),
        (
            "migGeometries: {catalog: [{models: [A30], allowedGeometries: [{group: g, geometries: "
            "[{name: 1g.6gb, memory: 0, count: 4}]}]}]}",
            "migGeometries.catalog[0].allowedGeometries[0].geometries[0].memory",
            "must be > 0",
            "MiB",
        ),
        (
            "migGeometries: {catalog: [{models: [A30], allowedGeometries: [{group: g, geometries: "
            "[{name: big, memory: 1, count: 4}]}]}]}",
            "migGeometries.catalog[0].allowedGeometries[0].geometries[0].name",
            "not a MIG profile",
            "1g.10gb",
        ),
        (
            "migGeometries: {catalog: [{models: [A30], allowedGeometries: [{group: g, geometries: "
            "[{name: 1g.6gb, memory: 1, count: 4}]}]}, {models: [A30], allowedGeometries: "
            "[{group: g, geometries: [{name: 1g.6gb, memory: 1, count: 4}]}]}]}",
            "migGeometries.catalog[1].models",
            "already listed in catalog[0]",
            "list each model",
        ),
        (
            "migGeometries: {catalog: [{models: [A30], allowedGeometries: [{group: g, geometries: "
            "[{name: 1g.6gb, memory: 1, count: 4, size: 1}]}]}]}",
            "migGeometries.catalog[0].allowedGeometries[0].geometries[0]",
            "unknown keys ['size']",
            "name, memory, count",
        ),
    ],
)
def test_invalid_values_name_the_field_and_the_fix(
    text: str, path: str, in_message: str, in_fix: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(text)
    issue = err.value.issues[0]
    assert issue.path == path
    assert in_message in issue.message
    assert in_fix in issue.fix
    assert f"{path}: " in str(err.value)


def test_an_unknown_key_lists_the_keys_allowed_there() -> None:
    with pytest.raises(ConfigError) as err:
        load_config("restarts: {allowed: true, minInterval: 10}")
    issue = err.value.issues[0]
    assert issue.path == "restarts.minInterval"
    assert issue.message == "unknown key 'minInterval'"
    assert issue.fix == (
        "remove it or correct its spelling; the keys allowed here are: allowed, minIntervalSeconds"
    )


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        load_config("gpuMemoryFactor: 0\nmode: x\ntypo: 1")
    assert sorted(i.path for i in err.value.issues) == ["gpuMemoryFactor", "mode", "typo"]


@pytest.mark.parametrize(
    ("text", "message"),
    [("mode: [", "not valid YAML at line 1"), ("- a\n- b", "top level must be a mapping")],
)
def test_unreadable_files_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(text)
    assert err.value.issues[0].path == "<file>"
    assert message in err.value.issues[0].message


KEYS = st.sampled_from(["count", "memory", "memoryPercentage", "cores"])
BAD_NAMES = st.text(
    alphabet=st.characters(codec="ascii", categories=["L", "N", "P"]), min_size=1, max_size=20
).filter(lambda s: "/" not in s)


@given(key=KEYS, bad=BAD_NAMES)
def test_any_resource_name_without_a_domain_is_refused_at_its_own_path(key: str, bad: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(json.dumps({"resourceNames": {key: bad}}))
    assert [i.path for i in err.value.issues] == [f"resourceNames.{key}"]

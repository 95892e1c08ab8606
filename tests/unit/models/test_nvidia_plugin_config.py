"""NVIDIA's device plugin configs, read for the resource names they may advertise
(models.nvidia_plugin_config), on the plugin's own examples:
NVIDIA/k8s-device-plugin@v0.17.0:README.md ("With CUDA Time-Slicing", "With CUDA MPS",
"Passing configuration to the plugin via a ConfigMap") and
NVIDIA/k8s-device-plugin@v0.17.0:api/config/v1/replicas_test.go (`rename`)."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_operator.models.config import ConfigError, OperatorConfig, load_config
from vgpu_operator.models.nvidia_plugin_config import (
    advertised_names,
    configmap_names,
    resource_name,
)

# README.md, "With CUDA Time-Slicing": 80 nvidia.com/gpu on an 8-GPU node
TIME_SLICING = """\
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""
# README.md, "With CUDA Time-Slicing": 80 nvidia.com/gpu.shared instead
TIME_SLICING_RENAMED = """\
version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""
# README.md, "With CUDA MPS", renameByDefault
MPS_RENAMED = """\
version: v1
sharing:
  mps:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""
# README.md, "Single Config File Example" (/tmp/dp-example-config0.yaml): no sharing at all
FLAGS_ONLY = """\
version: v1
flags:
  migStrategy: "none"
  failOnInitError: true
  nvidiaDriverRoot: "/"
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
"""
# api/config/v1/replicas_test.go, TestUnmarshalReplicatedResource: a name without its domain
# and an explicit `rename`, both qualified with nvidia.com/ by the plugin
RENAMED = """\
sharing:
  timeSlicing:
    resources:
    - {"name": "valid", "replicas": 2, "rename": "valid-shared"}
"""
# README.md: the A100 40GB's time-sliceable resources with the mixed MIG strategy, renamed
MIG_MIXED_RENAMED = """\
version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 2
    - name: nvidia.com/mig-1g.5gb
      replicas: 2
"""


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (TIME_SLICING, {"nvidia.com/gpu"}),
        (TIME_SLICING_RENAMED, {"nvidia.com/gpu", "nvidia.com/gpu.shared"}),
        (MPS_RENAMED, {"nvidia.com/gpu", "nvidia.com/gpu.shared"}),
        (FLAGS_ONLY, set()),
        (RENAMED, {"nvidia.com/valid", "nvidia.com/valid-shared"}),
        (
            MIG_MIXED_RENAMED,
            {
                "nvidia.com/gpu",
                "nvidia.com/gpu.shared",
                "nvidia.com/mig-1g.5gb",
                "nvidia.com/mig-1g.5gb.shared",
            },
        ),
        ("", set()),  # an empty config: the plugin's defaults
    ],
)
def test_the_plugins_own_examples(text: str, names: set[str]) -> None:
    assert advertised_names(text) == names


def test_names_are_qualified_as_the_plugin_qualifies_them() -> None:
    assert resource_name("gpu") == "nvidia.com/gpu"
    assert resource_name("nvidia.com/gpu") == "nvidia.com/gpu"
    # the custom `resources` section (ignored by the plugin of v0.17.0, counted all the same)
    text = (
        "resources:\n  gpus:\n  - {pattern: '*', name: a100}\n  mig:\n  - {pattern: x, name: m}\n"
    )
    assert advertised_names(text) == {"nvidia.com/a100", "nvidia.com/m"}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("version: v2\n", "unknown version 'v2'"),
        ("- a\n- b\n", "a mapping, not list"),
        ("sharing: [\n", "YAML"),
        ("a: &x 1\nb: *x\n", "aliases"),
    ],
)
def test_a_config_the_plugin_would_not_read_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        advertised_names(text)


def configmap(**data: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "gpu-operator", "name": "time-slicing-config"}, "data": data}


def test_every_config_of_the_configmap_is_read() -> None:
    """The GPU Operator's ConfigMap holds one config per key, a node picking its own by the
    nvidia.com/device-plugin.config label: the union counts; one that cannot be read is a
    problem and takes no name away from the others."""
    cm = configmap(**{"a100-40gb": MIG_MIXED_RENAMED, "tesla-t4": RENAMED, "bad": "version: 9"})
    read = configmap_names(cm)
    assert read.names == {
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.5gb",
        "nvidia.com/mig-1g.5gb.shared",
        "nvidia.com/valid",
        "nvidia.com/valid-shared",
    }
    assert read.problems == ("bad: unknown version 9 (the plugin reads v1)",)
    # a key named: that config alone
    assert configmap_names(cm, "tesla-t4").names == {"nvidia.com/valid", "nvidia.com/valid-shared"}
    assert configmap_names(cm, "any").problems == ("any: no such key",)
    assert configmap_names(None).problems == ("the ConfigMap is not there",)
    assert configmap_names({"metadata": {}}).names == frozenset()


def test_the_operator_config_names_the_configmap_and_the_dra_drivers() -> None:
    default = OperatorConfig()
    assert default.nvidia_device_plugin_config is None
    assert default.gpu_dra_drivers == ["gpu.nvidia.com"]
    config = load_config(
        "nvidiaDevicePluginConfig: {namespace: gpu-operator, name: time-slicing-config}\n"
        "gpuDraDrivers: [gpu.nvidia.com, gpu.example.com]\n"
    )
    ref = config.nvidia_device_plugin_config
    assert ref is not None and ref.ref() == ("gpu-operator", "time-slicing-config")
    assert ref.key is None
    assert config.gpu_dra_drivers == ["gpu.nvidia.com", "gpu.example.com"]


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("nvidiaDevicePluginConfig: {namespace: gpu-operator}", "nvidiaDevicePluginConfig.name"),
        ("nvidiaDevicePluginConfig: {namespace: a, name: b, key: 'a b'}", "key"),
        ("gpuDraDrivers: [Not_A_Driver]", "gpuDraDrivers[0]"),
        ("gpuDraDrivers: gpu.nvidia.com", "gpuDraDrivers"),
    ],
)
def test_invalid_references_are_refused_naming_the_field(text: str, path: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(text)
    assert path in str(refused.value)

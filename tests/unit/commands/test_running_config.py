"""Which operator configuration `doctor` and `plan` use without `--config`
(commands/running_config.py `chosen`), over the ConfigMaps the chart itself renders (`helm
template`): the chart's label selects its configuration ConfigMap, and the key `config.yaml`
tells it from the dashboard ConfigMap that carries the same label; none found is the built-in
default, said with why; two, or an invalid one, are refused naming each ConfigMap and the fix.
Against a real apiserver (the LIST, the refused LIST, the commands' stderr):
tests/cluster/test_running_config.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vgpu_devcluster.install import render_chart
from vgpu_operator.commands import exitcodes
from vgpu_operator.commands.running_config import (
    CHART_LABEL,
    CONFIG_KEY,
    ConfigLookupError,
    chosen,
    from_file,
)
from vgpu_operator.models.config import OperatorConfig, load_config


def chart_configmaps(**values: str) -> list[dict[str, Any]]:
    """The chart's two labelled ConfigMaps, as `helm install -n vgpu-system` creates them."""
    return [
        *render_chart("configmap.yaml", values=values),
        *render_chart("monitoring/dashboard.yaml", values=values),
    ]


def test_the_chart_label_selects_both_chart_configmaps_and_the_key_tells_them_apart() -> None:
    configmaps = chart_configmaps()
    key, _, value = CHART_LABEL.partition("=")
    assert [cm["metadata"]["labels"][key] for cm in configmaps] == [value, value]
    assert [CONFIG_KEY in cm["data"] for cm in configmaps] == [True, False]


def test_the_chart_configmap_of_a_release_is_found_and_parsed() -> None:
    configmaps = chart_configmaps(fullnameOverride="gpu-ops", **{"config.gpuMemoryFactor": "7"})
    found = chosen(configmaps)
    assert found.where == "ConfigMap vgpu-system/gpu-ops-config, key config.yaml"
    assert found.config.gpu_memory_factor == 7
    assert found.config == load_config(configmaps[0]["data"][CONFIG_KEY])


def test_no_configuration_in_the_cluster_is_the_built_in_default_said_with_why() -> None:
    dashboard_only = chart_configmaps()[1:]
    found = chosen(dashboard_only)
    assert found.config == OperatorConfig()
    assert found.where == (
        "the built-in default (no ConfigMap labelled app.kubernetes.io/name=vgpu-operator with "
        "the key config.yaml in any namespace: the chart's is not installed)"
    )


def test_two_releases_are_not_guessed_between() -> None:
    [first, _] = chart_configmaps()
    [second, _] = chart_configmaps(fullnameOverride="other")
    second["metadata"]["namespace"] = "gpu-team"
    with pytest.raises(ConfigLookupError) as caught:
        chosen([second, first])
    assert caught.value.code == exitcodes.USAGE
    message = str(caught.value)
    assert "2 operator configurations in the cluster (ConfigMaps gpu-team/other-config, " in (
        message
    )
    assert "vgpu-system/vgpu-operator-config" in message
    assert "--config FILE" in message and "jsonpath='{.data.config\\.yaml}'" in message


def test_an_invalid_configuration_names_the_configmap_and_the_field() -> None:
    [cm, _] = chart_configmaps()
    cm["data"][CONFIG_KEY] = "onDelete: Delet\n"
    with pytest.raises(ConfigLookupError) as caught:
        chosen([cm])
    assert caught.value.code == exitcodes.USAGE
    message = str(caught.value)
    assert message.startswith(
        "the operator configuration in ConfigMap vgpu-system/vgpu-operator-config, key "
        "config.yaml is not valid"
    )
    assert "onDelete" in message


def test_a_file_says_it_is_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("gpuMemoryFactor: 11\n")
    source = from_file(str(path))
    assert source.where == f"file {path}"
    assert source.config.gpu_memory_factor == 11

"""The chart renders the operator configuration from values: the defaults in values.yaml are
exactly the built-in defaults, overrides reach the file, and the controller gets it as --config
(mounted from that ConfigMap, restarted when it changes)."""

from __future__ import annotations

from vgpu_devcluster.install import render_chart
from vgpu_operator.models.config import OperatorConfig, load_config


def _config_text(values: dict[str, str] | None = None) -> str:
    [cm] = render_chart("configmap.yaml", values=values)
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "vgpu-operator-config"
    text = cm["data"]["config.yaml"]
    assert isinstance(text, str)
    return text


def test_chart_defaults_are_the_built_in_defaults() -> None:
    """All but admissionPolicies (test_chart_admission_hash.py) and policyKeys
    (test_chart_node_keys.py), which only the chart writes."""
    rendered = load_config(_config_text())
    assert rendered.admission_policies is not None and rendered.policy_keys is not None
    unset = {"admission_policies": None, "policy_keys": None}
    assert rendered.model_copy(update=unset) == OperatorConfig()


def test_overrides_reach_the_file() -> None:
    cfg = load_config(
        _config_text({"config.mode": "report", "config.restarts.minIntervalSeconds": "60"})
    )
    assert cfg.mode == "report"
    assert cfg.restarts.min_interval_seconds == 60
    assert cfg.resource_names == OperatorConfig().resource_names


def test_controller_runs_with_the_mounted_config_and_restarts_on_change() -> None:
    [dep] = render_chart("deployment.yaml")
    pod = dep["spec"]["template"]
    [container] = pod["spec"]["containers"]
    assert "--config=/etc/vgpu-operator/config.yaml" in container["args"]
    assert container["volumeMounts"][0] == {
        "name": "config",
        "mountPath": "/etc/vgpu-operator",
        "readOnly": True,
    }
    assert pod["spec"]["volumes"][0] == {
        "name": "config",
        "configMap": {"name": "vgpu-operator-config"},
    }
    # besides the configuration only an in-memory /tmp (the root filesystem is read-only)
    assert [m["mountPath"] for m in container["volumeMounts"][1:]] == ["/tmp"]
    assert [v["emptyDir"] for v in pod["spec"]["volumes"][1:]] == [
        {"medium": "Memory", "sizeLimit": "16Mi"}
    ]
    [changed] = render_chart("deployment.yaml", values={"config.mode": "report"})
    before = pod["metadata"]["annotations"]["checksum/config"]
    assert changed["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != before

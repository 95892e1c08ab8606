"""The chart's RBAC names exactly the objects the controller reads and writes, from the same
values its configuration is rendered from: the Roles' resourceNames are the ConfigMaps
`configmap_refs` reads, the configured plugin DaemonSets and the scheduler Deployment, also
when values rename them; NVIDIA's device plugin configs (`read_only_configmap_refs`) are read by
name and never writable; nothing Volcano's is granted cluster-wide; ResourceClaims are read
cluster-wide (the claim index), never written."""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict

import pytest

from vgpu_devcluster.install import render_chart
from vgpu_operator.controller.snapshot import (
    read_only_configmap_refs,
    watched_objects,
)
from vgpu_operator.core.rollout.gpu_pods import plugin_refs
from vgpu_operator.models.config import load_config


def _granted(values: dict[str, str] | None = None) -> dict[tuple[str, str], set[str]]:
    """(namespace, resource) -> the names the Roles grant get/patch on."""
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for role in render_chart("rbac-roles.yaml", values=values):
        if role["kind"] != "Role":
            continue
        for rule in role["rules"]:
            for resource in rule["resources"]:
                if "patch" in rule["verbs"] or "delete" in rule["verbs"]:
                    names = rule.get("resourceNames", ["*"])
                    out[(role["metadata"]["namespace"], resource)].update(names)
    return out


def _expected(values: dict[str, str] | None = None) -> dict[tuple[str, str], set[str]]:
    [cm] = render_chart("configmap.yaml", values=values)
    config = load_config(cm["data"]["config.yaml"])
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    plural = {"ConfigMap": "configmaps", "Deployment": "deployments"}
    read_only = read_only_configmap_refs(config)
    for kind, namespace, name in watched_objects(config):
        if kind == "ConfigMap" and (namespace, name) in read_only:
            continue  # granted without update or patch
        out[(namespace, plural[kind])].add(name)
    for namespace, name in plugin_refs(config):
        out[(namespace, "daemonsets")].add(name)
        out[(namespace, "pods")].add("*")  # delete: limited by the admission policy
    return out


def test_roles_name_what_the_controller_reads_and_writes() -> None:
    assert _granted() == _expected()


def test_renamed_objects_are_granted_by_their_new_names() -> None:
    values = {
        "config.deviceConfig.name": "my-device-config",
        "config.scheduler.deployment.namespace": "sched",
        "config.devicePlugin.name": "my-plugin",
        "rbac.pluginPodLabels.my-plugin.app": "my-plugin",
    }
    granted = _granted(values)
    assert granted == _expected(values)
    assert "my-device-config" in granted[("kube-system", "configmaps")]
    assert granted[("sched", "deployments")] == {"volcano-scheduler"}


def test_nothing_of_volcano_is_writable_cluster_wide() -> None:
    [role] = render_chart("clusterrole.yaml")
    for rule in role["rules"]:
        for resource in rule["resources"]:
            if resource in ("configmaps", "deployments", "secrets"):
                raise AssertionError(f"cluster-wide {resource}: {rule}")
            if resource in ("daemonsets", "pods"):
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule


def test_an_auto_object_name_is_refused_with_the_command_that_resolves_it() -> None:
    """The Roles grant by name, so `auto` (resolved by the controller at start) cannot reach the
    chart: it fails naming the value and `doctor --discover`, which prints what to set."""
    with pytest.raises(subprocess.CalledProcessError) as refused:
        render_chart("rbac-roles.yaml", values={"config.nodeConfig.namespace": "auto"})
    assert "auto/volcano-vgpu-node-config" in refused.value.stderr
    assert "doctor --discover" in refused.value.stderr


PLUGIN_CONFIG = {
    "config.nvidiaDevicePluginConfig.namespace": "gpu-operator",
    "config.nvidiaDevicePluginConfig.name": "time-slicing-config",
}


def _read_only(values: dict[str, str] | None = None) -> dict[tuple[str, str], set[str]]:
    """(namespace, resource) -> the names the Roles grant get/list/watch on and nothing more."""
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for role in render_chart("rbac-roles.yaml", values=values):
        for rule in role["rules"] if role["kind"] == "Role" else []:
            if set(rule["verbs"]) == {"get", "list", "watch"}:
                for resource in rule["resources"]:
                    out[(role["metadata"]["namespace"], resource)].update(rule["resourceNames"])
    return out


def test_nvidias_plugin_config_is_granted_read_only_by_name() -> None:
    assert _read_only() == {}  # none named by default
    [cm] = render_chart("configmap.yaml", values=PLUGIN_CONFIG)
    config = load_config(cm["data"]["config.yaml"])
    assert read_only_configmap_refs(config) == [("gpu-operator", "time-slicing-config")]
    assert ("ConfigMap", "gpu-operator", "time-slicing-config") in watched_objects(config)
    assert _read_only(PLUGIN_CONFIG) == {("gpu-operator", "configmaps"): {"time-slicing-config"}}
    # never writable, nor creatable: the write grants and the admission policy leave it out
    granted = _granted(PLUGIN_CONFIG)
    assert granted == _expected(PLUGIN_CONFIG)
    assert ("gpu-operator", "configmaps") not in granted
    policies = json.dumps(render_chart("admission-policies.yaml", values=PLUGIN_CONFIG))
    assert "time-slicing-config" not in policies


def test_resource_claims_are_read_cluster_wide_and_never_written() -> None:
    [role] = render_chart("clusterrole.yaml")
    rules = [r for r in role["rules"] if "resourceclaims" in r["resources"]]
    assert rules == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims"],
            "verbs": ["get", "list", "watch"],
        }
    ]

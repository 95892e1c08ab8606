"""The `auto` resolver against Volcano's and HAMi's own manifests, unmodified, and the seeds'
variants of them (seed 002: everything in volcano-system, the count resource renamed to
nvidia.com/gpu and passed to a v1.11 plugin as --resource-name)."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import yaml

from vgpu_devcluster import upstream as manifests
from vgpu_operator.core.volcano.discovery import configmaps_to_read, describe, discover
from vgpu_operator.core.volcano.workloads import file_source
from vgpu_operator.models.config import ConfigError, OperatorConfig, load_config
from vgpu_operator.models.volcano_views import workload_view

Obj = dict[str, Any]

ALL_AUTO = load_config(
    """
resourceNames: auto
deviceConfig: auto
nodeConfig: auto
devicePlugin: auto
scheduler: {configMap: auto, deployment: auto}
ascendNodeConfig: auto
ascendDevicePlugin: auto
ascendVnpu: {schedulerDevice: auto}
"""
)


@functools.cache
def _documents(which: str) -> list[Obj]:
    """Parsed once per run (Volcano's file is 9,000 lines): callers get copies."""
    if which == "volcano":
        return manifests.volcano_documents()
    if which == "ascend":
        return manifests.ascend_documents()
    return manifests.hami_vgpu_documents(which)


def volcano_documents() -> list[Obj]:
    return copy.deepcopy(_documents("volcano"))


def hami_vgpu_documents(version: str = "v1.12.0") -> list[Obj]:
    return copy.deepcopy(_documents(version))


def ascend_documents() -> list[Obj]:
    return copy.deepcopy(_documents("ascend"))


def split(docs: list[Obj]) -> tuple[list[Obj], list[Obj], list[Obj]]:
    kinds: dict[str, list[Obj]] = {"Deployment": [], "DaemonSet": [], "ConfigMap": []}
    for d in docs:
        if d.get("kind") in kinds:
            kinds[d["kind"]].append(d)
    return kinds["Deployment"], kinds["DaemonSet"], kinds["ConfigMap"]


def resolve(docs: list[Obj], config: OperatorConfig = ALL_AUTO) -> Any:
    deployments, daemonsets, configmaps = split(docs)
    wanted = set(configmaps_to_read(config, deployments, daemonsets))
    visible = [
        c for c in configmaps if (c["metadata"]["namespace"], c["metadata"]["name"]) in wanted
    ]
    return discover(config, deployments, daemonsets, visible)


def upstream(hami: str = "v1.12.0") -> list[Obj]:
    return copy.deepcopy([*volcano_documents(), *hami_vgpu_documents(hami)])


def in_namespace(docs: list[Obj], namespace: str) -> list[Obj]:
    """The HAMi objects moved to another namespace, as seed 002 installs them."""
    for d in docs:
        if (
            d.get("kind") in ("ConfigMap", "DaemonSet", "ServiceAccount")
            and d["metadata"].get("namespace") == "kube-system"
        ):
            d["metadata"]["namespace"] = namespace
    return docs


def named(docs: list[Obj], kind: str, name: str) -> Obj:
    return next(d for d in docs if d.get("kind") == kind and d["metadata"]["name"] == name)


def test_upstream_install_resolves_to_the_defaults_the_components_use() -> None:
    found = resolve(upstream())
    c = found.config
    assert c.auto_fields() == []
    assert c.scheduler.deployment.namespace == "volcano-system"
    assert c.scheduler.deployment.name == "volcano-scheduler"
    assert c.scheduler.deployment.container == "volcano-scheduler"
    # From --scheduler-conf=/volcano.scheduler/volcano-scheduler.conf and the volume there.
    assert c.scheduler.config_map.ref() == ("volcano-system", "volcano-scheduler-configmap")
    assert c.scheduler.config_map.key == "volcano-scheduler.conf"
    assert c.device_config.ref() == ("kube-system", "volcano-vgpu-device-config")
    assert c.node_config.ref() == ("kube-system", "volcano-vgpu-node-config")
    assert c.node_config.key == "config.json"
    assert c.device_plugin.name == "volcano-device-plugin"
    assert c.device_plugin.container == "volcano-device-plugin"  # not the monitor sidecar
    assert c.resource_names.is_default()
    assert found.problems == ()
    why = {r.field: r.why for r in found.resolved}
    assert (
        "--scheduler-conf=/volcano.scheduler/volcano-scheduler.conf"
        in why["scheduler.configMap.name"]
    )
    assert "/config/config.json" in why["nodeConfig.name"]
    assert len(describe(found)) == len(ALL_AUTO.auto_fields())


def seed_002() -> list[Obj]:
    """Seed 002 (v1.11 plugin): the plugin, its ConfigMaps in volcano-system, the count resource
    renamed in the device config and passed as --resource-name, the scheduler pointed at
    volcano-system."""
    docs = in_namespace(upstream("v1.11.0"), "volcano-system")
    device = named(docs, "ConfigMap", "volcano-vgpu-device-config")
    text = device["data"]["device-config.yaml"].replace(
        "resourceCountName: volcano.sh/vgpu-number", "resourceCountName: nvidia.com/gpu"
    )
    device["data"]["device-config.yaml"] = text
    plugin = named(docs, "DaemonSet", "volcano-device-plugin")
    container = plugin["spec"]["template"]["spec"]["containers"][0]
    container["args"] = ["--device-split-count=10", "--resource-name=nvidia.com/gpu"]
    sched = named(docs, "ConfigMap", "volcano-scheduler-configmap")
    conf = yaml.safe_load(sched["data"]["volcano-scheduler.conf"])
    conf["tiers"][1]["plugins"].append(
        {
            "name": "deviceshare",
            "arguments": {
                "deviceshare.VGPUEnable": True,
                "deviceshare.KnownGeometriesCMNamespace": "volcano-system",
            },
        }
    )
    sched["data"]["volcano-scheduler.conf"] = yaml.safe_dump(conf)
    return docs


def test_seed_002_namespace_and_renamed_resource_are_kept() -> None:
    found = resolve(seed_002())
    c = found.config
    assert c.device_config.ref() == ("volcano-system", "volcano-vgpu-device-config")
    assert c.node_config.ref() == ("volcano-system", "volcano-vgpu-node-config")
    assert (c.device_plugin.namespace, c.device_plugin.name) == (
        "volcano-system",
        "volcano-device-plugin",
    )
    # Renamed by a person: not renamed back to the default.
    assert c.resource_names.count == "nvidia.com/gpu"
    assert c.resource_names.memory == "volcano.sh/vgpu-memory"
    assert found.problems == ()  # the scheduler conf, the plugin and its flag agree
    why = {r.field: r.why for r in found.resolved}
    assert "volcano-system/volcano-vgpu-device-config" in why["resourceNames.count"]
    assert "kube-system then volcano-system" in why["deviceConfig.namespace"]


def test_plugin_prefers_kube_system_as_it_does() -> None:
    """Both namespaces hold a device config: the plugin reads kube-system's (util.go tries it
    first), so that is the one; a scheduler pointing elsewhere is reported."""
    docs = seed_002()
    docs.append(copy.deepcopy(named(upstream(), "ConfigMap", "volcano-vgpu-device-config")))
    found = resolve(docs)
    assert found.config.device_config.ref() == ("kube-system", "volcano-vgpu-device-config")
    assert found.config.resource_names.count == "volcano.sh/vgpu-number"
    assert any("points deviceshare at volcano-system" in p for p in found.problems)
    assert any("--resource-name registers nvidia.com/gpu" in p for p in found.problems)


def test_flag_names_a_resource_the_device_config_does_not() -> None:
    docs = seed_002()
    device = named(docs, "ConfigMap", "volcano-vgpu-device-config")
    device["data"]["device-config.yaml"] = "nvidia:\n  deviceSplitCount: 10\n"
    found = resolve(docs)
    assert found.config.resource_names.count == "nvidia.com/gpu"
    assert found.config.resource_names.cores == "volcano.sh/vgpu-cores"
    why = {r.field: r.why for r in found.resolved}
    assert "--resource-name" in why["resourceNames.count"]


def test_renamed_scheduler_configmap_through_items_and_no_plugin_at_all() -> None:
    docs = copy.deepcopy(volcano_documents())
    dep = named(docs, "Deployment", "volcano-scheduler")
    pod = dep["spec"]["template"]["spec"]
    pod["volumes"][0]["configMap"] = {
        "name": "sched-conf-v2",
        "items": [{"key": "conf.yaml", "path": "volcano-scheduler.conf"}],
    }
    found = resolve(docs)
    assert found.config.scheduler.config_map.ref() == ("volcano-system", "sched-conf-v2")
    assert found.config.scheduler.config_map.key == "conf.yaml"
    why = {r.field: r.why for r in found.resolved}
    assert "no HAMi vGPU device plugin DaemonSet found" in why["devicePlugin.name"]
    assert found.config.device_plugin.name == "volcano-device-plugin"  # the default


def test_only_auto_fields_change() -> None:
    config = load_config(
        "deviceConfig: {namespace: auto, name: volcano-vgpu-device-config, key: device-config.yaml}"
    )
    found = resolve(seed_002(), config)
    assert [r.field for r in found.resolved] == ["deviceConfig.namespace"]
    assert found.config.device_config.namespace == "volcano-system"
    assert found.config.scheduler == OperatorConfig().scheduler
    assert found.config.resource_names.is_default()  # written, so kept


def test_no_auto_is_the_config_itself() -> None:
    config = OperatorConfig()
    found = discover(config, [], [], [])
    assert found.config is config and found.resolved == ()


def test_ascend_plugin_files_resolve_by_subpath() -> None:
    docs = copy.deepcopy([*volcano_documents(), *hami_vgpu_documents(), *ascend_documents()])
    c = resolve(docs).config
    assert (c.ascend_device_plugin.namespace, c.ascend_device_plugin.name) == (
        "kube-system",
        "hami-ascend-device-plugin",
    )
    assert c.ascend_vnpu.scheduler_device.ref() == ("kube-system", "hami-scheduler-device")
    assert c.ascend_vnpu.scheduler_device.key == "device-config.yaml"
    assert c.ascend_node_config.ref() == ("kube-system", "hami-device-node-config")
    assert c.ascend_node_config.key == "node-config.yaml"


def test_two_schedulers_are_reported_and_the_upstream_name_taken() -> None:
    docs = upstream()
    other = copy.deepcopy(named(docs, "Deployment", "volcano-scheduler"))
    other["metadata"]["name"] = "volcano-scheduler-batch"
    docs.append(other)
    found = resolve(docs)
    assert found.config.scheduler.deployment.name == "volcano-scheduler"
    assert any("2 Volcano scheduler Deployments found" in p for p in found.problems)


def test_resolved_collision_names_the_field() -> None:
    """The plugin mounts the device config at /config (HAMi's Helm chart with nodeConfig off):
    no node config; but a configured nodeConfig equal to the resolved device config is refused."""
    config = load_config(
        "deviceConfig: auto\n"
        "nodeConfig: {namespace: kube-system, name: volcano-vgpu-device-config, key: config.json}"
    )
    with pytest.raises(ConfigError, match="nodeConfig"):
        resolve(upstream(), config)


def test_file_source_mount_forms() -> None:
    ds = named(upstream(), "DaemonSet", "volcano-device-plugin")
    view = workload_view(ds)
    container = view.containers[0]
    assert file_source(view, container, "/config/config.json") is not None
    assert file_source(view, container, "/configx/config.json") is None
    monitor = view.containers[1]
    assert file_source(view, monitor, "/config/config.json") is None


def test_auto_is_refused_where_it_means_nothing() -> None:
    with pytest.raises(ConfigError, match=r"resourceNames\.count"):
        load_config("resourceNames: {count: automatic}")

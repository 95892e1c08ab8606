"""The vnpus: mirror and its form per scheduler version (core.rules.vnpus); the readers:
volcano-sh/volcano@v1.15.0:pkg/scheduler/api/devices/config/config.go (list only) and
volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/vnpu.go (both forms)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.kit.volcano_fixtures import (
    configmap,
    deployment,
    edit,
    findings,
    gpu_node,
    healthy,
    replace,
    text,
)
from vgpu_operator.core.rules.base import Finding, ObjectRef
from vgpu_operator.core.volcano.render import render_device_config, vnpus_section
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig, load_config
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.volcano_views import Version

KEY = "device-config.yaml"
WRAPPER = yaml.safe_load(text("hami_scheduler_device.yaml"))["vnpus"]


def cm(namespace: str, name: str) -> ObjectRef:
    return ObjectRef(kind="ConfigMap", name=name, namespace=namespace)


def ascend(version: str = "v1.15.0", *, mirrored: bool, cfg: OperatorConfig | None = None) -> Any:
    cfg = cfg or load_config("ascendVnpu: {enabled: true}")
    snap = healthy(cfg)
    source = configmap(
        "kube-system", "hami-scheduler-device", {KEY: text("hami_scheduler_device.yaml")}
    )
    snap = replace(snap, configmaps=[*snap.configmaps, source], deployments=[deployment(version)])
    if mirrored:

        def mirror(c: dict[str, Any]) -> None:
            c["data"] = render_device_config(
                c,
                cfg,
                "t",
                mig_models=["NVIDIA A100-SXM4-40GB"],
                vnpus=vnpus_section(source, KEY),
                scheduler_version=Version.parse(version),
            ).data

        snap = edit(snap, "configmaps", "volcano-vgpu-device-config", mirror)
    return snap


def with_vnpus(snap: ClusterSnapshot, value: Any) -> ClusterSnapshot:
    def put(c: dict[str, Any]) -> None:
        doc = yaml.safe_load(c["data"][KEY])
        doc["vnpus"] = value
        c["data"] = {**c["data"], KEY: yaml.safe_dump(doc)}

    return edit(snap, "configmaps", "volcano-vgpu-device-config", put)


def test_vnpus_must_equal_the_ascend_plugins_source() -> None:
    got = findings(ascend(mirrored=False), "vnpus-mirror")
    assert got == [
        Finding(
            id="vnpus-mirror",
            severity="error",
            objects=(
                cm("kube-system", "hami-scheduler-device"),
                cm("kube-system", "volcano-vgpu-device-config"),
            ),
            message="the scheduler reads vnpus: from kube-system/volcano-vgpu-device-config, and "
            "it is missing there the Ascend plugin's kube-system/hami-scheduler-device: they "
            "disagree on chips, templates or resource names",
            fix="copy the vnpus: section of hami-scheduler-device into volcano-vgpu-device-config "
            "as the list of its configs (Volcano v1.15.0 reads no other form)",
            fixable_by_operator=True,
        )
    ]
    assert findings(healthy(), "vnpus-mirror") == []  # Ascend off: nothing to mirror


@pytest.mark.parametrize(
    "version", ["v1.13.0", "v1.14.0", "v1.14.3", "v1.14.4", "v1.15.0", "v1.15.1", "v1.16.0-alpha.0"]
)
def test_the_rendered_copy_passes_both_rules_under_every_version(version: str) -> None:
    snap = ascend(version, mirrored=True)
    assert findings(snap, "vnpus-mirror") == []
    assert findings(snap, "vnpus-form") == []


@pytest.mark.parametrize("version", ["v1.14.0", "v1.14.3", "v1.15.0"])
def test_a_correct_list_under_a_list_only_version_is_no_error(version: str) -> None:
    snap = with_vnpus(ascend(version, mirrored=True), WRAPPER["configs"])
    assert findings(snap, "vnpus-mirror") == []
    assert findings(snap, "vnpus-form") == []


@pytest.mark.parametrize("version", ["v1.14.0", "v1.14.3", "v1.15.0"])
def test_the_wrapper_under_a_list_only_version_is_an_error(version: str) -> None:
    """volcano-sh/volcano@v1.15.0:pkg/scheduler/api/devices/config/config.go: `VNPUs
    []VNPUConfig`; the whole file fails and the built-in defaults stay for the process."""
    snap = with_vnpus(ascend(version, mirrored=True), WRAPPER)
    assert findings(snap, "vnpus-mirror") == []  # the same chips: the form is vnpus-form's
    [got] = findings(snap, "vnpus-form")
    assert got.severity == "error" and got.fixable_by_operator
    assert got.message == (
        f"Volcano {version} parses vnpus: as a list only, but "
        "kube-system/volcano-vgpu-device-config has it as a mapping (the {hamiVnpuCore, "
        "configs} wrapper): it fails to parse the whole device config and runs on built-in "
        "defaults for the life of the process (no knownMigGeometries, only the Ascend310P "
        "vNPU), logged at V(3) only"
    )
    assert got.fix.startswith("write vnpus: as the list of its configs")
    assert "v1.14.4 and v1.15.1 or later" in got.fix


@pytest.mark.parametrize("version", ["v1.13.0", "v1.14.4", "v1.15.1", "v1.16.0-alpha.0"])
def test_the_wrapper_is_fine_where_it_is_read_or_ignored(version: str) -> None:
    """volcano-sh/volcano@v1.14.4 and v1.15.1:pkg/scheduler/api/devices/config/vnpu.go read it;
    volcano-sh/volcano@v1.13.0:pkg/scheduler/api/devices/config/config.go has no vnpus."""
    assert findings(with_vnpus(ascend(version, mirrored=True), WRAPPER), "vnpus-form") == []


def test_an_unknown_version_with_the_wrapper_is_an_error() -> None:
    snap = with_vnpus(ascend("latest", mirrored=True), WRAPPER)
    [got] = findings(snap, "vnpus-form")
    assert got.severity == "error"
    assert got.message.startswith(
        "the operator cannot know the scheduler's version (its image "
        "docker.io/volcanosh/vc-scheduler:latest has no version tag)"
    )
    assert "v1.14.0 to v1.14.3 and v1.15.0 parse only a list" in got.message
    assert "vc-scheduler:v1.15.1" in got.fix
    # with Ascend off the operator does not own vnpus: the same error, not fixable by it
    off = with_vnpus(ascend("latest", mirrored=True, cfg=OperatorConfig()), WRAPPER)
    [got] = findings(off, "vnpus-form")
    assert not got.fixable_by_operator


def test_a_value_no_version_parses() -> None:
    snap = with_vnpus(ascend("v1.15.1", mirrored=True), "oops")
    [got] = findings(snap, "vnpus-form")
    assert "parses vnpus: as a list or the wrapper mapping, but" in got.message
    assert "as a str" in got.message


def soft_slicing(version: str, arch: str, *, core: bool | None) -> ClusterSnapshot:
    """An Ascend node whose policy sets `hamiVnpuCore` to `core` (None: not set, the global
    `vnpus.hamiVnpuCore` of the plugin's ConfigMap, false here, decides)."""
    spec: dict[str, Any] = {"mode": "ascend-vnpu", "ascendVnpu": {}}
    if core is not None:
        spec["ascendVnpu"]["hamiVnpuCore"] = core
    released = NodeConfig.model_validate(spec)
    node = gpu_node("npu-a", "RTX-4090", 0, released=released)
    node["metadata"]["labels"]["kubernetes.io/arch"] = arch
    snap = ascend(version, mirrored=True)
    return replace(snap, nodes=[*snap.nodes, node])


def test_soft_slicing_needs_volcano_1_16_and_arm64() -> None:
    """Project-HAMi/ascend-device-plugin@v1.4.0:docs/volcano.md: ">= 1.16 required for
    `hami-core` soft slicing", "currently only supports ARM platforms"."""
    node = ObjectRef(kind="Node", name="npu-a")
    old = findings(soft_slicing("v1.15.1", "arm64", core=True), "ascend-soft-slicing")
    assert [(f.severity, f.objects) for f in old] == [("error", (node,))]
    assert "Volcano v1.15.1" in old[0].message and "upgrade Volcano to v1.16" in old[0].fix
    amd = findings(soft_slicing("v1.16.0-alpha.1", "amd64", core=True), "ascend-soft-slicing")
    assert len(amd) == 1 and "arch is amd64" in amd[0].message
    assert "Volcano" not in amd[0].message  # a 1.16 pre-release counts as 1.16
    both = findings(soft_slicing("v1.14.4", "amd64", core=True), "ascend-soft-slicing")
    assert len(both) == 1 and "v1.14.4" in both[0].message and "amd64" in both[0].message
    assert (
        findings(soft_slicing("v1.16.0-alpha.0", "arm64", core=True), "ascend-soft-slicing") == []
    )
    # off (the policy's false, or not set and the global switch off): template vNPU, no finding
    assert findings(soft_slicing("v1.15.1", "amd64", core=False), "ascend-soft-slicing") == []
    assert findings(soft_slicing("v1.15.1", "amd64", core=None), "ascend-soft-slicing") == []


def test_soft_slicing_under_a_scheduler_of_unknown_version_is_a_warning() -> None:
    """Without a version tag nothing is refused for the scheduler's version
    (core.volcano.soft_slicing): the rule says so; a node off arm64 is still an error."""
    got = findings(soft_slicing("latest", "arm64", core=True), "ascend-soft-slicing")
    assert [f.severity for f in got] == ["warning"]
    assert "cannot read the scheduler's version" in got[0].message
    amd = findings(soft_slicing("latest", "amd64", core=True), "ascend-soft-slicing")
    assert [f.severity for f in amd] == ["error"] and "arch is amd64" in amd[0].message

"""`vnpus:` in the device config in the form each Volcano version parses, per version boundary.

What each version's reader is (volcano-sh/volcano, pkg/scheduler/api/devices/config/):
- v1.13.0 to v1.13.3 and v1.14.0-alpha.0: config.go `Config` has `nvidia` only; `vnpus:` is an
  unknown key that yaml.v2 skips.
- v1.14.0-alpha.1 to v1.14.3, v1.15.0-alpha.0, v1.15.0: config.go `VNPUs []VNPUConfig`; on a
  mapping `yaml.Unmarshal` fails and `InitDevicesConfig` keeps `GetDefaultDevicesConfig()`
  (once.Do: for the life of the process), logged at V(3).
- v1.14.4, v1.15.1, v1.16.0-alpha.0/1: config.go `VNPUs VNPUsConfig`, vnpu.go `UnmarshalYAML`
  takes the wrapper or the list.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.kit.volcano_fixtures import configmap, rendered_manifest, text
from vgpu_operator.core.volcano.component_versions import scheduler_vnpus_form
from vgpu_operator.core.volcano.render import render_device_config, vnpus_section
from vgpu_operator.core.volcano.render.vnpus import keeps, scheduler_parses, vnpus_for_scheduler
from vgpu_operator.models.config import load_config
from vgpu_operator.models.volcano_views import Version

KEY = "device-config.yaml"
ASCEND = load_config("ascendVnpu: {enabled: true}")
SOURCE = vnpus_section(
    configmap("kube-system", "hami-scheduler-device", {KEY: text("hami_scheduler_device.yaml")}),
    KEY,
)
WRAPPER = yaml.safe_load(text("hami_scheduler_device.yaml"))["vnpus"]
LIST = WRAPPER["configs"]


@pytest.mark.parametrize(
    ("tag", "form"),
    [
        ("v1.13.0", "ignored"),  # volcano-sh/volcano@v1.13.0:.../config/config.go: no VNPUs field
        ("v1.13.3", "ignored"),  # volcano-sh/volcano@v1.13.3:.../config/config.go
        ("v1.14.0", "list"),  # volcano-sh/volcano@v1.14.0:.../config/config.go []VNPUConfig
        ("v1.14.0-alpha.1", "list"),  # volcano-sh/volcano@v1.14.0-alpha.1: the same
        ("v1.14.3", "list"),  # volcano-sh/volcano@v1.14.3:.../config/config.go []VNPUConfig
        ("v1.14.4", "both"),  # volcano-sh/volcano@v1.14.4:.../config/vnpu.go UnmarshalYAML
        ("v1.15.0-alpha.0", "list"),  # volcano-sh/volcano@v1.15.0-alpha.0: []VNPUConfig
        ("v1.15.0", "list"),  # volcano-sh/volcano@v1.15.0:.../config/config.go []VNPUConfig
        ("v1.15.1", "both"),  # volcano-sh/volcano@v1.15.1:.../config/vnpu.go UnmarshalYAML
        ("v1.16.0-alpha.0", "both"),  # volcano-sh/volcano@v1.16.0-alpha.0:.../config/vnpu.go
        ("v1.16.0-alpha.1", "both"),  # volcano-sh/volcano@v1.16.0-alpha.1: the same
        ("latest", "unknown"),  # no version in the tag
    ],
)
def test_the_form_each_version_parses(tag: str, form: str) -> None:
    assert scheduler_vnpus_form(Version.parse(tag)) == form


def render(version: str | None, current: Any = None) -> Any:
    doc = rendered_manifest()
    if current is not None:
        doc += yaml.safe_dump({"vnpus": current})
    out = render_device_config(
        configmap("kube-system", "volcano-vgpu-device-config", {KEY: doc}),
        ASCEND,
        "t",
        vnpus=SOURCE,
        scheduler_version=Version.parse(version) if version else None,
    )
    return out.changed, yaml.safe_load(out.data[KEY])["vnpus"]


@pytest.mark.parametrize("version", ["v1.14.0", "v1.14.3", "v1.15.0"])
def test_a_list_only_version_gets_the_list_and_keeps_it(version: str) -> None:
    """The wrapper would make these versions drop the whole device config
    (volcano-sh/volcano@v1.15.0:pkg/scheduler/api/devices/config/config.go)."""
    changed, written = render(version)
    assert changed and written == LIST
    assert render(version, LIST) == (False, LIST)  # a correct list is not rewritten
    assert render(version, WRAPPER) == (True, LIST)  # the wrapper is corrected


@pytest.mark.parametrize("version", ["v1.14.4", "v1.15.1", "v1.16.0-alpha.0"])
def test_a_version_that_reads_both_gets_the_wrapper(version: str) -> None:
    """volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/config/vnpu.go reads both; from
    v1.16.0-alpha.0 hamiVnpuCore is read (pkg/scheduler/api/devices/ascend/hami/device_info.go)."""
    assert render(version) == (True, WRAPPER)
    assert render(version, LIST) == (False, LIST)  # the same chips, hamiVnpuCore false


def test_a_version_that_ignores_vnpus_gets_the_copy_as_before() -> None:
    """volcano-sh/volcano@v1.13.0:pkg/scheduler/api/devices/config/config.go has no vnpus."""
    assert render("v1.13.0") == (True, WRAPPER)


def test_an_unknown_version_gets_the_list_every_reader_parses() -> None:
    assert render(None) == (True, LIST)
    on = {**WRAPPER, "hamiVnpuCore": True}
    assert vnpus_for_scheduler(on, "unknown") == on  # the list would lose the switch
    assert not scheduler_parses(on, "unknown")  # so rule vnpus-form reports it


def test_what_each_form_parses() -> None:
    assert scheduler_parses(LIST, "list") and not scheduler_parses(WRAPPER, "list")
    assert scheduler_parses(WRAPPER, "both") and scheduler_parses(LIST, "both")
    assert not scheduler_parses("x", "both")
    assert scheduler_parses(WRAPPER, "ignored") and scheduler_parses(None, "list")
    assert keeps(LIST, LIST, "list") and not keeps(WRAPPER, LIST, "list")
    assert not keeps(LIST[:0], LIST, "list")  # other chips

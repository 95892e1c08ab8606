"""volcano-vgpu-device-config: the operator's keys of nvidia:, appended geometries and the
mirrored vnpus:; everything else, comments included, stays."""

from __future__ import annotations

import pytest
import yaml

from tests.kit.volcano_fixtures import configmap, rendered_manifest, text, without_memory
from vgpu_operator.contract import ANN_DATA_CHANGED_AT
from vgpu_operator.core.volcano.render import RenderError, render_device_config, vnpus_section
from vgpu_operator.models.config import OperatorConfig, load_config
from vgpu_operator.models.volcano_views import Version

NOW = "2026-02-01T00:00:00Z"
KEY = "device-config.yaml"


def device_cm(doc: str, **extra: str) -> dict[str, object]:
    return configmap("kube-system", "volcano-vgpu-device-config", {KEY: doc, **extra})


def test_the_manifest_is_what_the_default_config_renders_but_its_mig_memory() -> None:
    """The plugin manifest's templates promise more than the instances have (A100-40GB 1g.5gb
    5120 MiB where `nvidia-smi mig -lgip` lists 4.75 GiB, A30 1g.6gb 6144 against 5.81 GiB):
    only those figures change, each to floor((GiB - 0.005) x 1024) of the lowest listing; a
    figure the listing's two decimals cannot show to be too large stays."""
    cm = device_cm(text("manifest_device_config.yaml"))
    out = render_device_config(cm, OperatorConfig(), NOW, mig_models=["NVIDIA A100-SXM4-40GB"])
    assert out.changed
    before, after = yaml.safe_load(cm["data"][KEY]), yaml.safe_load(out.data[KEY])
    assert without_memory(after) == without_memory(before)
    memory = {
        (e["models"][0], t["name"]): t["memory"]
        for e in after["nvidia"]["knownMigGeometries"]
        for g in e["allowedGeometries"]
        for t in g["geometries"]
    }
    assert memory[("A30", "1g.6gb")] == 5944  # 5.81 GiB
    assert memory[("A30", "4g.24gb")] == 23997  # 23.44 GiB
    assert memory[("A100-SXM4-40GB", "1g.5gb")] == 4858  # 4.75 GiB
    assert memory[("A100-SXM4-40GB", "7g.40gb")] == 40186  # 39.25 GiB (39.50 on R510)
    # 9.50 GiB: 9728 is what the listing says to its precision (mig_memory.provably_above)
    assert memory[("A100-SXM4-80GB", "1g.10gb")] == 9728
    assert "# " in out.data[KEY] or "#" not in cm["data"][KEY]  # comments kept
    again = render_device_config(
        device_cm(out.data[KEY]), OperatorConfig(), NOW, mig_models=["NVIDIA A100-SXM4-40GB"]
    )
    assert not again.changed


def test_seed002_names_are_brought_back_to_the_configured_ones_and_nothing_else() -> None:
    doc = "# seed 002\n" + text("seed002_device_config.yaml") + "cambricon:\n  x: 1\n"
    out = render_device_config(device_cm(doc, other="kept"), OperatorConfig(), NOW)
    rendered = out.data[KEY]
    assert rendered == doc.replace("nvidia.com/gpu", "volcano.sh/vgpu-number")
    assert out.data["other"] == "kept"
    assert out.annotations == {ANN_DATA_CHANGED_AT: NOW}


def test_unknown_nvidia_keys_and_sections_survive_a_change() -> None:
    doc = "nvidia:\n  resourceCountName: x/y  # theirs\n  futureKey: [1, 2]\nhygon:\n  a: b\n"
    out = render_device_config(device_cm(doc), load_config("gpuMemoryFactor: 4"), NOW)
    parsed = yaml.safe_load(out.data[KEY])
    assert parsed["hygon"] == {"a": "b"}
    assert parsed["nvidia"]["futureKey"] == [1, 2]
    assert parsed["nvidia"]["resourceCountName"] == "volcano.sh/vgpu-number"
    assert parsed["nvidia"]["gpuMemoryFactor"] == 4
    assert parsed["nvidia"]["knownMigGeometries"] == []


def test_a_new_mig_model_is_appended_after_the_existing_entries() -> None:
    before = text("manifest_device_config.yaml")
    out = render_device_config(
        device_cm(before), OperatorConfig(), NOW, mig_models=["NVIDIA H100 80GB HBM3"]
    )
    geos = yaml.safe_load(out.data[KEY])["nvidia"]["knownMigGeometries"]
    assert without_memory(geos[:3]) == without_memory(
        yaml.safe_load(before)["nvidia"]["knownMigGeometries"]
    )
    assert [g["models"] for g in geos][3:] == [["H100 80GB HBM3", "H100 PCIe"]]
    # The manifest mixes two sequence indentations, which one dump cannot keep; a document in
    # one style keeps its existing text byte for byte and only grows.
    again = render_device_config(
        device_cm(out.data[KEY]),
        OperatorConfig(),
        NOW,
        mig_models=["NVIDIA H100 80GB HBM3", "NVIDIA H200"],
    )
    assert again.data[KEY].startswith(out.data[KEY])
    assert yaml.safe_load(again.data[KEY])["nvidia"]["knownMigGeometries"][4]["models"] == [
        "NVIDIA H200"
    ]


def test_a_model_nothing_covers_is_left_as_a_note() -> None:
    cm = device_cm(rendered_manifest())
    out = render_device_config(cm, OperatorConfig(), NOW, mig_models=["NVIDIA B200"])
    assert not out.changed
    assert out.notes == (
        "no knownMigGeometries entry for NVIDIA B200 (add the model to "
        "migGeometries.catalog in the operator config)",
    )


def test_geometries_in_another_format_are_left_alone() -> None:
    doc = (
        "nvidia:\n  knownMigGeometries:\n  - models: [A30]\n    allowedGeometries:\n"
        "    - - name: 1g.6gb\n"
    )
    out = render_device_config(device_cm(doc), OperatorConfig(), NOW, mig_models=["NVIDIA A30"])
    assert yaml.safe_load(out.data[KEY])["nvidia"]["knownMigGeometries"][0][
        "allowedGeometries"
    ] == [[{"name": "1g.6gb"}]]
    assert "not in the Volcano format" in out.notes[0]


def test_vnpus_are_mirrored_only_with_ascend_on() -> None:
    source = configmap(
        "kube-system", "hami-scheduler-device", {KEY: text("hami_scheduler_device.yaml")}
    )
    vnpus = vnpus_section(source, KEY)
    cm = device_cm(rendered_manifest())
    off = render_device_config(cm, OperatorConfig(), NOW, vnpus=vnpus)
    assert not off.changed
    on = render_device_config(
        cm,
        load_config("ascendVnpu: {enabled: true}"),
        NOW,
        vnpus=vnpus,
        scheduler_version=Version(1, 15, 1),  # reads the wrapper (test_render_vnpus_form)
    )
    assert (
        yaml.safe_load(on.data[KEY])["vnpus"]
        == yaml.safe_load(text("hami_scheduler_device.yaml"))["vnpus"]
    )


def test_a_missing_configmap_is_created() -> None:
    out = render_device_config(None, OperatorConfig(), NOW)
    assert out.create and out.changed
    parsed = yaml.safe_load(out.data[KEY])
    assert parsed["nvidia"]["resourceMemoryPercentageName"] == "volcano.sh/vgpu-memory-percentage"


def test_unreadable_yaml_is_never_overwritten() -> None:
    with pytest.raises(RenderError):
        render_device_config(device_cm("nvidia: [\n"), OperatorConfig(), NOW)
    with pytest.raises(RenderError, match="not a YAML mapping"):
        render_device_config(device_cm("- a\n"), OperatorConfig(), NOW)

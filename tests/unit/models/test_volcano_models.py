"""Payload models and views, on the seeds' and the shipped manifests' real content."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.kit.volcano_fixtures import obj, text
from vgpu_operator.models.volcano import (
    PayloadError,
    RegisteredGpu,
    encode_register,
    first_match,
    parse_device_config,
    parse_node_config,
    parse_register,
)
from vgpu_operator.models.volcano_views import (
    Version,
    image_tag,
    parse_flags,
    parse_scheduler_conf,
    workload_view,
)


def test_the_manifest_device_config_parses_with_its_geometries() -> None:
    cfg = parse_device_config(text("manifest_device_config.yaml"))
    assert cfg.nvidia is not None
    assert cfg.nvidia.resource_names() == (
        "volcano.sh/vgpu-number",
        "volcano.sh/vgpu-memory",
        "volcano.sh/vgpu-memory-percentage",
        "volcano.sh/vgpu-cores",
    )
    geos = cfg.nvidia.geometries()
    assert [g.models[0] for g in geos] == ["A30", "A100-SXM4-40GB", "A100-SXM4-80GB"]
    a100 = geos[2]
    assert [g.group for g in a100.allowed_geometries] == ["group1", "group2", "group3", "group4"]
    assert [(t.name, t.memory, t.count) for t in a100.allowed_geometries[1].geometries] == [
        ("2g.20gb", 19968, 3),
        ("1g.10gb", 9728, 1),
    ]
    # substring matching against the device type the plugin registers
    assert first_match(geos, "NVIDIA A100-SXM4-80GB") is a100
    assert first_match(geos, "NVIDIA A100 80GB PCIe") is None  # the manifest's strings miss it


def test_unknown_keys_are_kept_like_the_go_readers_do() -> None:
    cfg = parse_device_config("nvidia:\n  resourceCountName: a/b\n  futureKey: 1\nother: {x: 1}\n")
    assert cfg.nvidia is not None and cfg.nvidia.model_extra == {"futureKey": 1}
    assert cfg.model_extra == {"other": {"x": 1}}


def test_vnpus_accepts_the_wrapper_and_the_legacy_list_form() -> None:
    wrapped = parse_device_config(text("hami_scheduler_device.yaml")).vnpus
    legacy = parse_device_config("vnpus:\n- chipName: 910B3\n  commonWord: Ascend910B3\n").vnpus
    assert wrapped is not None and wrapped.configs[0].common_word == "Ascend910B3"
    assert wrapped.configs[0].templates[0].ai_core == 5
    assert legacy is not None and legacy.configs[0].chip_name == "910B3"


def test_bad_yaml_is_a_payload_error() -> None:
    with pytest.raises(PayloadError):
        parse_device_config("nvidia: [")
    with pytest.raises(PayloadError):
        parse_node_config("{not json")


def test_node_config_effective_settings_follow_the_plugin() -> None:
    cfg = parse_node_config(
        '{"nodeconfig": ['
        '{"name": "n1", "operatingmode": "mig", "devicesplitcount": 4},'
        '{"name": "n1", "operatingmode": "", "devicecorescaling": 2},'
        '{"name": "n2", "operatingmode": "hami-core", "filterdevices": {"uuid": ["GPU-1"], '
        '"index": [3]}}]}'
    )
    n1 = cfg.effective_for("n1")
    assert (n1.mode, n1.device_split_count, n1.device_core_scaling) == ("mig", 4, 2)
    n2 = cfg.effective_for("n2")
    assert n2.filter_uuids == {"GPU-1"} and n2.filter_indexes == {3}
    other = cfg.effective_for("n3")
    assert other.mode == "hami-core" and not other.has_entry
    assert parse_node_config(text("manifest_node_config.json")).names() == ["aio-node67"]


RECORD = st.builds(
    RegisteredGpu,
    uuid=st.from_regex(r"GPU-[0-9a-f]{8}", fullmatch=True),
    count=st.integers(0, 128),
    memory=st.integers(0, 200000),
    type=st.sampled_from(["NVIDIA-NVIDIA A100-SXM4-80GB", "NVIDIA-NVIDIA GeForce RTX 4090"]),
    healthy=st.booleans(),
    mode=st.sampled_from(["hami-core", "mig", None]),
)


@given(st.lists(RECORD, max_size=8))
def test_register_annotation_round_trips(records: list[RegisteredGpu]) -> None:
    assert parse_register(encode_register(records)) == records


def test_register_record_format_is_the_plugins() -> None:
    gpu = RegisteredGpu("GPU-1", 10, 24564, "NVIDIA-NVIDIA GeForce RTX 4090", True, "hami-core")
    assert encode_register([gpu]) == "GPU-1,10,24564,NVIDIA-NVIDIA GeForce RTX 4090,true,hami-core:"
    with pytest.raises(PayloadError):
        parse_register("GPU-1,10,x:")


@pytest.mark.parametrize(
    ("conf", "vgpu", "ns", "name"),
    [
        ("seed000_scheduler.conf", True, "kube-system", "volcano-vgpu-device-config"),
        ("seed002_scheduler.conf", True, "volcano-system", "volcano-vgpu-device-config"),
        ("seed003_gpu_sharing.conf", False, "kube-system", "volcano-vgpu-device-config"),
        ("seed004_hami_ascend.conf", False, "kube-system", "hami-scheduler-device"),
    ],
)
def test_scheduler_conf_view_of_the_seeds(conf: str, vgpu: bool, ns: str, name: str) -> None:
    view = parse_scheduler_conf(text(conf))
    assert view.deviceshare.vgpu_enable is vgpu
    assert view.deviceshare.known_geometries_cm == (ns, name)
    assert view.plugin("predicates") is not None


def test_a_quoted_true_is_not_a_boolean_for_volcano() -> None:
    view = parse_scheduler_conf(
        "tiers:\n- plugins:\n  - name: deviceshare\n    arguments:\n"
        '      deviceshare.VGPUEnable: "true"\n'
    )
    assert not view.deviceshare.vgpu_enable
    assert view.deviceshare.mistyped("VGPUEnable")


def test_mindcluster_init_params_are_read_from_configurations() -> None:
    view = parse_scheduler_conf(text("seed004_mindcluster.conf"))
    assert view.deviceshare.ascend_mindcluster_vnpu_enable
    assert view.configuration("init-params") == {
        "grace-over-time": "900",
        "presetVirtualDevice": "false",
    }


@pytest.mark.parametrize(
    ("image", "tag", "version"),
    [
        ("docker.io/projecthami/volcano-vgpu-device-plugin:v1.12.0", "v1.12.0", (1, 12, 0)),
        (
            "aiharbor.msxf.local/test/projecthami/volcano-vgpu-device-plugin:v1.11.0",
            "v1.11.0",
            (1, 11, 0),
        ),
        ("registry:5000/volcanosh/vc-scheduler:v1.15.1", "v1.15.1", (1, 15, 1)),
        ("registry:5000/volcanosh/vc-scheduler", None, None),
        ("volcanosh/vc-scheduler@sha256:abcd", None, None),
        ("volcanosh/vc-scheduler:latest", "latest", None),
    ],
)
def test_versions_come_from_image_tags(
    image: str, tag: str | None, version: tuple[int, ...] | None
) -> None:
    assert image_tag(image) == tag
    assert Version.parse(tag) == (Version(*version) if version else None)


def test_flags_in_every_style() -> None:
    flags = parse_flags(
        [
            "device-plugin",
            "--device-split-count=10",
            "-presetVirtualDevice=false",
            "--config_file",
            "/device-config.yaml",
            "--debug",
        ]
    )
    assert flags["device-split-count"].value == "10" and flags["device-split-count"].inline
    assert flags["presetVirtualDevice"].value == "false"
    assert flags["config_file"].value == "/device-config.yaml"
    assert not flags["config_file"].inline
    assert flags["debug"].value is None


def test_workload_view_of_the_seed_daemonset() -> None:
    view = workload_view(obj("seed002_plugin_daemonset.yaml"))
    plugin = view.container("volcano-device-plugin")
    assert plugin is not None and plugin.version == Version(1, 11, 0)
    assert plugin.flags["resource-name"].value == "nvidia.com/gpu"
    assert view.node_selector == {"volcano.sh/vgpu.enabled": "true"}
    assert view.configmap_volumes() == {"deviceconfig": "volcano-vgpu-node-config"}
    # no preferred name: the image hint skips the monitor sidecar
    hinted = view.container(None, "volcano-vgpu-device-plugin")
    assert hinted is not None and hinted.name == "volcano-device-plugin"

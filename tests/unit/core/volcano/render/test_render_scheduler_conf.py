"""The scheduler conf is edited minimally: other plugins, tiers, arguments and comments stay."""

from __future__ import annotations

import pytest

from tests.kit.volcano_fixtures import scheduler_cm, text
from vgpu_operator.core.volcano.render import RenderError, render_scheduler_conf
from vgpu_operator.models.config import OperatorConfig, load_config
from vgpu_operator.models.volcano_views import parse_scheduler_conf

NOW = "2026-02-01T00:00:00Z"
KEY = "volcano-scheduler.conf"


def render(conf: str, cfg: OperatorConfig | None = None) -> str:
    out = render_scheduler_conf(scheduler_cm(conf), cfg or OperatorConfig(), NOW)
    return out.data[KEY]


@pytest.mark.parametrize("seed", ["seed000_scheduler.conf", "seed001_scheduler.conf"])
def test_seed_confs_that_are_right_stay_byte_for_byte(seed: str) -> None:
    out = render_scheduler_conf(scheduler_cm(text(seed)), OperatorConfig(), NOW)
    assert not out.changed and out.data[KEY] == text(seed)


def test_seed002_namespace_is_pointed_back_and_its_comments_stay() -> None:
    before = text("seed002_scheduler.conf")
    assert render(before) == before.replace(
        "KnownGeometriesCMNamespace: volcano-system", "KnownGeometriesCMNamespace: kube-system"
    )


def test_legacy_sharing_is_switched_off_when_vgpu_is_switched_on() -> None:
    after = render(text("seed003_gpu_sharing.conf"))
    assert after == text("seed003_gpu_sharing.conf").replace(
        "      deviceshare.GPUSharingEnable: true # 启用 GPU Sharing\n",
        "      deviceshare.GPUSharingEnable: false # 启用 GPU Sharing\n"
        "      deviceshare.VGPUEnable: true\n",
    )


def test_missing_plugins_are_added_next_to_each_other() -> None:
    conf = (
        'actions: "enqueue, allocate, backfill"\n'
        "tiers:\n"
        "- plugins:\n"
        "  - name: priority\n"
        "- plugins:\n"
        "  - name: drf\n"
        "  - name: proportion  # keep me\n"
    )
    after = render(conf)
    assert after == conf + (
        "  - name: predicates\n"
        "  - name: deviceshare\n"
        "    arguments:\n"
        "      deviceshare.VGPUEnable: true\n"
    )


def test_ascend_merges_into_the_vgpu_configmap() -> None:
    after = render(text("seed004_hami_ascend.conf"), load_config("ascendVnpu: {enabled: true}"))
    args = parse_scheduler_conf(after).deviceshare
    assert args.known_geometries_cm == ("kube-system", "volcano-vgpu-device-config")
    assert args.ascend_hami_vnpu_enable and args.vgpu_enable
    assert "# enable ascend vnpu" in after
    assert "deviceshare.SchedulePolicy: binpack  # scheduling policy" in after


def test_a_quoted_true_and_a_disabled_predicate_are_fixed() -> None:
    conf = (
        "tiers:\n- plugins:\n  - name: predicates\n  - name: deviceshare\n"
        "    enablePredicate: false\n"
        '    arguments:\n      deviceshare.VGPUEnable: "true"\n'
    )
    view = parse_scheduler_conf(render(conf))
    ds = view.plugin("deviceshare")
    assert ds is not None and ds.options["enablePredicate"] is True
    assert view.deviceshare.vgpu_enable


def test_other_indentation_styles_are_kept() -> None:
    conf = (
        "tiers:\n"
        "  - plugins:\n"
        "      - name: predicates\n"
        "      - name: deviceshare\n"
        "        arguments:\n"
        "          deviceshare.VGPUEnable: false\n"
    )
    assert render(conf) == conf.replace("VGPUEnable: false", "VGPUEnable: true")


def test_no_scheduler_configmap_is_an_error_not_a_creation() -> None:
    with pytest.raises(RenderError, match="does not create one"):
        render_scheduler_conf(None, OperatorConfig(), NOW)

"""Which DaemonSet events ask the controller for a configuration pass, and which DaemonSets its
informer holds (the gate before the first pass is the cache's: `test_cache`)."""

from __future__ import annotations

from typing import Any

from vgpu_operator.controller.app import Controller, Settings
from vgpu_operator.controller.informer import ADDED, MODIFIED, Change
from vgpu_operator.controller.snapshot import compact_daemonset
from vgpu_operator.controller.volcano import VolcanoOptions
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.kubeapi.watch import Listing


def controller() -> tuple[Controller, list[bool]]:
    """A controller not started, its configuration pass requests recorded."""
    settings = Settings(credentials=Credentials(), volcano=VolcanoOptions(enabled=True))
    made = Controller(settings, api=None)  # type: ignore[arg-type]  # no request is made
    asked: list[bool] = []
    made.request_configuration_pass = lambda: asked.append(True)  # type: ignore[method-assign]
    return made, asked


def daemonset(ns: str, name: str, rv: str, image: str = "img:1", ready: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "generation": 1},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
        "status": {"numberReady": ready},
    }


def change(kind: str, now: dict[str, Any], before: dict[str, Any] | None) -> Change[Any]:
    previous = compact_daemonset(before) if before else None
    name = f"{now['metadata']['namespace']}/{now['metadata']['name']}"
    return Change(kind, name, compact_daemonset(now), previous, now)


async def test_the_configured_plugin_asks_for_a_pass_on_every_event() -> None:
    ctl, asked = controller()
    old = daemonset("kube-system", "volcano-device-plugin", "1")
    status_only = daemonset("kube-system", "volcano-device-plugin", "2", ready=3)
    await ctl.daemonset_event(change(MODIFIED, status_only, old))
    assert asked == [True]  # its rollout shows in its status


async def test_another_daemonset_asks_for_a_pass_only_when_its_spec_changes() -> None:
    ctl, asked = controller()
    first = daemonset("gpu-operator", "nvidia-device-plugin-daemonset", "1")
    await ctl.daemonset_event(change(ADDED, first, None))
    assert asked == [True]  # new: the rules may look for it
    status_only = daemonset("gpu-operator", "nvidia-device-plugin-daemonset", "2", ready=5)
    await ctl.daemonset_event(change(MODIFIED, status_only, first))
    assert asked == [True]  # a status change (and a new resourceVersion) only
    new_image = daemonset("gpu-operator", "nvidia-device-plugin-daemonset", "3", image="img:2")
    await ctl.daemonset_event(change(MODIFIED, new_image, status_only))
    assert asked == [True, True]


async def test_same_named_daemonsets_in_two_namespaces_are_both_held() -> None:
    """The plugin is found by namespace and name: a DaemonSet of the same name in another
    namespace (a copy left in `volcano-system` by a hand install, say) must neither
    hide it nor be taken for it."""
    ctl, _ = controller()
    plugin = daemonset("kube-system", "volcano-device-plugin", "1", image="hami:v2.5")
    stray = daemonset("volcano-system", "volcano-device-plugin", "2", image="other:1")
    assert ctl.cache.daemonsets is not None
    await ctl.cache.daemonsets._listed(Listing([plugin, stray], "2"))
    assert len(ctl.cache.daemonset_objects() or []) == 2
    held = ctl.cache.plugin_daemonset()
    assert held is not None and held["metadata"]["namespace"] == "kube-system"

"""`gpuMemoryFactor`, the unit of every pod's `volcano.sh/vgpu-memory` (a request of N means
N x factor MiB): adopted from the cluster when the operator configuration leaves it unset (a
hand-set 10 is kept, not reset to 1), replaced only when set, and then said; and what a request
of N means, in MiB, in every plan and in the never-fit warnings (`doctor`'s statement: rule
gpu-memory-factor, tests/unit/core/rules/test_rules_versions_nodes.py)."""

from __future__ import annotations

from typing import Any

import yaml

from tests.kit.plan_world import LATER, NOW, a100_cluster
from tests.kit.volcano_fixtures import T_CHANGED, edit, findings, healthy, pod, replace
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.core.plan import Plan, plan
from vgpu_operator.core.volcano.render import render_device_config
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.unschedulable import FitContext, NodeShape, causes
from vgpu_operator.models.config import OperatorConfig, load_config

DEVICE_CM, KEY = "volcano-vgpu-device-config", "device-config.yaml"
MEMORY, MODE = "volcano.sh/vgpu-memory", "volcano.sh/vgpu-mode"


def hand_set(factor: str, config: OperatorConfig) -> ClusterSnapshot:
    """The consistent cluster with `gpuMemoryFactor: FACTOR` written into its device config by
    hand, read with `config`."""

    def set_factor(cm: dict[str, Any]) -> None:
        text = cm["data"][KEY]
        assert "gpuMemoryFactor: 1\n" in text
        cm["data"][KEY] = text.replace("gpuMemoryFactor: 1\n", f"gpuMemoryFactor: {factor}\n")

    # the config last: the snapshot adopts an unset factor from what its device config holds
    return replace(edit(healthy(), "configmaps", DEVICE_CM, set_factor), config=config)


def rendered(s: ClusterSnapshot) -> tuple[int, tuple[str, ...], bool]:
    """(the gpuMemoryFactor enforce would leave, the render's notes, whether it writes)."""
    out = render_device_config(
        s.configmap("kube-system", DEVICE_CM), s.config, T_CHANGED, mig_models=s.mig_gpu_names
    )
    return yaml.safe_load(out.data[KEY])["nvidia"]["gpuMemoryFactor"], out.notes, out.changed


def test_an_unset_factor_is_the_one_the_cluster_has_and_is_kept() -> None:
    s = hand_set("10", OperatorConfig())
    assert s.config.gpu_memory_factor == 10  # adopted when the snapshot is read
    assert rendered(s) == (10, (), False)  # nothing to write: not reset to 1
    assert findings(s, "device-config-rendered") == []


def test_the_plugins_flag_when_given_is_the_one_adopted() -> None:
    """`--gpu-memory-factor` overrides the ConfigMap in the plugin: that is the unit there."""

    def flag(ds: dict[str, Any]) -> None:
        container = ds["spec"]["template"]["spec"]["containers"][0]
        container.setdefault("args", []).append("--gpu-memory-factor=4")

    flagged = edit(healthy(), "daemonsets", "volcano-device-plugin", flag)
    s = replace(flagged, config=OperatorConfig())
    assert s.config.gpu_memory_factor == 4
    assert rendered(s)[0] == 4  # the scheduler's copy follows the plugin's, not 1


def test_zero_is_one_to_the_plugin_and_adopts_nothing() -> None:
    s = hand_set("0", OperatorConfig())
    assert s.config.gpu_memory_factor is None and s.config.memory_factor == 1
    factor, _, changed = rendered(s)
    assert (factor, changed) == (1, True)


def test_a_set_factor_replaces_the_clusters_and_says_what_it_does_to_requests() -> None:
    s = hand_set("10", load_config("gpuMemoryFactor: 1\n"))
    factor, notes, changed = rendered(s)
    assert (factor, changed) == (1, True)
    assert (
        "gpuMemoryFactor 10 -> 1 (the operator config's): a volcano.sh/vgpu-memory request of N "
        "now means N x 1 MiB, not N x 10 MiB"
    ) in notes
    [finding] = findings(s, "device-config-rendered")
    assert "gpuMemoryFactor" in finding.message


def pending(limits: dict[str, str], mode: str) -> dict[str, Any]:
    p = pod(
        "team-a",
        "job-0",
        limits=limits,
        annotations={MODE: mode},
        scheduler="volcano",
        phase="Pending",
    )
    p["metadata"]["uid"] = "uid-job-0"
    return p


def test_never_fit_warnings_say_what_a_request_means_in_mib() -> None:
    # an RTX 4090 (24564 MiB) registered under factor 11: 2233 units
    rtx = FitContext(shapes=frozenset({NodeShape("hami-core", False, 4, 2233)}), memory_factor=11)
    [cause] = causes(pending({MEMORY: "3000"}, "hami-core"), rtx)
    assert cause.id == "vgpu-memory-too-large"
    assert cause.message.startswith(
        "container main asks for 3000 (x gpuMemoryFactor 11: 33000 MiB) per vGPU, more than any "
        "GPU of the nodes that serve it in hami-core mode has: the largest has 2233 (x "
        "gpuMemoryFactor 11: 24563 MiB); volcano.sh/vgpu-memory: a request of N means N x 11 "
        "MiB (gpuMemoryFactor 11, from the scheduler's default). Fix: ask for at most 2233 "
    )
    # MIG: the scheduler multiplies the request by the factor (instances are in MiB)
    a100 = NodeShape("mig", True, 1, 20480, (5120, 10240, 20480, 40960), 7)
    mig = FitContext(shapes=frozenset({a100}), memory_factor=2)
    [cause] = causes(pending({MEMORY: "20481"}, "mig"), mig)
    assert cause.message.startswith(
        "container main asks for 20481 (x gpuMemoryFactor 2: 40962 MiB) per vGPU in mig mode, "
        "but no MIG geometry of the MIG nodes' GPUs has an instance that large: the largest is "
        "40960 MiB (kube-system/volcano-vgpu-device-config, knownMigGeometries); "
        "volcano.sh/vgpu-memory: a request of N means N x 2 MiB (gpuMemoryFactor 2, from the "
        "scheduler's default). Fix: ask for at most 20480 (x gpuMemoryFactor 2: 40960 MiB) of "
        "vGPU memory"
    )


# --- plan: the unit, said in every plan (core.volcano.memory_unit) -----------------------------


def unit_notes(p: Plan) -> list[str]:
    return [n for n in p.notes if n.startswith("volcano.sh/vgpu-memory: a request of N means")]


def test_every_plan_says_what_a_request_means_in_mib() -> None:
    """Not only when the factor changes: a plan that changes nothing says it too."""
    [line] = unit_notes(plan(healthy(), [], NOW))
    assert line == (
        "volcano.sh/vgpu-memory: a request of N means N x 1 MiB (gpuMemoryFactor 1, from "
        "ConfigMap kube-system/volcano-vgpu-device-config)"
    )
    steady, live = a100_cluster()  # the operator config's factor 11, rendered by enforce
    again = plan(steady, [parse_policy(live)], LATER)
    assert not again.changes
    [eleven] = unit_notes(again)
    assert eleven.startswith("volcano.sh/vgpu-memory: a request of N means N x 11 MiB ")
    assert "(gpuMemoryFactor 11, from " in eleven
    # a hand-set 10 replaced by the operator config's 1: the unit once the writes are made
    changed = plan(hand_set("10", load_config("gpuMemoryFactor: 1\n")), [], NOW)
    assert [n.split(" (")[0] for n in unit_notes(changed)] == [
        "volcano.sh/vgpu-memory: a request of N means N x 1 MiB"
    ]

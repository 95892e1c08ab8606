"""`kubectl vgpu`: the console script kubectl finds on PATH, the pools and nodes tables, and
`doctor` / `plan` as its subcommands (the commands themselves run against the demo's cluster in
tests/cluster/test_demo.py)."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from typing import Any

import pytest

from vgpu_operator import contract
from vgpu_operator.commands import kubectl_plugin
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, RegisteredGpu, encode_register


def test_console_script_is_kubectl_vgpu() -> None:
    # kubectl runs `kubectl-vgpu` from PATH for `kubectl vgpu ...`
    [script] = [e for e in entry_points(group="console_scripts") if e.name == "kubectl-vgpu"]
    assert script.value == "vgpu_operator.commands.kubectl_plugin:main"


def policy(name: str, mode: str, ready: str, consistent: str | None) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": ready}]
    if consistent is not None:
        conditions.append({"type": "ConfigConsistent", "status": consistent})
    return {
        "metadata": {"name": name},
        "spec": {"mode": mode},
        "status": {"matchedNodes": 3, "readyNodes": 2, "conditions": conditions},
    }


def test_pools_table() -> None:
    rows = kubectl_plugin.pool_rows(
        [policy("rtx", "hami-core", "False", "True"), policy("a100", "mig", "True", None)]
    )
    assert rows == [
        ("a100", "mig", "3", "2", "True", "-"),
        ("rtx", "hami-core", "3", "2", "False", "True"),
    ]
    text = kubectl_plugin.table(kubectl_plugin.POOL_COLUMNS, rows)
    assert text.splitlines()[0].split() == list(kubectl_plugin.POOL_COLUMNS)


def gpu(i: int, mode: str) -> RegisteredGpu:
    return RegisteredGpu(f"GPU-{i}", 10, 2234, "NVIDIA-NVIDIA GeForce RTX 4090", True, mode)


def node(
    name: str, *, labels: dict[str, str] | None = None, register: str | None = None, count: str = ""
) -> dict[str, Any]:
    annotations = {REGISTER_ANNOTATION: register} if register is not None else {}
    released = {"mode": "mig", "mig": {"partitioning": "dynamic"}}
    if labels and contract.LABEL_POLICY in labels:
        annotations[contract.ANN_CONFIG] = json.dumps(released)
    return {
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations},
        "status": {"allocatable": {"volcano.sh/vgpu-number": count}} if count else {},
    }


def test_nodes_table_shows_what_the_plugin_registered() -> None:
    managed = {
        contract.LABEL_POLICY: "a100-pool",
        contract.LABEL_MODE: "mig",
        contract.LABEL_STATE: "success",
        contract.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB",
    }
    register = encode_register([gpu(0, "mig"), gpu(1, "mig")])
    nodes = [
        node("gpu-b", labels=managed, register=register, count="20"),
        # registered once, but its plugin pod is gone: nothing allocatable, nothing shown
        node("gpu-a", labels={contract.GFD_PRODUCT: "NVIDIA-H100"}, register=register, count="0"),
        node("cpu-0"),
    ]
    rows = kubectl_plugin.node_rows(nodes)
    assert rows == [
        ("gpu-a", "H100", "-", "-", "-", "-", "-"),
        ("gpu-b", "A100-SXM4-80GB", "a100-pool", "mig", "mig/dynamic", "success", "2xmig/20"),
    ]
    assert [r[0] for r in kubectl_plugin.node_rows(nodes, every=True)] == [
        "cpu-0",
        "gpu-a",
        "gpu-b",
    ]


def test_unreadable_register_annotation_is_shown_as_such() -> None:
    raw = node("n", register="GPU-0,notanumber,1,x,true,mig:", count="10")
    assert kubectl_plugin.registered(raw) == "unreadable"


@pytest.mark.parametrize("command", ["doctor", "plan", "get"])
def test_subcommands(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        kubectl_plugin.main([command, "--help"])
    assert exited.value.code == 0
    assert "--kubeconfig" in capsys.readouterr().out


def test_no_command_is_the_overview(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def fake_get(args: Any) -> int:
        seen.append(args)
        return 0

    monkeypatch.setattr(kubectl_plugin, "cmd_get", fake_get)
    assert kubectl_plugin.main(["--kubeconfig", "/k"]) == 0
    assert kubectl_plugin.main([]) == 0
    assert [(a.what, a.kubeconfig) for a in seen] == [("all", "/k"), ("all", None)]

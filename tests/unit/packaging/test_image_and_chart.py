"""The Dockerfile's contract with the chart: one entrypoint, the chart's container args are
commands of it; the controller's security context as cert-manager sets it with the image's
numeric UID. The chart's pods otherwise: tests/unit/chart/test_chart_pods.py."""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.kit.chart_pods import one_pod, pods
from tests.kit.dockerfile import ROOT, exec_form, parse
from vgpu_devcluster.install import render_chart
from vgpu_operator.commands.cli import build_parser


def test_dockerfile_is_multi_stage_from_a_pinnable_base_with_a_numeric_user() -> None:
    df = parse()
    assert len(df.stages) >= 2
    assert df.args.get("PYTHON_IMAGE")
    assert {s.base for s in df.stages} == {"${PYTHON_IMAGE}"}  # every stage: the one ARG
    assert "--from=" in " ".join(v for k, v in df.stages[-1].instructions if k == "COPY")
    # the digest step is documented beside the ARG
    assert re.search(r"PYTHON_IMAGE=\S+@sha256:", (ROOT / "Dockerfile").read_text())
    [user] = df.final("USER")
    uid = df.stage_arg("UID")
    assert user == "${UID}:${UID}" and uid is not None and int(uid) > 0


def test_entrypoint_is_the_console_script() -> None:
    df = parse()
    [entrypoint] = df.final("ENTRYPOINT")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert exec_form(entrypoint) == ["vgpu-operator"]
    assert "vgpu-operator" in scripts


@pytest.mark.parametrize(
    "values",
    [
        {},
        {
            "agent.nvidiaSmi.source": "hostPath",
            "leaderElection.enabled": "false",
            "replicaCount": "1",
        },
    ],
)
def test_every_container_runs_a_command_of_the_entrypoint(values: dict[str, str]) -> None:
    """No container overrides the ENTRYPOINT; its args parse with the CLI the image runs."""
    docs = render_chart(values=values)
    parser = build_parser()
    seen = set()
    for name, pod in pods(docs):
        for container in pod["containers"]:
            assert "command" not in container, f"{name} overrides the image's entrypoint"
            assert container["image"] == "ghcr.io/vgpu-operator/vgpu-operator:0.1.0"
            args = parser.parse_args(container["args"])  # exits on an unknown option
            seen.add(args.command)
    assert seen == {"run", "agent", "cleanup", "doctor"}  # doctor: the `helm test` Pod


def test_controller_and_hook_run_as_cert_manager_sets_it() -> None:
    docs = render_chart()
    uid = int(parse().stage_arg("UID") or 0)
    for pod in (one_pod(docs, "Deployment"), one_pod(docs, "Job", "-cleanup")):
        assert pod["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        [container] = pod["containers"]
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        }
        assert not pod.get("hostNetwork") and not pod.get("hostPID")

"""The Dockerfile's contract with the chart: one entrypoint, the chart's container args are
commands of it; the controller's security context as cert-manager sets it with the image's
numeric UID; the agent privileged and nothing more of the host; nvidia-smi both ways."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kit.dockerfile import ROOT, exec_form, parse
from vgpu_devcluster.install import chart_dir, render_chart
from vgpu_operator.commands.cli import build_parser

Pod = dict[str, Any]


def _pods(docs: list[dict[str, Any]]) -> Iterator[tuple[str, Pod]]:
    for doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet", "Job"):
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]


def _one(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> Pod:
    [pod] = [
        doc["spec"]["template"]["spec"]
        for doc in docs
        if doc["kind"] == kind and doc["metadata"]["name"].endswith(suffix)
    ]
    return pod


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
    for name, pod in _pods(docs):
        for container in pod["containers"]:
            assert "command" not in container, f"{name} overrides the image's entrypoint"
            assert container["image"] == "ghcr.io/vgpu-operator/vgpu-operator:0.1.0"
            args = parser.parse_args(container["args"])  # exits on an unknown option
            seen.add(args.command)
    assert seen == {"run", "agent", "cleanup"}


def test_image_digest_pins_every_container() -> None:
    digest = "sha256:" + "a" * 64
    docs = render_chart(values={"image.digest": digest})
    images = {c["image"] for _, pod in _pods(docs) for c in pod["containers"]}
    assert images == {f"ghcr.io/vgpu-operator/vgpu-operator@{digest}"}


def test_controller_and_hook_run_as_cert_manager_sets_it() -> None:
    docs = render_chart()
    uid = int(parse().stage_arg("UID") or 0)
    for pod in (_one(docs, "Deployment"), _one(docs, "Job", "-cleanup")):
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


def test_agent_is_privileged_with_host_pid_and_nothing_else_of_the_host() -> None:
    pod = _one(render_chart(), "DaemonSet", "-agent")
    [container] = pod["containers"]
    assert container["securityContext"]["privileged"] is True  # MIG control
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["hostPID"] is True  # process visibility
    assert pod["hostNetwork"] is False and pod["hostIPC"] is False
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {"/run/nvidia-persistenced"}
    no_pid = _one(render_chart(values={"agent.hostPID": "false"}), "DaemonSet", "-agent")
    assert no_pid["hostPID"] is False


def test_probes_on_healthz_for_controller_and_agent() -> None:
    docs = render_chart()
    for pod, port in ((_one(docs, "Deployment"), 8080), (_one(docs, "DaemonSet", "-agent"), 8081)):
        [container] = pod["containers"]
        for probe in ("livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"] == {"path": "/healthz", "port": port}
        liveness = [a for a in container["args"] if a.startswith("--liveness=")]
        assert liveness == [f"--liveness=http://0.0.0.0:{port}/healthz"]


def test_nvidia_smi_from_the_runtime_or_from_host_paths() -> None:
    runtime = _one(render_chart(), "DaemonSet", "-agent")
    env = {e["name"]: e.get("value") for e in runtime["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "VGPU_NVIDIA_SMI" not in env
    with_class = _one(
        render_chart(values={"agent.runtimeClassName": "nvidia"}), "DaemonSet", "-agent"
    )
    assert with_class["runtimeClassName"] == "nvidia"

    values = {
        "agent.nvidiaSmi.source": "hostPath",
        "agent.nvidiaSmi.hostPath.binary": "/run/nvidia/driver/usr/bin/nvidia-smi",
    }
    host = _one(render_chart(values=values), "DaemonSet", "-agent")
    [container] = host["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v["hostPath"] for v in host["volumes"] if "hostPath" in v}
    assert env["VGPU_NVIDIA_SMI"] == mounts["nvidia-smi"]
    assert volumes["nvidia-smi"] == {
        "path": "/run/nvidia/driver/usr/bin/nvidia-smi",
        "type": "File",
    }
    assert mounts["nvml"].startswith(env["LD_LIBRARY_PATH"] + "/")
    assert volumes["nvml"]["path"].endswith("libnvidia-ml.so.1")


def test_priority_class_is_optional() -> None:
    assert "priorityClassName" not in _one(render_chart(), "Deployment")
    set_ = render_chart(values={"priorityClassName": "system-cluster-critical"})
    assert _one(set_, "Deployment")["priorityClassName"] == "system-cluster-critical"
    assert _one(set_, "Job", "-cleanup")["priorityClassName"] == "system-cluster-critical"


def test_templates_use_no_lookup() -> None:
    """`lookup` renders nothing under `helm template` and Argo CD: the chart never uses it."""
    for template in (chart_dir() / "templates").rglob("*"):
        if template.is_dir():
            continue
        assert not re.search(r"\blookup\b", template.read_text()), template.name

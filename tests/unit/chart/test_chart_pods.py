"""The chart's pods: images pinned by digest, the agent privileged with the host's PID namespace
and nothing else of the host, probes on /healthz, nvidia-smi from the NVIDIA runtime or from host
paths, an optional priority class, and no `lookup` in any template."""

from __future__ import annotations

import re

from tests.kit.chart_pods import one_pod, pods
from vgpu_devcluster.install import chart_dir, render_chart


def test_image_digest_pins_every_container() -> None:
    digest = "sha256:" + "a" * 64
    docs = render_chart(values={"image.digest": digest})
    images = {c["image"] for _, pod in pods(docs) for c in pod["containers"]}
    assert images == {f"ghcr.io/vgpu-operator/vgpu-operator@{digest}"}


def test_agent_is_privileged_with_host_pid_and_nothing_else_of_the_host() -> None:
    pod = one_pod(render_chart(), "DaemonSet", "-agent")
    [container] = pod["containers"]
    assert container["securityContext"]["privileged"] is True  # MIG control
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["hostPID"] is True  # process visibility
    assert pod["hostNetwork"] is False and pod["hostIPC"] is False
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {"/run/nvidia-persistenced", "/var/lib/kubelet/pod-resources"}
    no_pid = one_pod(render_chart(values={"agent.hostPID": "false"}), "DaemonSet", "-agent")
    assert no_pid["hostPID"] is False


def test_probes_on_healthz_for_controller_and_agent() -> None:
    docs = render_chart()
    for pod, port in (
        (one_pod(docs, "Deployment"), 8080),
        (one_pod(docs, "DaemonSet", "-agent"), 8081),
    ):
        [container] = pod["containers"]
        for probe in ("livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"] == {"path": "/healthz", "port": port}
        liveness = [a for a in container["args"] if a.startswith("--liveness=")]
        assert liveness == [f"--liveness=http://0.0.0.0:{port}/healthz"]


def test_nvidia_smi_from_the_runtime_or_from_host_paths() -> None:
    runtime = one_pod(render_chart(), "DaemonSet", "-agent")
    env = {e["name"]: e.get("value") for e in runtime["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "VGPU_NVIDIA_SMI" not in env
    with_class = one_pod(
        render_chart(values={"agent.runtimeClassName": "nvidia"}), "DaemonSet", "-agent"
    )
    assert with_class["runtimeClassName"] == "nvidia"

    values = {
        "agent.nvidiaSmi.source": "hostPath",
        "agent.nvidiaSmi.hostPath.binary": "/run/nvidia/driver/usr/bin/nvidia-smi",
    }
    host = one_pod(render_chart(values=values), "DaemonSet", "-agent")
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
    assert "priorityClassName" not in one_pod(render_chart(), "Deployment")
    set_ = render_chart(values={"priorityClassName": "system-cluster-critical"})
    assert one_pod(set_, "Deployment")["priorityClassName"] == "system-cluster-critical"
    assert one_pod(set_, "Job", "-cleanup")["priorityClassName"] == "system-cluster-critical"


def test_templates_use_no_lookup() -> None:
    """`lookup` renders nothing under `helm template` and Argo CD: the chart never uses it."""
    for template in (chart_dir() / "templates").rglob("*"):
        if template.is_dir():
            continue
        assert not re.search(r"\blookup\b", template.read_text()), template.name

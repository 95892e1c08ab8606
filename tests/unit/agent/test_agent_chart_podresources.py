"""The chart gives the agent the kubelet's PodResources socket: the directory mounted read-only,
the flag pointing at it, and both gone when `agent.podResourcesDir` is empty."""

from __future__ import annotations

from tests.kit.chart_pods import one_pod
from vgpu_devcluster.install import render_chart
from vgpu_operator.agent.podresources_wire import DEFAULT_SOCKET


def test_the_pod_resources_directory_is_mounted_read_only() -> None:
    pod = one_pod(render_chart("agent-daemonset.yaml"), "DaemonSet", "-agent")
    [container] = pod["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["pod-resources"] == {
        "name": "pod-resources",
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    }
    assert volumes["pod-resources"]["hostPath"] == {
        "path": "/var/lib/kubelet/pod-resources",
        "type": "DirectoryOrCreate",
    }
    assert f"--pod-resources-socket={DEFAULT_SOCKET}" in container["args"]
    assert DEFAULT_SOCKET.startswith(mounts["pod-resources"]["mountPath"] + "/")


def test_another_kubelet_root_and_off() -> None:
    values = {"agent.podResourcesDir": "/var/snap/microk8s/common/var/lib/kubelet/pod-resources"}
    pod = one_pod(render_chart("agent-daemonset.yaml", values=values), "DaemonSet", "-agent")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == values["agent.podResourcesDir"]
    assert f"--pod-resources-socket={DEFAULT_SOCKET}" in pod["containers"][0]["args"]

    off = one_pod(
        render_chart("agent-daemonset.yaml", values={"agent.podResourcesDir": ""}),
        "DaemonSet",
        "-agent",
    )
    [container] = off["containers"]
    assert "--pod-resources-socket=" in container["args"]  # empty: the agent asks no kubelet
    assert "pod-resources" not in {v["name"] for v in off["volumes"]}
    assert "pod-resources" not in {m["name"] for m in container["volumeMounts"]}

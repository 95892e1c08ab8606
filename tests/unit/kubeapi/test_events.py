"""One Event builder for the controller and the agent."""

from __future__ import annotations

from datetime import UTC, datetime

from vgpu_operator.kubeapi import object_ref
from vgpu_operator.kubeapi.events import event_body, events_path


def test_an_agent_event_is_about_its_node_in_default() -> None:
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    body = event_body(
        object_ref("Node", "n1", uid="u-1"),
        "Warning",
        "RebootRequired",
        "x" * 2000,
        component="vgpu-operator-agent",
        instance="n1",
        host="n1",
        now=when,
    )
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "n1",
        "uid": "u-1",
    }
    assert body["metadata"]["namespace"] == "default"
    assert body["metadata"]["name"].startswith("n1.")
    assert (body["type"], body["reason"], len(body["message"])) == (
        "Warning",
        "RebootRequired",
        1024,
    )
    assert body["source"] == {"component": "vgpu-operator-agent", "host": "n1"}
    assert (body["reportingComponent"], body["reportingInstance"]) == ("vgpu-operator-agent", "n1")
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2025-01-02T03:04:05Z"
    assert events_path(body) == "/api/v1/namespaces/default/events"


def test_a_namespaced_objects_event_lives_in_its_namespace() -> None:
    ref = object_ref("DaemonSet", "plugin", namespace="kube-system", uid=None)
    body = event_body(ref, "Normal", "Restarted", "m", component="vgpu-operator", instance="x")
    assert body["involvedObject"] == {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "plugin",
        "namespace": "kube-system",
        "uid": None,
    }
    assert events_path(body) == "/api/v1/namespaces/kube-system/events"
    assert body["source"] == {"component": "vgpu-operator"}

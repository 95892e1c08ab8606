"""The pod specs of the chart's rendered workloads (vgpu_devcluster.install.render_chart)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Pod = dict[str, Any]


def pods(docs: list[dict[str, Any]]) -> Iterator[tuple[str, Pod]]:
    """(workload name, pod spec) of every Deployment, DaemonSet and Job, and of every bare Pod
    (the `helm test` Pod)."""
    for doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet", "Job"):
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]
        elif doc["kind"] == "Pod":
            yield doc["metadata"]["name"], doc["spec"]


def one_pod(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> Pod:
    """The pod spec of the one `kind` whose name ends with `suffix`."""
    [pod] = [
        doc["spec"]["template"]["spec"]
        for doc in docs
        if doc["kind"] == kind and doc["metadata"]["name"].endswith(suffix)
    ]
    return pod

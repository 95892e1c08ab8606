"""The uninstall hook evicts no GPU pod unless `cleanup.evictGpuPods: true` (issue 29): the Job
runs `vgpu-operator cleanup` without `--evict-gpu-pods` by default, with it when the value says so,
and the schema takes only a boolean, described."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from vgpu_devcluster import binaries
from vgpu_devcluster.install import chart_dir, render_chart
from vgpu_operator.commands.cli import build_parser


def _cleanup_args(values: dict[str, Any] | None = None) -> list[str]:
    [job] = [d for d in render_chart("cleanup-hook.yaml", values=values) if d["kind"] == "Job"]
    [container] = job["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def test_the_hook_evicts_nothing_by_default_and_drains_when_told() -> None:
    default = _cleanup_args()
    assert "--evict-gpu-pods" not in default
    told = _cleanup_args({"cleanup.evictGpuPods": "true"})
    assert told == [*default, "--evict-gpu-pods"]
    # what the Job runs is a command line the CLI takes
    assert build_parser().parse_args(told).evict_gpu_pods is True


def test_the_value_is_described_and_only_a_boolean() -> None:
    schema = json.loads((chart_dir() / "values.schema.json").read_text())
    prop = schema["properties"]["cleanup"]["properties"]["evictGpuPods"]
    assert prop["type"] == "boolean" and "evict" in prop["description"]
    helm = str(binaries.ensure("helm"))
    bad = ["--set", "cleanup.evictGpuPods=maybe", "--kube-version", binaries.KUBERNETES_VERSION]
    done = subprocess.run(
        [helm, "template", str(chart_dir()), *bad],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and "/cleanup/evictGpuPods" in done.stdout + done.stderr

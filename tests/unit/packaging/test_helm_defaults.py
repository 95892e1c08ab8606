"""The project's helm is linked as helm's release builds are: its own version, and the local
control plane's Kubernetes version as the default `helm lint` and `helm template` assume (a plain
`go install` leaves v1.20, below the chart's `kubeVersion`). So the chart lints and renders with
no `--kube-version`, as it does with a released helm."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from vgpu_devcluster import binaries
from vgpu_devcluster.install import chart_dir


def helm(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binaries.ensure("helm")), *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_helm_says_its_version_and_defaults_to_the_control_planes_kubernetes(
    tmp_path: Path,
) -> None:
    shown = helm("version", "--template", "{{ .Version }}")
    assert shown.stdout == binaries.HELM_VERSION, shown.stderr
    probe = tmp_path / "probe"
    (probe / "templates").mkdir(parents=True)
    (probe / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.0.1\n")
    (probe / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\n"
        "data: {kube: '{{ .Capabilities.KubeVersion.Version }}'}\n"
    )
    rendered = helm("template", str(probe))
    assert rendered.returncode == 0, rendered.stderr
    minor = binaries.KUBERNETES_VERSION.split(".")[1]
    assert yaml.safe_load(rendered.stdout)["data"]["kube"] == f"v1.{minor}.0"


def test_lint_strict_and_template_need_no_kube_version() -> None:
    linted = helm("lint", "--strict", str(chart_dir()))
    assert linted.returncode == 0, linted.stdout + linted.stderr
    rendered = helm("template", "vgpu-operator", str(chart_dir()))
    assert rendered.returncode == 0, rendered.stderr
    kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered.stdout) if doc}
    assert {"Deployment", "DaemonSet", "ConfigMap"} <= kinds


def test_the_cached_helm_is_keyed_by_its_link_flags() -> None:
    tool = binaries.TOOL_BY_NAME["helm"]
    assert "pkg/chartutil.k8sVersionMinor=" in tool.extra_ldflags
    assert binaries.tool_dir(tool).name.startswith(f"helm-{binaries.HELM_VERSION}-")
    assert binaries.tool_dir(tool) != binaries.cache_root() / f"helm-{binaries.HELM_VERSION}"

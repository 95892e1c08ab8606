"""`helm lint --strict` is clean, and values.schema.json refuses bad values, naming the field."""

from __future__ import annotations

import subprocess

import pytest

from vgpu_devcluster import binaries
from vgpu_devcluster.install import chart_dir


def _helm(*args: str) -> subprocess.CompletedProcess[str]:
    helm = binaries.ensure("helm")
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_helm_lint_strict_is_clean() -> None:
    done = _helm("lint", "--strict", str(chart_dir()))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("image.digest=latest", "/image/digest"),
        ("replicaCount=-1", "/replicaCount"),
        ("logFormat=yaml", "/logFormat"),
        ("podSecurityContext.runAsUser=0", "/podSecurityContext/runAsUser"),
        ("podSecurityContext.runAsNonRoot=false", "/podSecurityContext/runAsNonRoot"),
        (
            "securityContext.allowPrivilegeEscalation=true",
            "/securityContext/allowPrivilegeEscalation",
        ),
        ("agent.nvidiaSmi.source=host", "/agent/nvidiaSmi/source"),
        ("agent.nvidiaSmi.hostPath.binary=nvidia-smi", "/agent/nvidiaSmi/hostPath/binary"),
        ("agent.liveness.port=70000", "/agent/liveness/port"),
        ("metrics.port=http", "/metrics/port"),
        ("cleanup.enabled=maybe", "/cleanup/enabled"),
        ("config.mode=fix", "/config/mode"),
        ("config.devicePlugin.namespace=Kube_System", "/config/devicePlugin/namespace"),
        ("imagePullSecret[0].name=x", "imagePullSecret"),  # a typo of a top-level key
    ],
)
def test_bad_values_are_refused_naming_the_field(value: str, field: str) -> None:
    for command in ("lint", "template"):
        args = [command, str(chart_dir()), "--set", value]
        if command == "lint":
            args.insert(1, "--strict")
        else:
            args += ["--kube-version", binaries.KUBERNETES_VERSION]
        done = _helm(*args)
        assert done.returncode != 0, f"helm {command} accepted {value}"
        assert field in done.stdout + done.stderr, done.stdout + done.stderr

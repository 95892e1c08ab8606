"""The knobs a platform team sets render where they belong: global.imageRegistry on every image,
affinity and topology spread for the controller's replicas, pod labels and annotations, extra
args and env, ServiceAccount annotations; NOTES.txt says what to do next; the `helm test` Pod
runs `vgpu-operator doctor` (kwok runs no test Pod, so its manifest is checked here)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.kit.chart_pods import one_pod, pods
from vgpu_devcluster import binaries
from vgpu_devcluster.install import chart_dir, render_chart
from vgpu_operator.commands.cli import build_parser


def _by_kind(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    return doc


def test_global_image_registry_replaces_the_registry_of_every_image() -> None:
    docs = render_chart(values={"global.imageRegistry": "mirror.example:5000/gpu"})
    images = {c["image"] for _, pod in pods(docs) for c in pod["containers"]}
    assert images == {"mirror.example:5000/gpu/vgpu-operator/vgpu-operator:0.1.0"}
    kinds = {d["kind"] for d in docs if d["kind"] in ("Deployment", "DaemonSet", "Job", "Pod")}
    assert kinds == {"Deployment", "DaemonSet", "Job", "Pod"}  # every pod of the chart
    # a repository without a registry host gets one in front
    docs = render_chart(values={"global.imageRegistry": "r.example", "image.repository": "me/op"})
    assert {c["image"] for _, p in pods(docs) for c in p["containers"]} == {"r.example/me/op:0.1.0"}


def test_controller_replicas_spread_over_nodes_by_default_and_take_affinity() -> None:
    pod = one_pod(render_chart("deployment.yaml"), "Deployment")
    [spread] = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["labelSelector"] == {
        "matchLabels": {
            "app.kubernetes.io/name": "vgpu-operator",
            "app.kubernetes.io/component": "controller",
        }
    }
    assert set(pod["affinity"]) == {"nodeAffinity"}  # off GPU nodes (test_chart_least_privilege)
    term = "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
    values = {f"{term}.topologyKey": "kubernetes.io/hostname", "topologySpreadConstraints": "null"}
    pod = one_pod(render_chart("deployment.yaml", values=values), "Deployment")
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == [{"topologyKey": "kubernetes.io/hostname"}]
    assert "topologySpreadConstraints" not in pod


def test_pod_labels_annotations_extra_args_and_env() -> None:
    values = {
        "podLabels.team": "gpu",
        "podLabels.app\\.kubernetes\\.io/component": "hijack",
        "podAnnotations.example\\.com/owner": "platform",
        "extraArgs[0]": "--resync=60",
        "extraEnv[0].name": "HTTPS_PROXY",
        "extraEnv[0].value": "http://proxy:3128",
        "agent.podLabels.team": "gpu",
        "agent.podAnnotations.a": "b",
        "agent.extraArgs[0]": "--retry=10",
        "agent.extraEnv[0].name": "X",
        "agent.extraEnv[0].value": "y",
    }
    docs = render_chart("deployment.yaml", "agent-daemonset.yaml", values=values)
    for kind, component, arg, env in (
        ("Deployment", "controller", "--resync=60", "HTTPS_PROXY"),
        ("DaemonSet", "agent", "--retry=10", "X"),
    ):
        template = _by_kind(docs, kind)["spec"]["template"]
        labels = template["metadata"]["labels"]
        assert labels["team"] == "gpu"
        assert labels["app.kubernetes.io/component"] == component  # the selector's label wins
        assert template["metadata"]["annotations"]
        [container] = template["spec"]["containers"]
        assert container["args"][-1] == arg
        assert env in {e["name"] for e in container["env"]}
    controller = _by_kind(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert controller["example.com/owner"] == "platform" and "checksum/config" in controller


def test_service_account_annotations() -> None:
    values = {
        "serviceAccount.annotations.iam\\.example/role": "ctl",
        "agent.serviceAccount.annotations.iam\\.example/role": "agent",
    }
    docs = render_chart("serviceaccount.yaml", "agent-serviceaccount.yaml", values=values)
    assert _by_kind(docs, "ServiceAccount", "operator")["metadata"]["annotations"] == {
        "iam.example/role": "ctl"
    }
    assert _by_kind(docs, "ServiceAccount", "-agent")["metadata"]["annotations"] == {
        "iam.example/role": "agent"
    }
    assert (
        "annotations"
        not in _by_kind(render_chart("serviceaccount.yaml"), "ServiceAccount")["metadata"]
    )


def test_helm_test_pod_runs_doctor_with_the_release_config() -> None:
    [pod] = render_chart("tests/doctor.yaml")
    assert pod["kind"] == "Pod"
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["serviceAccountName"] == "vgpu-operator"
    [container] = spec["containers"]
    assert container["args"] == ["doctor", "--config=/etc/vgpu-operator/config.yaml"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    [config] = [v for v in spec["volumes"] if v["name"] == "config"]
    assert config["configMap"]["name"] == "vgpu-operator-config"
    # the args are what the CLI takes
    args = build_parser().parse_args(container["args"])
    assert args.command == "doctor" and args.config == "/etc/vgpu-operator/config.yaml"
    assert render_chart(values={"tests.enabled": "false"}) == [
        d for d in render_chart() if d["kind"] != "Pod"
    ]


def test_notes_say_what_to_do_next(tmp_path: Path) -> None:
    """NOTES.txt rendered through a copy of the chart with one more template that includes it
    (`helm install --dry-run` needs a cluster; `helm template` leaves NOTES out)."""
    chart = tmp_path / "vgpu-operator"
    shutil.copytree(chart_dir(), chart)
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n"
        '  notes: {{ include (print $.Template.BasePath "/NOTES.txt") . | quote }}\n'
    )
    out = subprocess.run(
        [
            str(binaries.ensure("helm")),
            "template",
            "demo",
            str(chart),
            "-n",
            "gpu",
            "--set",
            "config.mode=observe",
            "--show-only",
            "templates/zz-notes.yaml",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    notes = yaml.safe_load(out)["data"]["notes"]
    assert "helm test demo -n gpu" in notes
    assert "vgpu-operator plan -f" in notes
    assert "--reuse-values --set config.mode=enforce" in notes

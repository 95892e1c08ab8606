"""The chart tells the controller which admission policies are its own: one hash of
admission-policies.yaml as rendered, in every policy and binding (an annotation) and in the
operator configuration with the policies' names; the controller reads them by name (RBAC by
resourceNames), and its pod restarts when they change. As rendered by `helm template`, with no
flags and with values."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from vgpu_devcluster import binaries
from vgpu_devcluster.install import chart_dir, render_chart
from vgpu_operator.core.admission import verdict as ap
from vgpu_operator.models.config import OperatorConfig, load_config

Doc = dict[str, Any]
KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def _no_flags() -> list[Doc]:
    done = subprocess.run(
        [str(binaries.ensure("helm")), "template", str(chart_dir())],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _config(docs: list[Doc]) -> OperatorConfig:
    [cm] = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config")
    ]
    return load_config(cm["data"]["config.yaml"])


def _admission(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] in KINDS]


def _rendered(values: dict[str, str] | None = None) -> list[Doc]:
    return render_chart("admission-policies.yaml", "configmap.yaml", values=values)


def test_helm_template_with_no_flags_renders_the_same_hash_into_each_policy_and_the_config() -> (
    None
):
    docs = _no_flags()
    config = _config(docs)
    expected = config.admission_policies
    assert expected is not None and config.require_admission_policies
    objects = _admission(docs)
    assert len(objects) == 6
    hashes = {d["metadata"]["annotations"][ap.ANN_HASH] for d in objects}
    assert hashes == {expected.hash}
    policies = [d["metadata"]["name"] for d in objects if d["kind"] == KINDS[0]]
    bindings = [d["metadata"]["name"] for d in objects if d["kind"] == KINDS[1]]
    assert sorted(expected.names) == sorted(policies) == sorted(bindings)


def test_the_chart_rendering_passes_the_controllers_own_reading() -> None:
    """What the chart renders is what the controller's check accepts (read-only: the dry run
    needs an apiserver, tests/cluster/test_admission_check.py)."""
    docs = _rendered()
    config = _config(docs)
    seen = ap.Observation(
        {d["metadata"]["name"]: ap.seen_policy(d) for d in docs if d["kind"] == KINDS[0]},
        {d["metadata"]["name"]: ap.seen_binding(d) for d in docs if d["kind"] == KINDS[1]},
    )
    verdict = ap.judge(config, seen, None)
    assert (verdict.writes, verdict.reason) == (True, "Enforced"), verdict.message


@pytest.mark.parametrize(
    "values",
    [
        {"admissionPolicies.evictions.deniedNamespaces": "{team-a}"},
        {"rbac.pluginPodLabels.volcano-device-plugin.name": "another-plugin"},
        {"config.scheduler.deployment.name": "my-scheduler"},
        {"agent.enabled": "false"},
        {"fullnameOverride": "other"},
    ],
)
def test_the_hash_changes_when_a_policy_changes(values: dict[str, str]) -> None:
    before, after = _rendered(), _rendered(values)
    old, new = _config(before).admission_policies, _config(after).admission_policies
    assert old is not None and new is not None
    assert old.hash != new.hash
    assert {d["metadata"]["annotations"][ap.ANN_HASH] for d in _admission(after)} == {new.hash}


def test_a_value_no_policy_reads_leaves_the_hash_alone() -> None:
    before = _config(_rendered()).admission_policies
    after = _config(_rendered({"config.mode": "report", "replicaCount": "3"})).admission_policies
    assert before == after


def test_without_the_agent_its_policy_is_neither_rendered_nor_expected() -> None:
    config = _config(_rendered({"agent.enabled": "false"}))
    assert config.admission_policies is not None
    assert sorted(config.admission_policies.names) == [
        "vgpu-operator-objects",
        "vgpu-operator-workloads",
    ]


def test_leaving_the_policies_out_needs_the_explicit_way_out() -> None:
    with pytest.raises(subprocess.CalledProcessError) as refused:
        render_chart("configmap.yaml", values={"admissionPolicies.enabled": "false"})
    assert "config.requireAdmissionPolicies: false" in str(refused.value.stderr)
    docs = render_chart(
        "configmap.yaml",
        values={"admissionPolicies.enabled": "false", "config.requireAdmissionPolicies": "false"},
    )
    config = _config(docs)
    assert config.admission_policies is None and not config.require_admission_policies
    rules = render_chart(
        "clusterrole.yaml",
        values={"admissionPolicies.enabled": "false", "config.requireAdmissionPolicies": "false"},
    )[0]["rules"]
    assert not [r for r in rules if "admissionregistration.k8s.io" in r["apiGroups"]]


def test_admission_policies_in_the_values_are_refused_naming_the_key() -> None:
    given = {"config.admissionPolicies.hash": "a" * 64, "config.admissionPolicies.names": "{x}"}
    with pytest.raises(subprocess.CalledProcessError) as refused:
        render_chart("configmap.yaml", values=given)
    assert "config.admissionPolicies: the chart renders it" in str(refused.value.stderr)


def test_the_controller_may_read_exactly_its_policies_and_bindings_by_name() -> None:
    [role] = render_chart("clusterrole.yaml")
    [rule] = [r for r in role["rules"] if "admissionregistration.k8s.io" in r["apiGroups"]]
    config = _config(_rendered())
    assert config.admission_policies is not None
    assert rule == {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
        "resourceNames": config.admission_policies.names,
        "verbs": ["get", "list", "watch"],
    }


def test_changed_policies_restart_the_controller() -> None:
    """The controller reads its configuration once: a new hash must reach it."""

    def checksum(values: dict[str, str] | None = None) -> str:
        [dep] = render_chart("deployment.yaml", values=values)
        return str(dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert checksum() != checksum({"admissionPolicies.evictions.deniedNamespaces": "{team-a}"})

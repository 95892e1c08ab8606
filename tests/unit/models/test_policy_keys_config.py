"""The operator config's `policyKeys` (models.policy_keys): keys and prefixes ending in `/`, read
from the file; Kubernetes' own keys and malformed entries refused naming the entry and the fix;
unset, nothing is limited."""

from __future__ import annotations

import pytest

from vgpu_operator.models.config import ConfigError, OperatorConfig, load_config


def test_keys_and_prefixes_are_read_and_unset_limits_nothing() -> None:
    config = load_config(
        "policyKeys:\n  labels: [volcano.sh/, ascend, example.com/pool]\n  taints: [volcano.sh/]\n"
    )
    assert config.policy_keys is not None
    assert config.policy_keys.labels == ["volcano.sh/", "ascend", "example.com/pool"]
    assert config.policy_keys.taints == ["volcano.sh/"]
    assert OperatorConfig().policy_keys is None
    assert load_config("policyKeys: {}\n").policy_keys is not None  # both lists empty


@pytest.mark.parametrize(
    ("text", "path", "words"),
    [
        (
            "policyKeys: {labels: [volcano.sh/, node-role.kubernetes.io/]}",
            "policyKeys.labels[1]",
            "under kubernetes.io/ or k8s.io/",
        ),
        ("policyKeys: {taints: [k8s.io/x]}", "policyKeys.taints[0]", "Kubernetes' own keys"),
        ("policyKeys: {labels: ['Example.com/']}", "policyKeys.labels[0]", "is not valid here"),
        ("policyKeys: {labels: ['a b']}", "policyKeys.labels[0]", "is not valid here"),
        ("policyKeys: {annotations: [x]}", "policyKeys.annotations", "unknown key"),
    ],
)
def test_bad_entries_are_refused_naming_the_entry(text: str, path: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(text)
    [issue] = err.value.issues
    assert issue.path == path and words in issue.message, issue
    assert issue.fix

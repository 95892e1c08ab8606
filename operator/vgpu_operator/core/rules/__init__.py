"""Consistency rules: pure functions over a `ClusterSnapshot`, each yielding `Issue`s.

Importing this package registers every rule (one module per theme); `run_rules` runs them and
returns `Finding`s: the issues with the id of the rule that reported them.
"""

from __future__ import annotations

# The import order is the order of the rules in reports: scheduler conf, ConfigMaps, vnpus, plugin
# names and flags, plugin DaemonSets, second owners of the GPUs, the DRA pools, versions, nodes,
# the knownMigGeometries entries, the bounds on what nodes write, the policies' node keys, pods,
# legacy and Ascend MindCluster, then the payloads that do not parse.
# isort: off
from vgpu_operator.core.rules import scheduler  # noqa: F401
from vgpu_operator.core.rules import configmaps  # noqa: F401
from vgpu_operator.core.rules import vnpus  # noqa: F401
from vgpu_operator.core.rules import plugin  # noqa: F401
from vgpu_operator.core.rules import plugin_daemonsets  # noqa: F401
from vgpu_operator.core.rules import second_owners  # noqa: F401
from vgpu_operator.core.rules import dra  # noqa: F401
from vgpu_operator.core.rules import versions  # noqa: F401
from vgpu_operator.core.rules import nodes  # noqa: F401
from vgpu_operator.core.rules import mig_groups  # noqa: F401
from vgpu_operator.core.rules import node_bounds  # noqa: F401
from vgpu_operator.core.rules import policy_keys  # noqa: F401
from vgpu_operator.core.rules import pods  # noqa: F401
from vgpu_operator.core.rules import legacy_ascend  # noqa: F401
from vgpu_operator.core.rules import payloads  # noqa: F401
from vgpu_operator.core.rules import admission  # noqa: F401

# isort: on
from vgpu_operator.core.rules.base import (
    RULES,
    Finding,
    Issue,
    ObjectRef,
    Rule,
    RuleResults,
    Severity,
    rule,
    run_rules,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot

__all__ = [
    "RULES",
    "ClusterSnapshot",
    "Finding",
    "Issue",
    "ObjectRef",
    "Rule",
    "RuleResults",
    "Severity",
    "rule",
    "run_rules",
]

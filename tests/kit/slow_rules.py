"""Rules that misbehave on purpose, imported only by a test's rules worker (never registered in
the test process itself): one never ends and one kills its process, when the snapshot holds a
ConfigMap of that name."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from vgpu_operator.core.rules.base import Issue, rule
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, name_of


def _has(s: ClusterSnapshot, name: str) -> bool:
    return any(name_of(cm) == name for cm in s.configmaps)


@rule("test-never-ends", "a rule that loops while the snapshot says so")
def never_ends(s: ClusterSnapshot) -> Iterator[Issue]:
    while _has(s, "test-never-ends"):
        time.sleep(0.05)
    yield from ()


@rule("test-crashes", "a rule that ends its process when the snapshot says so")
def crashes(s: ClusterSnapshot) -> Iterator[Issue]:
    if _has(s, "test-crashes"):
        os._exit(3)
    yield from ()

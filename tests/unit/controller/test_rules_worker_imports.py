"""What the rules worker loads: the rules and what they read, not the controller's shell. The
worker is a process of its own beside the controller for as long as the controller runs, so
every module it imports is resident twice (bench/process_floor.py measures both sets). The check
runs in a fresh interpreter that imports what the worker process (`python -m` of
`rules_worker.WORKER_MAIN`) imports before it reads its first snapshot."""

from __future__ import annotations

import json
import subprocess
import sys

from vgpu_operator import lazy_client
from vgpu_operator.controller import rules_worker

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""
# The controller's frame, its API client and transport, its metrics, and the shell around the
# rules: none of it is needed to run a rule over a snapshot.
NOT_LOADED = (
    "kopf",
    "aiohttp",
    "kubernetes_asyncio",
    "prometheus_client",
    "asyncio",
    "vgpu_operator.kubeapi",
    "vgpu_operator.commands",
    "vgpu_operator.agent",
    "vgpu_operator.controller.app",
    "vgpu_operator.controller.volcano",
    "vgpu_operator.controller.snapshot",
)


def test_the_worker_loads_the_rules_and_none_of_the_shell() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, rules_worker.WORKER_MAIN, *rules_worker.MODULES],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    # `vgpu_operator` puts its two lazy packages in their place (vgpu_operator/lazy_client.py):
    # empty until a name is used, and no name is
    modules = set(json.loads(out.stdout)) - set(lazy_client.PACKAGES)
    assert "vgpu_operator.core.rules.nodes" in modules  # the rules are registered
    loaded = [m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_LOADED)]
    assert loaded == []

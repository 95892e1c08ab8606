"""Shared pytest set-up: cluster tests are marked by their folder; SIGTERM acts like Ctrl-C."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

CLUSTER_DIR = Path(__file__).parent / "cluster"


def pytest_configure(config: pytest.Config) -> None:
    # An interrupted run (Ctrl-C or SIGTERM) still tears the control plane down: pytest turns
    # KeyboardInterrupt into an orderly session finish that runs fixture finalizers.
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if CLUSTER_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)

"""Fixtures for the agent tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kit.smi_samples import FakeNode, make_node


@pytest.fixture
def fake_node(tmp_path: Path) -> Callable[..., FakeNode]:
    """make(model, count, *, timeout=20.0, mig=False, driver_version=...) -> FakeNode."""

    def make(model: str, count: int, **kwargs: object) -> FakeNode:
        return make_node(tmp_path, model, count, **kwargs)  # type: ignore[arg-type]

    return make

"""Fixtures for the dev tools' tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kit.smi_samples import InProcessSmi


@pytest.fixture
def fake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> InProcessSmi:
    """The fake nvidia-smi, called in process on its own state file."""
    return InProcessSmi(tmp_path, monkeypatch, capsys)

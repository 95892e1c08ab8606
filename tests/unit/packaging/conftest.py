"""The operator's wheel, built once per session the way the Dockerfile builds it: from exactly
the files its COPY instructions take (less .dockerignore), with `pip wheel --no-deps`."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.kit.dockerfile import build_context


@pytest.fixture(scope="session")
def context(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("context")
    return root, build_context(root)


@pytest.fixture(scope="session")
def wheel(context: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(context[0]), "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    [built] = out.glob("vgpu_operator-*.whl")
    return built


@pytest.fixture(scope="session")
def unpacked(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel's files as an install puts them in site-packages."""
    root = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(root)
    return root

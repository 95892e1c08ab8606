"""The wheel the image installs: everything `run`, `agent`, `doctor` and `cleanup` import, the
`vgpu-operator` console script, and none of the local-cluster tools (devtools/)."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.kit.dockerfile import ROOT

COMMANDS = ("run", "agent", "doctor", "cleanup")


def test_build_context_holds_the_operator_and_no_devtools(context: tuple[Path, list[str]]) -> None:
    _, copied = context
    assert "pyproject.toml" in copied
    assert "operator/vgpu_operator/commands/cli.py" in copied
    assert not [p for p in copied if p.startswith(("devtools/", "tests/", "charts/"))]
    assert not [p for p in copied if "__pycache__" in p or "egg-info" in p]


def test_wheel_holds_the_package_and_the_console_script_only(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = configparser.ConfigParser()
        scripts.read_string(z.read(entry_points).decode())
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"vgpu_operator"}, top
    assert not [n for n in names if "devcluster" in n or "fake" in n.lower()]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert dict(scripts["console_scripts"]) == project["project"]["scripts"]
    assert scripts["console_scripts"]["vgpu-operator"] == "vgpu_operator.commands.cli:main"
    # every module of the package in the checkout is in the wheel (a new subpackage without
    # an __init__.py, or left out of packages.find, would be missing from the image)
    source = ROOT / "operator"
    modules = {
        p.relative_to(source).as_posix()
        for p in (source / "vgpu_operator").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert modules <= set(names), sorted(modules - set(names))
    assert "vgpu_operator/py.typed" in names


def _isolated_python(unpacked: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Python with only the unpacked wheel and the third-party dependencies on sys.path: no
    site processing (so the checkout's editable installs of vgpu_operator and vgpu_devcluster
    are not on it), no PYTHONPATH, no current directory."""
    purelib = sysconfig.get_paths()["purelib"]
    bootstrap = (
        "import sys; "
        f"sys.path[:] = [{str(unpacked)!r}] + [p for p in sys.path if 'site-packages' not in p]"
        f" + [{purelib!r}]; "
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", bootstrap + code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=unpacked,
        timeout=120,
    )


def test_every_module_imports_from_the_wheel_without_the_devtools(unpacked: Path) -> None:
    code = """
import importlib, pkgutil, sys
import vgpu_operator
assert vgpu_operator.__file__.startswith(sys.argv[1]), vgpu_operator.__file__
try:
    import vgpu_devcluster
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("vgpu_devcluster is importable: " + vgpu_devcluster.__file__)
names = [m.name for m in pkgutil.walk_packages(vgpu_operator.__path__, "vgpu_operator.")]
for name in names:
    importlib.import_module(name)
leaked = sorted(m for m in sys.modules if m.startswith("vgpu_devcluster"))
assert not leaked, leaked
print(len(names))
"""
    done = _isolated_python(unpacked, code, str(unpacked))
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) > 50


@pytest.mark.parametrize("command", COMMANDS)
def test_each_image_command_runs_from_the_wheel(unpacked: Path, command: str) -> None:
    code = "import sys; from vgpu_operator.commands.cli import main; sys.exit(main(sys.argv[1:]))"
    done = _isolated_python(unpacked, code, command, "--help")
    assert done.returncode == 0, done.stderr
    assert f"vgpu-operator {command}" in done.stdout


def test_the_shipped_cli_has_no_local_cluster_commands(unpacked: Path) -> None:
    """`demo` and the control plane are `vgpu-dev`'s (devtools/), never the image's command."""
    code = "import sys; from vgpu_operator.commands.cli import main; sys.exit(main(sys.argv[1:]))"
    for command in ("demo", "dev-cluster"):
        done = _isolated_python(unpacked, code, command)
        assert done.returncode == 2
        assert "invalid choice" in done.stderr

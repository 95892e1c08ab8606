"""The CLI's error matrix: every command given a bad path, an unreachable server
(127.0.0.1:1) or a bad file prints a message, no traceback, and exits with the code of the one
table (commands/exitcodes.py: 0 clean, 1 findings or changes, 2 usage, 3 cannot reach or read),
which every command's --help shows."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from vgpu_operator.commands import cli, exitcodes, kubectl_plugin

REPO = Path(__file__).resolve().parents[3]
POLICIES = REPO / "examples" / "demo" / "policies.yaml"
UNREACHABLE = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""
BAD_CONFIG = "onDelete: Delet\n"
NOT_YAML = "a: [b\n"
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
CONFIGMAP_JSON = '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}\n'
NEWER_SNAPSHOT = (
    '{"kind": "VGPUClusterSnapshot", "formatVersion": 99, "writtenBy": "vgpu-operator 9"}'
)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    out = {}
    for name, text in (
        ("kubeconfig", UNREACHABLE),
        ("bad_config", BAD_CONFIG),
        ("not_yaml", NOT_YAML),
        ("configmap", CONFIGMAP),
        ("configmap_json", CONFIGMAP_JSON),
        ("newer_snapshot", NEWER_SNAPSHOT),
    ):
        (tmp_path / name).write_text(text)
        out[name] = str(tmp_path / name)
    out["dir"] = str(tmp_path)
    return out


def _run(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str]:
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # main's SIGTERM handler
    monkeypatch.delenv("KUBECONFIG", raising=False)
    main = kubectl_plugin.main if argv[0] == "kubectl-vgpu" else cli.main
    try:
        code = main(argv[1:])
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


CASES: list[tuple[str, list[str], int, str]] = [
    # a bad path
    ("doctor-config", ["vgpu-operator", "doctor", "--config", "/nope.yaml"], 3, "/nope.yaml"),
    ("doctor-kc", ["vgpu-operator", "doctor", "--kubeconfig", "/nope"], 3, "/nope"),
    (
        "plan-f",
        ["vgpu-operator", "plan", "-f", "/nope.yaml", "--kubeconfig", "{kubeconfig}"],
        3,
        "/nope.yaml",
    ),
    ("plan-config", ["vgpu-operator", "plan", "x", "--config", "/nope.yaml"], 3, "/nope.yaml"),
    ("cleanup-config", ["vgpu-operator", "cleanup", "--config", "/nope.yaml"], 3, "/nope.yaml"),
    ("run-config", ["vgpu-operator", "run", "--config", "/nope.yaml"], 3, "/nope.yaml"),
    ("run-kc", ["vgpu-operator", "run", "--kubeconfig", "/nope"], 3, "/nope"),
    ("agent-kc", ["vgpu-operator", "agent", "--node", "n1", "--kubeconfig", "/nope"], 3, "/nope"),
    ("get-kc", ["kubectl-vgpu", "get", "--kubeconfig", "/nope"], 3, "/nope"),
    (
        "plan-snapshot-missing",
        ["vgpu-operator", "plan", "x", "--snapshot", "/nope.json"],
        3,
        "cannot read snapshot /nope.json: no such file; save one with `vgpu-operator doctor",
    ),
    ("plan-snapshot-dir", ["vgpu-operator", "plan", "x", "--snapshot", "{dir}"], 3, "{dir}"),
    (
        "doctor-save-nodir",
        ["vgpu-operator", "doctor", "--save-snapshot", "/nope/s.json"],
        3,
        "cannot write snapshot /nope/s.json",
    ),
    # an unreachable server
    ("doctor-down", ["vgpu-operator", "doctor", "--kubeconfig", "{kubeconfig}"], 3, "127.0.0.1:1"),
    (
        "plan-down",
        ["vgpu-operator", "plan", "-f", str(POLICIES), "--kubeconfig", "{kubeconfig}"],
        3,
        "127.0.0.1:1",
    ),
    (
        "cleanup-down",
        ["vgpu-operator", "cleanup", "--dry-run", "--kubeconfig", "{kubeconfig}"],
        3,
        "127.0.0.1:1",
    ),
    (
        "get-down",
        ["kubectl-vgpu", "get", "-o", "json", "--kubeconfig", "{kubeconfig}"],
        3,
        "127.0.0.1:1",
    ),
    (
        "kubectl-doctor-down",
        ["kubectl-vgpu", "doctor", "--kubeconfig", "{kubeconfig}"],
        3,
        "127.0.0.1:1",
    ),
    # a bad file
    ("doctor-bad", ["vgpu-operator", "doctor", "--config", "{bad_config}"], 2, "onDelete"),
    ("plan-bad", ["vgpu-operator", "plan", "x", "--config", "{bad_config}"], 2, "onDelete"),
    ("cleanup-bad", ["vgpu-operator", "cleanup", "--config", "{bad_config}"], 2, "onDelete"),
    ("run-bad", ["vgpu-operator", "run", "--config", "{bad_config}"], 2, "onDelete"),
    (
        "plan-not-yaml",
        ["vgpu-operator", "plan", "-f", "{not_yaml}", "--kubeconfig", "{kubeconfig}"],
        2,
        "not_yaml",
    ),
    (
        "plan-configmap",
        ["vgpu-operator", "plan", "-f", "{configmap}", "--kubeconfig", "{kubeconfig}"],
        2,
        "ConfigMap",
    ),
    (
        "plan-snapshot-not-json",
        ["vgpu-operator", "plan", "x", "--snapshot", "{not_yaml}"],
        2,
        "{not_yaml} is not a cluster snapshot (not JSON",
    ),
    (
        "plan-snapshot-other-kind",
        ["vgpu-operator", "plan", "x", "--snapshot", "{configmap_json}"],
        2,
        "its kind is ConfigMap, not VGPUClusterSnapshot); save one with `vgpu-operator doctor",
    ),
    (
        "plan-snapshot-newer",
        ["vgpu-operator", "plan", "x", "--snapshot", "{newer_snapshot}"],
        2,
        "format version 99, written by vgpu-operator 9; this vgpu-operator",
    ),
    # usage
    (
        "plan-snapshot-kc",
        ["kubectl-vgpu", "plan", "x", "--snapshot", "{newer_snapshot}", "--context", "c"],
        2,
        "--snapshot reads no cluster",
    ),
    (
        "doctor-save-list-rules",
        ["vgpu-operator", "doctor", "--list-rules", "--save-snapshot", "{dir}/s.json"],
        2,
        "nothing to save",
    ),
    ("plan-usage", ["vgpu-operator", "plan", "-o", "bogus", "x"], 2, "invalid choice"),
    ("no-command", ["vgpu-operator"], 2, ""),
    ("cleanup-ref", ["vgpu-operator", "cleanup", "--stop-controller", "x"], 2, "NAMESPACE/NAME"),
]


@pytest.mark.parametrize(
    ("argv", "code", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_error_matrix(
    argv: list[str],
    code: int,
    says: str,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    got, err = _run([a.format(**files) for a in argv], capsys, monkeypatch)
    assert got == code, err
    assert says.format(**files) in err, err


def test_run_with_a_missing_kubeconfig_exits_at_once() -> None:
    """As a process: it used to retry in Kopf's startup handler forever."""
    proc = subprocess.run(
        [sys.executable, "-m", "vgpu_operator.commands.cli", "run", "--kubeconfig", "/nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == exitcodes.CANNOT, proc.stderr
    assert "Traceback" not in proc.stderr and "/nope" in proc.stderr


def test_every_help_shows_the_exit_code_table(capsys: pytest.CaptureFixture[str]) -> None:
    parser = cli.build_parser()
    commands = [a for a in parser._subparsers._group_actions[0].choices]  # type: ignore[union-attr]
    assert {"run", "agent", "doctor", "plan", "cleanup", "crds"} <= set(commands)
    for argv, main in [
        *((["vgpu-operator", c, "--help"], cli.main) for c in commands),
        (["vgpu-operator", "--help"], cli.main),
        (["kubectl-vgpu", "--help"], kubectl_plugin.main),
        (["kubectl-vgpu", "get", "--help"], kubectl_plugin.main),
    ]:
        with pytest.raises(SystemExit):
            main(argv[1:])
        out = capsys.readouterr().out
        assert "exit codes (the same for every command):" in out, argv
        assert "  3  cannot reach or cannot read" in out, argv


def test_the_docs_show_the_same_table() -> None:
    docs = (REPO / "docs" / "cli.md").read_text()
    for line in exitcodes.EPILOG.splitlines()[1:]:
        if line.startswith("  ") and line[2].isdigit():
            code, meaning = line.split(maxsplit=1)
            assert f"| {code} | {meaning.split(':')[0]}" in docs, line

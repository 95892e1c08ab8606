"""`--log-format`: text lines or one JSON object per line; text from the cluster (a ConfigMap's
multi-line content, control characters) forges no line in either."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from vgpu_operator import logs
from vgpu_operator.commands.cli import build_parser

FORGED = (
    "device-config.yaml:\n2026-01-01 00:00:00,000 ERROR vgpu_operator forged\u2028line\r\x1b[2J"
)


def record(message: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(
        "vgpu_operator.volcano", logging.WARNING, __file__, 1, message, args, None
    )


def test_json_is_one_escaped_object_per_line() -> None:
    line = logs.JsonFormatter({"node": "n1"}).format(record("not rendering %s: %s", "cm", FORGED))
    assert "\n" not in line and "\r" not in line and "\u2028" not in line
    data = json.loads(line)
    assert data["message"] == f"not rendering cm: {FORGED}"
    assert (data["level"], data["logger"], data["node"]) == (
        "WARNING",
        "vgpu_operator.volcano",
        "n1",
    )


def test_json_keeps_the_traceback_in_one_field() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    data = json.loads(logs.JsonFormatter().format(rec))
    assert "ValueError: bad\nvalue" in data["exception"]


def test_text_escapes_line_breaks_and_control_characters() -> None:
    line = logs.TextFormatter("%(levelname)s %(message)s").format(record("got %s", FORGED))
    assert line.count("\n") == 0 and "\x1b" not in line and "\u2028" not in line
    assert line.startswith("WARNING got device-config.yaml:\\n2026-01-01")


@pytest.mark.parametrize(
    "argv", [["run", "--log-format", "json"], ["agent", "--log-format", "json"]]
)
def test_controller_and_agent_take_the_option(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.log_format == "json"
    with pytest.raises(SystemExit):
        build_parser().parse_args([argv[0], "--log-format", "xml"])


def test_setup_routes_every_logger_through_the_format(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    try:
        logs.setup("json", fields={"node": "n1"})
        logging.getLogger("vgpu_operator.agent").warning("outcome: %s", FORGED)
        logging.getLogger("vgpu_operator.agent").debug("not shown at INFO")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved:
            root.addHandler(handler)
        root.setLevel(level)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    data = json.loads(lines[0])
    assert data["message"] == f"outcome: {FORGED}" and data["node"] == "n1"

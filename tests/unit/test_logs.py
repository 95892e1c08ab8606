"""`--log-format`: text lines or one JSON object per line; text from the cluster (a ConfigMap's
multi-line content, control characters) forges no line in either."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from tests.kit import hostile
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


# The review's misc02: NEL and the one-byte CSI (C1 controls) and RLO passed the text format
# unescaped; every line separator of Unicode and each control of C0, DEL and C1 is escaped now.
C1_AND_FRIENDS = [*hostile.LOG_CONTROLS, "\u2029", "\x80", "\x9f", "\x7f"]
SEPARATORS = ["\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("char", C1_AND_FRIENDS)
def test_text_escapes_c1_controls_bidi_overrides_and_separators(char: str) -> None:
    line = logs.TextFormatter("%(message)s").format(record("a%sb", char))
    assert char not in line
    assert line == "a" + char.encode("unicode_escape").decode("ascii") + "b"


def test_no_character_that_splits_a_line_or_controls_a_terminal_gets_through() -> None:
    every = "".join(chr(c) for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)])
    text = logs.escape(every + "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2069\ufeff")
    assert text.isascii() and text.isprintable()
    assert len(text.splitlines()) == 1
    assert all(len(("x" + s + "y").splitlines()) == 2 for s in SEPARATORS)  # what they would do
    # printable text, and letters beyond ASCII, are left alone
    assert logs.escape("GPU ü 日本 ok") == "GPU ü 日本 ok"


def test_a_traceback_keeps_its_lines_and_loses_its_controls() -> None:
    try:
        raise ValueError("bad\x85\x9b2Jvalue")
    except ValueError:
        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    text = logs.TextFormatter("%(message)s").format(rec)
    assert "\x85" not in text and "\x9b" not in text
    assert "ValueError: bad\\x85\\x9b2Jvalue" in text
    assert text.count("\n") >= 2  # "failed", "Traceback ...", the frames


def test_json_escapes_every_control_including_del() -> None:
    line = logs.JsonFormatter().format(record("%s", "".join(C1_AND_FRIENDS)))
    assert line.isascii() and line.isprintable()
    assert json.loads(line)["message"] == "".join(C1_AND_FRIENDS)
